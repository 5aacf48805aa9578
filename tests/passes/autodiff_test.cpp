// Every differentiable op: the generated gradient against central finite differences in
// float64, over shapes that exercise broadcasting and reductions; kinks tested on purpose.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <set>

#include <fmt/format.h>

#include "ir/builder.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/autodiff.h"
#include "runtime/gradcheck.h"

using namespace tgc;

namespace {

TensorType f64(Shape s) { return {DType::f64, std::move(s)}; }

Tensor randomTensor(const TensorType& t, std::mt19937_64& rng, double lo, double hi,
                    double avoid = NAN, double margin = 0) {
  Tensor r(t);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < r.numel(); ++i) {
    double v = u(rng);
    // Keep samples away from a kink so finite differences do not straddle it.
    while (!std::isnan(avoid) && std::fabs(v - avoid) < margin) v = u(rng);
    if (isFloat(t.dtype)) r.setF(i, v);
    else r.setI(i, static_cast<int64_t>(std::floor(v)));
  }
  return r;
}

struct Case {
  std::string name;
  double tolerance = 1e-6;
  // Builds the op under test from the graph's inputs; the harness adds
  // loss = reduce_sum(result * weights) so upstream gradients are not all ones.
  std::function<Value*(Builder&, std::vector<Value*>&)> build;
  std::vector<TensorType> inputs;
  std::vector<bool> differentiable;  // per input; default all float inputs
  double lo = -2, hi = 2, avoid = NAN, margin = 0;
  // Per-input value ranges when they differ (e.g. gather indices).
  std::map<size_t, std::pair<double, double>> ranges;
};

// Runs gradcheck for one case and returns the worst relative error.
double check(const Case& c) {
  Graph g(c.name);
  Builder b(g);
  std::mt19937_64 rng(std::hash<std::string>{}(c.name));
  std::vector<Value*> ins;
  std::map<std::string, Tensor> values;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    std::string n = "in" + std::to_string(i);
    ins.push_back(b.input(n, c.inputs[i]));
    auto [lo, hi] = c.ranges.count(i) ? c.ranges.at(i) : std::make_pair(c.lo, c.hi);
    values.emplace(n, randomTensor(c.inputs[i], rng, lo, hi, c.avoid, c.margin));
  }
  Value* y = c.build(b, ins);
  Value* w = b.input("weights", y->type());
  values.emplace("weights", randomTensor(y->type(), rng, -1, 1));
  std::vector<int64_t> all;
  for (int64_t i = 0; i < y->type().rank(); ++i) all.push_back(i);
  Value* prod = b.mul(y, w);
  Value* loss = all.empty() ? prod : b.reduce(OpKind::ReduceSum, prod, all, false, "loss");
  g.setOutputs({loss});
  EXPECT_TRUE(verifyGraph(g).empty());
  std::vector<std::string> wrt;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    bool diff = i < c.differentiable.size() ? c.differentiable[i] : isFloat(c.inputs[i].dtype);
    if (diff) wrt.push_back("in" + std::to_string(i));
  }
  double worst = 0;
  for (const auto& r : gradCheck(g, values, wrt, GradCheckOptions{.samples_per_tensor = 12})) {
    EXPECT_GT(r.checked, 0);
    EXPECT_LT(r.max_rel_error, c.tolerance)
        << c.name << " d/d" << r.name << ": analytic " << r.worst_analytic << " numeric "
        << r.worst_numeric;
    worst = std::max(worst, r.max_rel_error);
  }
  return worst;
}

Value* un(Builder& b, OpKind k, std::vector<Value*>& x) { return b.unary(k, x[0]); }

using BuildFn = std::function<Value*(Builder&, std::vector<Value*>&)>;
Case mk(std::string name, double tol, BuildFn build, std::vector<TensorType> inputs) {
  Case c;
  c.name = std::move(name);
  c.tolerance = tol;
  c.build = std::move(build);
  c.inputs = std::move(inputs);
  return c;
}

std::vector<Case> cases() {
  using V = std::vector<Value*>&;
  std::vector<Case> cs;
  auto unary = [&](OpKind k, double lo, double hi, double tol = 1e-6) {
    Case c = mk(std::string(opName(k)), tol, [k](Builder& b, V x) { return un(b, k, x); },
                {f64({3, 5})});
    c.lo = lo;
    c.hi = hi;
    cs.push_back(c);
  };
  unary(OpKind::Neg, -2, 2);
  unary(OpKind::Exp, -2, 2);
  unary(OpKind::Log, 0.2, 3);
  unary(OpKind::Sqrt, 0.2, 3);
  unary(OpKind::Rsqrt, 0.2, 3);
  unary(OpKind::Tanh, -2, 2);
  unary(OpKind::Erf, -2, 2);
  unary(OpKind::Sigmoid, -3, 3);
  unary(OpKind::Silu, -4, 4);
  {
    Case c = mk("abs", 1e-6, [](Builder& b, V x) { return b.unary(OpKind::Abs, x[0]); }, {f64({4, 3})});
    c.avoid = 0;
    c.margin = 0.05;
    cs.push_back(c);
    c.name = "relu";
    c.build = [](Builder& b, V x) { return b.relu(x[0]); };
    cs.push_back(c);
  }
  cs.push_back(mk("gelu", 1e-6, [](Builder& b, V x) { return b.gelu(x[0], false); }, {f64({2, 7})}));
  cs.push_back(mk("gelu_tanh", 1e-6, [](Builder& b, V x) { return b.gelu(x[0], true); }, {f64({2, 7})}));
  cs.push_back(mk("cast_f32_f64", 1e-5,
                [](Builder& b, V x) { return b.cast(b.cast(x[0], DType::f32), DType::f64); },
                {f64({5})}));
  // Binary ops with broadcasting in both directions.
  auto binary = [&](OpKind k, Shape a, Shape bs, double lo, double hi) {
    Case c = mk(fmt::format("{}_{}_{}", opName(k), shapeStr(a), shapeStr(bs)), 1e-6,
                [k](Builder& b, V x) { return b.binary(k, x[0], x[1]); }, {f64(a), f64(bs)});
    c.lo = lo;
    c.hi = hi;
    cs.push_back(c);
  };
  for (OpKind k : {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div}) {
    binary(k, {2, 3, 4}, {3, 1}, 0.5, 2);
    binary(k, {}, {2, 3}, 0.5, 2);
    binary(k, {4, 1}, {1, 5}, 0.5, 2);
  }
  binary(OpKind::Pow, {3, 4}, {4}, 0.5, 2);
  binary(OpKind::Maximum, {3, 4}, {1, 4}, -2, 2);
  binary(OpKind::Minimum, {3, 4}, {3, 1}, -2, 2);
  {
    Case c = mk("where", 1e-6, [](Builder& b, V x) {
             Value* cond = b.binary(OpKind::Gt, x[0], b.scalar(DType::f64, 0));
             return b.where(cond, x[1], x[2]);
           },
           {f64({3, 4}), f64({4}), f64({3, 1})});
    c.differentiable = {false, true, true};
    cs.push_back(c);
  }
  cs.push_back(mk("reduce_sum", 1e-6,
                [](Builder& b, V x) { return b.reduce(OpKind::ReduceSum, x[0], {0, -1}); },
                {f64({2, 3, 4})}));
  cs.push_back(mk("reduce_sum_keepdims", 1e-6,
                [](Builder& b, V x) { return b.reduce(OpKind::ReduceSum, x[0], {1}, true); },
                {f64({2, 3, 4})}));
  cs.push_back(mk("reduce_mean", 1e-6,
                [](Builder& b, V x) { return b.reduce(OpKind::ReduceMean, x[0], {-2}); },
                {f64({2, 3, 4})}));
  cs.push_back(mk("reduce_max", 1e-6,
                [](Builder& b, V x) { return b.reduce(OpKind::ReduceMax, x[0], {1}); },
                {f64({3, 5})}));
  cs.push_back(mk("softmax", 1e-6, [](Builder& b, V x) { return b.softmax(x[0], -1); }, {f64({3, 6})}));
  cs.push_back(mk("softmax_axis0", 1e-6, [](Builder& b, V x) { return b.softmax(x[0], 0); }, {f64({3, 6})}));
  cs.push_back(mk("log_softmax", 1e-6, [](Builder& b, V x) { return b.logSoftmax(x[0], 1); },
                {f64({2, 4, 3})}));
  cs.push_back(mk("layer_norm", 1e-5,
                [](Builder& b, V x) { return b.layerNorm(x[0], x[1], x[2], 1e-5); },
                {f64({2, 3, 8}), f64({8}), f64({8})}));
  cs.push_back(mk("rms_norm", 1e-5,
                [](Builder& b, V x) { return b.op(OpKind::RmsNorm, {x[0], x[1]}, {{"eps", 1e-5}}); },
                {f64({2, 3, 8}), f64({8})}));
  for (double eps : {0.0, 0.1}) {
    Case c = mk(eps > 0 ? "softmax_cross_entropy_smoothed" : "softmax_cross_entropy", 1e-6,
                [eps](Builder& b, V x) {
                  return b.op(OpKind::SoftmaxCrossEntropy, {x[0], x[1]}, {{"smoothing", eps}});
                },
                {f64({2, 3, 5}), TensorType{DType::i64, {2, 3}}});
    c.ranges[1] = {0, 5};
    cs.push_back(c);
  }
  // fused_attention: plain (Tq != Tk); causal with a key-padding mask that hides every key of
  // batch 0's first query (a fully masked row); dropout with a fixed seed and offset.
  cs.push_back(mk("fused_attention", 1e-6,
                [](Builder& b, V x) {
                  return b.op(OpKind::FusedAttention, {x[0], x[1], x[2]}, {{"scale", 0.7}});
                },
                {f64({2, 3, 4}), f64({2, 5, 4}), f64({2, 5, 3})}));
  cs.push_back(mk("fused_attention_causal_masked", 1e-6,
                [](Builder& b, V x) {
                  Value* m = b.constant(TensorType{DType::boolean, {2, 1, 4}},
                                        {0, 1, 1, 1, 1, 1, 0, 1}, "mask");
                  return b.op(OpKind::FusedAttention, {x[0], x[1], x[2], m},
                              {{"scale", 0.5}, {"causal", true}, {"has_mask", true}});
                },
                {f64({2, 4, 3}), f64({2, 4, 3}), f64({2, 4, 2})}));
  cs.push_back(mk("fused_attention_dropout", 1e-6,
                [](Builder& b, V x) {
                  Value* seed = b.scalar(DType::i64, 42, "seed");
                  Value* offset = b.scalar(DType::i64, 1000, "offset");
                  return b.op(OpKind::FusedAttention, {x[0], x[1], x[2], seed, offset},
                              {{"scale", 0.5}, {"p_drop", 0.4}});
                },
                {f64({1, 2, 6, 3}), f64({1, 2, 6, 3}), f64({1, 2, 6, 3})}));
  // fused_attention with an additive bias, differentiated too (bias_grad): broadcast over
  // the batch and the queries ([1, 1, 5], summed by dbias), and a full one under a causal
  // mask and a key-padding mask.
  cs.push_back(mk("fused_attention_bias", 1e-6,
                [](Builder& b, V x) {
                  return b.op(OpKind::FusedAttention, {x[0], x[1], x[2], x[3]},
                              {{"scale", 0.7}, {"has_bias", true}});
                },
                {f64({2, 3, 4}), f64({2, 5, 4}), f64({2, 5, 3}), f64({1, 1, 5})}));
  cs.push_back(mk("fused_attention_bias_causal_masked", 1e-6,
                [](Builder& b, V x) {
                  Value* m = b.constant(TensorType{DType::boolean, {2, 1, 4}},
                                        {0, 1, 1, 1, 1, 1, 0, 1}, "mask");
                  return b.op(OpKind::FusedAttention, {x[0], x[1], x[2], m, x[3]},
                              {{"scale", 0.5}, {"causal", true}, {"has_mask", true}, {"has_bias", true}});
                },
                {f64({2, 4, 3}), f64({2, 4, 3}), f64({2, 4, 2}), f64({2, 4, 4})}));
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      cs.push_back(mk(fmt::format("matmul_ta{}_tb{}", ta, tb), 1e-6,
                    [ta, tb](Builder& b, V x) { return b.matmul(x[0], x[1], ta, tb); },
                    {f64(ta ? Shape{2, 5, 3} : Shape{2, 3, 5}), f64(tb ? Shape{4, 5} : Shape{5, 4})}));
  cs.push_back(mk("matmul_batch_broadcast", 1e-6,
                [](Builder& b, V x) { return b.matmul(x[0], x[1]); },
                {f64({3, 1, 2, 4}), f64({2, 4, 3})}));
  cs.push_back(mk("reshape", 1e-6, [](Builder& b, V x) { return b.reshape(x[0], {4, 3}); }, {f64({2, 6})}));
  cs.push_back(mk("transpose", 1e-6, [](Builder& b, V x) { return b.transpose(x[0], {2, 0, 1}); },
                {f64({2, 3, 4})}));
  cs.push_back(mk("broadcast", 1e-6, [](Builder& b, V x) { return b.broadcast(x[0], {2, 3, 4}); },
                {f64({3, 1})}));
  cs.push_back(mk("slice", 1e-6, [](Builder& b, V x) { return b.slice(x[0], 1, 1, 4); }, {f64({2, 6})}));
  cs.push_back(mk("slice_strided", 1e-6, [](Builder& b, V x) { return b.slice(x[0], 0, 1, 7, 3); },
                {f64({8, 2})}));
  cs.push_back(mk("concat", 1e-6, [](Builder& b, V x) { return b.concat({x[0], x[1], x[0]}, -1); },
                {f64({2, 3}), f64({2, 1})}));
  {
    Case c = mk("gather", 1e-6, [](Builder& b, V x) { return b.gather(x[0], x[1]); },
                {f64({5, 3}), TensorType{DType::i64, {2, 4}}});
    c.ranges[1] = {0, 5};  // indices 0..4, repeats likely: gradients must accumulate
    cs.push_back(c);
    Case s = mk("scatter_add", 1e-6, [](Builder& b, V x) { return b.scatterAdd(x[0], x[1], 6); },
                {TensorType{DType::i32, {4}}, f64({4, 3})});
    s.ranges[0] = {0, 6};
    cs.push_back(s);
  }
  return cs;
}

}  // namespace

TEST(Autodiff, EveryOpMatchesFiniteDifferences) {
  std::set<std::string> seen;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    double worst = check(c);
    seen.insert(c.name);
    RecordProperty(c.name, fmt::format("{:.2e}", worst));
    fmt::print("gradcheck {:<28} worst relative error {:.2e}\n", c.name, worst);
  }
  EXPECT_GE(seen.size(), 40u);
}

TEST(Autodiff, EveryFloatOpHasACase) {
  // Ops whose results are float and take float operands must appear in some case above.
  std::set<std::string> names;
  for (const Case& c : cases()) names.insert(c.name);
  auto covered = [&](std::string_view op) {
    for (const auto& n : names)
      if (n == op || n.rfind(std::string(op) + "_", 0) == 0) return true;
    return false;
  };
  const std::set<std::string_view> exempt = {
      "input", "constant", "iota", "philox_uniform",      // sources
      "logical_not", "eq", "ne", "lt", "le", "gt", "ge",  // bool results
      "logical_and", "logical_or",
      "softmax_cross_entropy_grad", "layer_norm_grad",  // backward ops: no second derivatives
      "fused_attention_grad",
      "quantized_matmul",       // inference only (pass quantize)
      "dynamic_update_slice"};  // inference only (decoding caches)
  for (const OpInfo& op : allOps()) {
    if (exempt.count(op.name)) continue;
    EXPECT_TRUE(covered(op.name)) << "no gradient test for " << op.name;
  }
}

TEST(Autodiff, KinksAreDeliberate) {
  Graph g;
  Builder b(g);
  Value* x = b.input("x", f64({3}));
  Value* y = b.input("y", f64({3}));
  Value* r = b.relu(x);
  Value* m = b.binary(OpKind::Maximum, x, y);
  Value* rm = b.reduce(OpKind::ReduceMax, b.concat({x, x}, 0), {0});
  Value* loss = b.add(b.add(b.reduce(OpKind::ReduceSum, r, {0}), b.reduce(OpKind::ReduceSum, m, {0})), rm);
  g.setOutputs({loss});
  auto grads = appendGradients(g, loss, {x, y});
  g.setOutputs({grads[0], grads[1]});
  std::map<std::string, Tensor> in;
  in.emplace("x", Tensor(f64({3}), {0.0, 1.0, 2.0}));
  in.emplace("y", Tensor(f64({3}), {0.0, 1.0, -1.0}));
  auto out = Interpreter().run(g, in);
  // relu'(0) = 0; maximum ties split 1/2 each; reduce_max over [x, x]: the max 2.0 appears
  // twice (both copies of x[2]) and each copy gets 1/2, summing to 1 for x[2].
  EXPECT_EQ(out[0].toDoubles(), (std::vector<double>{0 + 0.5, 1 + 0.5, 1 + 1 + 1}));
  EXPECT_EQ(out[1].toDoubles(), (std::vector<double>{0.5, 0.5, 0}));
}

TEST(Autodiff, FanOutIsSummedAndUnusedParamsGetZeros) {
  Graph g;
  Builder b(g);
  Value* x = b.input("x", f64({2}), "param");
  Value* unused = b.input("unused", f64({3}), "param");
  Value* loss = b.reduce(OpKind::ReduceSum, b.mul(x, x), {0}, false, "loss");  // x used twice
  g.setOutputs({loss});
  auto grads = appendGradients(g, loss, trainableParameters(g));
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(grads[0]->name(), "grad.x");
  EXPECT_EQ(grads[1]->name(), "grad.unused");
  g.setOutputs(grads);
  EXPECT_TRUE(verifyGraph(g).empty());
  std::map<std::string, Tensor> in;
  in.emplace("x", Tensor(f64({2}), {3.0, -1.5}));
  in.emplace("unused", Tensor(f64({3})));
  auto out = Interpreter().run(g, in);
  EXPECT_EQ(out[0].toDoubles(), (std::vector<double>{6.0, -3.0}));
  EXPECT_EQ(out[1].toDoubles(), (std::vector<double>{0, 0, 0}));
  (void)unused;
}

TEST(Autodiff, RejectsNonScalarLoss) {
  Graph g;
  Builder b(g);
  Value* x = b.input("x", f64({2}));
  EXPECT_THROW(appendGradients(g, x, {x}), IRError);
}
