// Mixed precision (--precision bf16, passes/mixed_precision.cpp) on the tiny Transformer's
// training step: what stays f32, the step compiled for the CPU (bf16 GEMMs through
// codegen/gemm_bf16) against the interpreter running the same bf16 graph, and a short
// training run whose loss falls like the f32 run's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "frontend/frontend.h"
#include "ir/builder.h"
#include "ir/interpreter.h"
#include "passes/autodiff.h"
#include "passes/fusion.h"
#include "passes/mixed_precision.h"
#include "passes/passes.h"
#include "passes/train_step.h"
#include "runtime/executable.h"
#include "tests/runtime/exec_test_util.h"

using namespace tgc;

namespace {

constexpr int64_t kVocab = 24;
constexpr double kBeta1 = 0.9;

struct Step {
  std::unique_ptr<Graph> graph;
  std::vector<ParamInit> params;
};

// The tiny preset (dropout off) on B=3, S=7, T=6, as one training step in `precision`.
Step tinyStep(DType precision) {
  ModelOptions o;
  o.preset = "tiny";
  o.sets = {{"src_vocab", std::to_string(kVocab)}, {"tgt_vocab", std::to_string(kVocab)},
            {"p_drop", "0"}};
  o.dims = {{"B", 3}, {"S", 7}, {"T", 6}};
  CompiledModel m = compileModelFile(std::string(TGC_SOURCE_DIR) + "/models/transformer.tg", o);
  EXPECT_GE(m.loss_output, 0);
  m.graph->setOutputs({m.graph->outputs()[m.loss_output]});
  OptimizerConfig cfg;
  cfg.schedule = "constant";
  cfg.lr = 3e-3;
  cfg.beta1 = kBeta1;
  cfg.precision = precision;
  buildTrainStep(*m.graph, cfg);
  return {std::move(m.graph), m.params};
}

Tensor tokens(Shape shape, uint64_t seed, int64_t padFrom) {
  return tgc::testing::tokenIds(shape, seed, padFrom, kVocab);
}
using tgc::testing::scalarI64;

// The first step's inputs: a fixed batch, parameters from seed 5, zero moments.
std::map<std::string, Tensor> firstInputs(const Step& s) {
  std::map<std::string, Tensor> in;
  in.emplace("src", tokens({3, 7}, 1, 5));
  in.emplace("tgt_in", tokens({3, 6}, 2, 4));
  in.emplace("tgt_out", tokens({3, 6}, 3, 4));
  in.emplace("seed", scalarI64(77));
  in.emplace("step", scalarI64(1));
  for (auto& [k, v] : initParams(s.params, 5)) in.insert_or_assign(k, v);
  for (Node* n : s.graph->inputs())
    if (n->attrString("role") == "state") in.emplace(n->result()->name(), Tensor(n->result()->type()));
  return in;
}

// Every parameter's gradient at step 1, from Adam's first moment m = (1 - beta1) g, end to end.
std::vector<double> gradients(const Graph& g, const std::vector<Tensor>& out) {
  std::vector<double> grads;
  for (size_t i = 0; i < g.outputs().size(); ++i)
    if (g.outputs()[i]->name().starts_with("new.adam.m."))
      for (int64_t e = 0; e < out[i].numel(); ++e) grads.push_back(out[i].getF(e) / (1 - kBeta1));
  return grads;
}

double relativeL2(const std::vector<double>& x, const std::vector<double>& ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    d += (x[i] - ref[i]) * (x[i] - ref[i]);
    r += ref[i] * ref[i];
  }
  return std::sqrt(d / r);
}

}  // namespace

// bf16 only where the matmuls are: their operands' casts, the products, the weight gradients'
// sums over the batch (one contraction with the product on every backend), views, and the
// ReLU gradients between two matmuls' gradients (narrowReluGradients: a test of the bf16 copy
// of the ReLU's output against a bf16 zero, and a where of the bf16 gradient); the
// parameters, every output (the new f32 master weights and moments), layer_norm, softmax,
// the fused attention and cross-entropy and the optimizer stay f32; a weight is cast once (and
// maybe recomputed once for the backward).
TEST(MixedPrecision, OnlyTheMatmulsAreBf16) {
  const Step f32 = tinyStep(DType::f32);
  const Step bf16 = tinyStep(DType::bf16);
  auto count = [](const Graph& g, OpKind k, DType dt) {
    int n = 0;
    for (const auto& node : g.nodes())
      n += node->op() == k && node->result()->type().dtype == dt;
    return n;
  };
  EXPECT_GT(count(*f32.graph, OpKind::MatMul, DType::f32), 40);
  EXPECT_EQ(count(*bf16.graph, OpKind::MatMul, DType::bf16), count(*f32.graph, OpKind::MatMul, DType::f32));
  EXPECT_EQ(count(*bf16.graph, OpKind::MatMul, DType::f32), 0);
  if (forwardFusionsEnabled()) {
    EXPECT_GT(count(*bf16.graph, OpKind::FusedAttention, DType::f32), 0);
  }

  const std::set<OpKind> bf16Ops{OpKind::Cast,      OpKind::MatMul, OpKind::ReduceSum,
                                 OpKind::Reshape,   OpKind::Transpose, OpKind::Gt,
                                 OpKind::Where,     OpKind::Constant};
  int reluTests = 0;
  std::map<const Value*, int> weightCasts;
  for (const auto& n : bf16.graph->nodes()) {
    bool touches = n->numResults() == 1 && n->result()->type().dtype == DType::bf16;
    for (const Value* v : n->operands()) touches |= v->type().dtype == DType::bf16;
    if (!touches) continue;
    EXPECT_TRUE(bf16Ops.count(n->op())) << describeNode(*n);
    if (n->op() == OpKind::ReduceSum) {
      EXPECT_EQ(n->operand(0)->def()->op(), OpKind::MatMul) << describeNode(*n);
    }
    if (n->op() == OpKind::Cast && n->operand(0)->def()->op() == OpKind::Input)
      ++weightCasts[n->operand(0)];
    if (n->op() == OpKind::Gt) {  // relu(y) > 0 read from the bf16 copy the matmul keeps
      EXPECT_TRUE(n->operand(0)->def()->op() == OpKind::Cast &&
                  n->operand(0)->def()->operand(0)->def()->op() == OpKind::Relu)
          << describeNode(*n);
      ++reluTests;
    }
    if (n->op() == OpKind::Where) {  // the ReLU gradient: such a test, a bf16 zero fill
      EXPECT_EQ(n->operand(0)->def()->op(), OpKind::Gt) << describeNode(*n);
      EXPECT_EQ(n->operand(0)->def()->operand(0)->type().dtype, DType::bf16) << describeNode(*n);
      EXPECT_EQ(n->operand(2)->def()->op(), OpKind::Constant) << describeNode(*n);
    }
    if (n->op() == OpKind::Constant) {
      EXPECT_EQ(n->result()->type().rank(), 0) << describeNode(*n);
      EXPECT_EQ(n->attrFloats("value"), std::vector<double>{0.0}) << describeNode(*n);
    }
  }
  EXPECT_EQ(reluTests, 4);  // one per FFN: 2 encoder and 2 decoder layers
  EXPECT_GT(weightCasts.size(), 20u);
  // Once for the forward, and once more where passes/rematerialize.cpp recomputes the cast
  // for the backward instead of keeping the bf16 copy alive in between.
  for (const auto& [w, casts] : weightCasts) {
    EXPECT_GE(casts, 1) << w->name();
    EXPECT_LE(casts, 2) << w->name();
  }
  for (Node* in : bf16.graph->inputs())
    if (isFloat(in->result()->type().dtype)) {
      EXPECT_EQ(in->result()->type().dtype, DType::f32) << in->result()->name();
    }
  for (const Value* out : bf16.graph->outputs())
    EXPECT_EQ(out->type().dtype, DType::f32) << out->name();
}

// The bf16 step compiled for the CPU against the interpreter on the same graph. The
// interpreter sums each product in double and rounds once; the CPU sums in f32 and rounds
// once, so the f32 values that are cast to bf16 differ in their last bits, and a cast turns
// such a difference into a whole bf16 step now and then. The bf16 step is that sensitive by
// itself: parameters moved by 3e-7 (f32 noise) move the interpreter's loss by 6.9e-4 and its
// gradients by 1.6e-2 (L2; 2.9e-4 and 1.3e-2 with TGC_NO_FUSION=1, attention's matmuls bf16
// too). So the compiled step must be within 3x that noise of the interpreter (measured: 0 and
// 2.2e-3; 4.4e-4 and 1.7e-2 unfused), and the bf16 step must still differ from the f32 step.
// The bf16 GEMM itself is checked element by element in tests/codegen/gemm_bf16_test.cpp.
TEST(MixedPrecision, CompiledBf16StepMatchesInterpreter) {
  const Step bf16 = tinyStep(DType::bf16);
  const Step f32 = tinyStep(DType::f32);
  const auto in = firstInputs(bf16);
  auto exe = runtime::Executable::compile(*bf16.graph, tgc::testing::testExecOptions());
  const std::vector<Tensor> cpu = exe->run(in);
  Interpreter interp;
  const std::vector<Tensor> ref = interp.run(*bf16.graph, in);
  auto moved = in;
  for (const ParamInit& p : bf16.params) {
    Tensor& t = moved.at(p.name);
    for (int64_t e = 0; e < t.numel(); ++e) t.setF(e, t.getF(e) * (1 + 3e-7 * static_cast<double>(e % 3 - 1)));
  }
  const std::vector<Tensor> noisy = interp.run(*bf16.graph, moved);
  const std::vector<Tensor> full = interp.run(*f32.graph, firstInputs(f32));

  const double loss = ref[0].getF(0);
  auto lossDiff = [&](const std::vector<Tensor>& o) { return std::abs(o[0].getF(0) - loss) / loss; };
  const std::vector<double> g = gradients(*bf16.graph, ref);
  const double gradErr = relativeL2(gradients(*bf16.graph, cpu), g);
  const double gradNoise = relativeL2(gradients(*bf16.graph, noisy), g);
  const double gradVsF32 = relativeL2(g, gradients(*f32.graph, full));
  std::printf("bf16 step: loss %.6f; compiled vs interpreted: loss %.2e, gradients %.2e (L2); "
              "f32-noise sensitivity: loss %.2e, gradients %.2e; bf16 vs f32: loss %.2e, "
              "gradients %.2e\n",
              loss, lossDiff(cpu), gradErr, lossDiff(noisy), gradNoise, lossDiff(full), gradVsF32);
  EXPECT_LT(lossDiff(cpu), 3 * lossDiff(noisy) + 1e-6);
  EXPECT_LT(gradErr, 3 * gradNoise + 1e-3);
  // The bf16 step is not the f32 step in disguise ...
  EXPECT_GT(gradVsF32, 1e-4);
  // ... but a close approximation of it.
  EXPECT_LT(lossDiff(full), 2e-2);
  EXPECT_LT(gradVsF32, 1e-1);
}

// 30 compiled steps on one batch in each precision: the bf16 loss falls like the f32 loss,
// within 5% of the starting loss at every step (measured: 4.2995 -> 0.6229 and 4.3000 -> 0.6228).
TEST(MixedPrecision, Bf16TrainingFollowsF32) {
  std::map<DType, std::vector<double>> curves;
  for (DType dt : {DType::f32, DType::bf16}) {
    const Step s = tinyStep(dt);
    auto exe = runtime::Executable::compile(*s.graph, tgc::testing::testExecOptions());
    auto in = firstInputs(s);
    const auto& outs = s.graph->outputs();
    for (int step = 1; step <= 30; ++step) {
      in.insert_or_assign("step", scalarI64(step));
      std::vector<Tensor> out = exe->run(in);
      curves[dt].push_back(out[0].getF(0));
      for (size_t i = 0; i < outs.size(); ++i)  // new.X feeds X at the next step
        if (outs[i]->name().starts_with("new.")) in.insert_or_assign(outs[i]->name().substr(4), std::move(out[i]));
    }
  }
  const auto& a = curves[DType::f32];
  const auto& b = curves[DType::bf16];
  std::printf("loss f32 %.4f -> %.4f, bf16 %.4f -> %.4f over 30 steps\n", a.front(), a.back(),
              b.front(), b.back());
  EXPECT_LT(a.back(), 0.5 * a.front());
  EXPECT_LT(b.back(), 0.5 * b.front());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 0.05 * a.front()) << "step " << i + 1;
}

namespace {

// The tiny Transformer's loss and gradients in bf16 as buildTrainStep makes them, up to
// (not including) narrowReluGradients.
std::unique_ptr<Graph> tinyBf16Gradients(double ffnDropout) {
  ModelOptions o;
  o.preset = "tiny";
  o.sets = {{"src_vocab", std::to_string(kVocab)}, {"tgt_vocab", std::to_string(kVocab)},
            {"ffn_dropout", std::to_string(ffnDropout)}};
  o.dims = {{"B", 3}, {"S", 5}, {"T", 4}};
  CompiledModel m = compileModelFile(std::string(TGC_SOURCE_DIR) + "/models/transformer.tg", o);
  Graph& g = *m.graph;
  runForwardFusions(g);
  autocastMatmuls(g, /*castPerUse=*/true);
  Value* loss = g.outputs()[m.loss_output];
  std::vector<Value*> outs{loss};
  for (Value* gr : appendGradients(g, loss, trainableParameters(g))) outs.push_back(gr);
  g.setOutputs(outs);
  mergeCasts(g);
  PassContext ctx;
  runFuseFFN(g, ctx);
  return std::move(m.graph);
}

bool bitEqual(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

}  // namespace

// narrowReluGradients against the graph it rewrites, in the interpreter: the loss and every
// gradient bit for bit, with and without dropout inside the FFN (with it, fuse-ffn's test
// reads the dropout's output, and that is what is narrowed). Each FFN's test then reads a
// bf16 copy, and no f32 test or f32 ReLU gradient is left.
TEST(MixedPrecision, NarrowedReluGradientsAreBitIdentical) {
  for (double ffnDropout : {0.0, 0.1}) {
    SCOPED_TRACE(ffnDropout);
    const std::unique_ptr<Graph> plain = tinyBf16Gradients(ffnDropout);
    std::unique_ptr<Graph> narrow = plain->clone();
    EXPECT_EQ(narrowReluGradients(*narrow), ffnDropout > 0 ? 4 : 8);  // tests, + wheres
    EXPECT_EQ(narrowReluGradients(*narrow), 0);
    int tests = 0;
    for (const auto& n : narrow->nodes()) {
      if (n->op() != OpKind::Gt) continue;
      EXPECT_EQ(n->operand(0)->type().dtype, DType::bf16) << describeNode(*n);
      ++tests;
    }
    EXPECT_EQ(tests, 4);

    const auto in = tgc::testing::transformerInputs(*plain, 11, kVocab);
    const auto want = Interpreter().run(*plain, in);
    const auto got = Interpreter().run(*narrow, in);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(bitEqual(got[i], want[i])) << plain->outputs()[i]->name();
  }
}

// The one documented difference: an f32 ReLU input in (0, 2^-134] has a bf16 copy of 0, so
// its gradient is 0 (as at 0) instead of passing through. 2^-133, the smallest bf16, and
// every ordinary value pass as before.
TEST(MixedPrecision, NarrowedReluTestAtTheBf16Underflow) {
  auto build = [](bool narrowed) {
    auto g = std::make_unique<Graph>();
    Builder b(*g);
    Value* x = b.input("x", TensorType{DType::f32, {1, 8}}, "param");
    Value* w = b.input("w", TensorType{DType::f32, {8, 2}}, "param");
    Value* loss = b.reduce(OpKind::ReduceSum, b.matmul(b.relu(x), w), {0, 1});
    autocastMatmuls(*g, true);
    std::vector<Value*> grads = appendGradients(*g, loss, {x});
    g->setOutputs({loss, grads[0]});
    mergeCasts(*g);
    if (narrowed) {
      EXPECT_EQ(narrowReluGradients(*g), 2);
    }
    return g;
  };
  // 2^-140, 2^-133 (the smallest bf16), 0.5, -0.5, NaN, -0, +inf, -inf.
  const double inf = std::numeric_limits<double>::infinity();
  const double values[8] = {std::ldexp(1.0, -140), std::ldexp(1.0, -133), 0.5, -0.5,
                            std::nan(""), -0.0, inf, -inf};
  Tensor x(TensorType{DType::f32, {1, 8}}), w(TensorType{DType::f32, {8, 2}});
  for (int i = 0; i < 8; ++i) x.setF(i, values[i]);
  for (int i = 0; i < 16; ++i) w.setF(i, 0.25 * (i + 1));
  const std::map<std::string, Tensor> in{{"x", x}, {"w", w}};
  const auto before = Interpreter().run(*build(false), in);
  const auto after = Interpreter().run(*build(true), in);
  EXPECT_EQ(before[1].getF(0), 0.25 + 0.5);  // dx = the row of w, where x > 0
  EXPECT_EQ(after[1].getF(0), 0.0);          // 2^-140 rounds to a bf16 0
  for (int i = 1; i < 8; ++i) EXPECT_EQ(after[1].getF(i), before[1].getF(i)) << i;
  EXPECT_EQ(after[1].getF(1), 0.75 + 1.0);
  EXPECT_EQ(after[1].getF(6), 3.25 + 3.5);  // +inf passes
  for (int i : {3, 4, 5, 7}) EXPECT_EQ(after[1].getF(i), 0.0) << i;  // -0.5, NaN, -0, -inf
}

// A ReLU that reads a parameter: its gradient is the ReLU gradient narrowReluGradients
// replaces, so buildTrainStep must follow the rewrite (a dangling gradient was a crash or
// garbage). The bf16 step's update of W matches the f32 step's to bf16 accuracy.
TEST(MixedPrecision, ReluOfAParameterTrains) {
  auto step = [](DType precision) {
    auto g = std::make_unique<Graph>();
    Builder b(*g);
    Value* x = b.input("x", TensorType{DType::f32, {2, 3}});
    Value* w = b.input("w", TensorType{DType::f32, {3, 4}}, "param");
    g->setOutputs({b.reduce(OpKind::ReduceSum, b.matmul(x, b.relu(w)), {0, 1})});
    OptimizerConfig cfg;
    cfg.schedule = "constant";
    cfg.lr = 0.1;
    cfg.precision = precision;
    buildTrainStep(*g, cfg);
    return g;
  };
  Tensor x(TensorType{DType::f32, {2, 3}}), w(TensorType{DType::f32, {3, 4}});
  for (int i = 0; i < 6; ++i) x.setF(i, 0.5 + 0.25 * i);
  for (int i = 0; i < 12; ++i) w.setF(i, (i % 3 == 0 ? -1.0 : 1.0) * 0.125 * (i + 1));
  std::map<std::string, Tensor> in{{"x", x}, {"w", w}, {"step", scalarI64(1)}};
  in.emplace("adam.m.w", Tensor(w.type()));
  in.emplace("adam.v.w", Tensor(w.type()));
  std::map<DType, Tensor> moment;  // new.adam.m.w = (1 - beta1) * the clipped gradient
  for (DType dt : {DType::f32, DType::bf16}) {
    const auto g = step(dt);
    int narrowed = 0;
    for (const auto& n : g->nodes())
      narrowed += n->op() == OpKind::Gt && n->operand(0)->type().dtype == DType::bf16;
    EXPECT_EQ(narrowed, dt == DType::bf16 ? 1 : 0);
    const auto out = Interpreter().run(*g, in);
    for (size_t i = 0; i < g->outputs().size(); ++i)
      if (g->outputs()[i]->name() == "new.adam.m.w") moment.emplace(dt, out[i]);
  }
  ASSERT_EQ(moment.size(), 2u);
  // dw = x's column sums where w > 0 (1.25, 1.75, 2.25): the bf16 step's within a bf16
  // rounding, zero where w < 0.
  for (int i = 0; i < 12; ++i) {
    const double want = moment.at(DType::f32).getF(i);
    EXPECT_NEAR(moment.at(DType::bf16).getF(i), want, std::ldexp(std::abs(want), -7)) << i;
    if (i % 3 == 0) {
      EXPECT_EQ(want, 0.0) << i;
    } else {
      EXPECT_GT(want, 0.0) << i;
    }
  }
}

// Two ReLUs in a row and a forward mask gt(y, 0) with a nonzero fill. The outer ReLU's test
// reads the bf16 copy its matmul keeps; the inner one has no bf16 copy to read (relu(y) is
// not cast) and stays f32, as the forward mask does, though its where goes bf16 (the
// gradient reaching it is now a widened bf16). Every output bit for bit. (Matching the
// inner test looks through relu(y)'s users, among them the outer test the pass replaces.)
TEST(MixedPrecision, NarrowedReluGradientsOfStackedReluAndAForwardMask) {
  auto g = std::make_unique<Graph>();
  Builder b(*g);
  Value* y = b.input("y", TensorType{DType::f32, {3, 4}}, "param");
  Value* w = b.input("w", TensorType{DType::f32, {4, 2}}, "param");
  Value* loss = b.reduce(OpKind::ReduceSum, b.matmul(b.relu(b.relu(y)), w), {0, 1});
  Value* mask = b.op(OpKind::Where, {b.binary(OpKind::Gt, y, b.scalar(DType::f32, 0)), y,
                                     b.scalar(DType::f32, 1)});
  autocastMatmuls(*g, true);
  std::vector<Value*> outs{loss, mask};
  for (Value* gr : appendGradients(*g, loss, {y, w})) outs.push_back(gr);
  g->setOutputs(outs);
  mergeCasts(*g);
  std::unique_ptr<Graph> narrow = g->clone();
  EXPECT_EQ(narrowReluGradients(*narrow), 3);  // the outer test, both wheres
  int f32Tests = 0, bf16Tests = 0, bf16Wheres = 0;
  for (const auto& n : narrow->nodes()) {
    if (n->op() == OpKind::Gt) (n->operand(0)->type().dtype == DType::bf16 ? bf16Tests : f32Tests)++;
    bf16Wheres += n->op() == OpKind::Where && n->result()->type().dtype == DType::bf16;
  }
  EXPECT_EQ(bf16Tests, 1);
  EXPECT_EQ(f32Tests, 2);  // the inner ReLU's and the forward mask's
  EXPECT_EQ(bf16Wheres, 2);

  Tensor yv(TensorType{DType::f32, {3, 4}}), wv(TensorType{DType::f32, {4, 2}});
  for (int i = 0; i < 12; ++i) yv.setF(i, (i % 4 == 1 ? -0.375 : 0.5) * (i - 5));
  for (int i = 0; i < 8; ++i) wv.setF(i, 0.125 * (i + 1));
  const std::map<std::string, Tensor> in{{"y", yv}, {"w", wv}};
  const auto want = Interpreter().run(*g, in);
  const auto got = Interpreter().run(*narrow, in);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(bitEqual(got[i], want[i])) << i;
}

// A second output that the rewrite replaces (a masked product kept as a metric: its where of
// a widened bf16 goes bf16): buildTrainStep keeps it, by the same value, as the step's output.
TEST(MixedPrecision, OutputReplacedByTheNarrowingStaysAnOutput) {
  auto g = std::make_unique<Graph>();
  Builder b(*g);
  Value* x = b.input("x", TensorType{DType::f32, {2, 3}});
  Value* k = b.input("k", TensorType{DType::f32, {2, 4}});
  Value* w = b.input("w", TensorType{DType::f32, {3, 4}}, "param");
  Value* p = b.op(OpKind::Where, {b.binary(OpKind::Gt, k, b.scalar(DType::f32, 0)),
                                  b.matmul(x, w), b.scalar(DType::f32, 0)}, {}, "p");
  g->setOutputs({b.reduce(OpKind::ReduceSum, p, {0, 1}), p});
  OptimizerConfig cfg;
  cfg.schedule = "constant";
  cfg.precision = DType::bf16;
  buildTrainStep(*g, cfg);
  ASSERT_GE(g->outputs().size(), 2u);
  const Value* out = g->outputs()[1];
  EXPECT_EQ(out->name(), "p");
  EXPECT_EQ(out->def()->op(), OpKind::Cast);  // of the bf16 where
  EXPECT_EQ(out->def()->operand(0)->def()->op(), OpKind::Where);

  Tensor xv(TensorType{DType::f32, {2, 3}}), kv(TensorType{DType::f32, {2, 4}}), wv(TensorType{DType::f32, {3, 4}});
  for (int i = 0; i < 6; ++i) xv.setF(i, 0.5 * (i + 1));
  for (int i = 0; i < 8; ++i) kv.setF(i, i % 2 ? 1.0 : -1.0);
  for (int i = 0; i < 12; ++i) wv.setF(i, 0.25 * (i + 1));
  std::map<std::string, Tensor> in{{"x", xv}, {"k", kv}, {"w", wv}, {"step", scalarI64(1)}};
  in.emplace("adam.m.w", Tensor(wv.type()));
  in.emplace("adam.v.w", Tensor(wv.type()));
  const auto res = Interpreter().run(*g, in);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      double want = 0;  // x w, exact in bf16 here (small multiples of 1/8), where k > 0
      for (int64_t l = 0; l < 3; ++l) want += xv.getF(i * 3 + l) * wv.getF(l * 4 + j);
      EXPECT_EQ(res[1].getF(i * 4 + j), j % 2 ? want : 0.0) << i << "," << j;
    }
}
