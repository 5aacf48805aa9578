// fuse-attention end to end in the interpreter: the graph with fused_attention (and, after
// autodiff, fused_attention_grad) against the unfused graph it came from, forward and
// backward, at sequence lengths 1, 7 and 64 with causal and padding masks, fully masked rows
// and dropout, in float32 and float64. Plus the whole tiny Transformer.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <cstdlib>
#include <random>

#include <fmt/format.h>

#include "frontend/frontend.h"
#include "ir/builder.h"
#include "ir/interpreter.h"
#include "ir/verifier.h"
#include "passes/autodiff.h"
#include "passes/fusion.h"
#include "passes/pass.h"
#include "passes/passes.h"

namespace tgc {
namespace {

struct Config {
  int64_t tq, tk;
  bool causal = false;
  bool padding = false;  // key padding [B, 1, 1, Tk]; batch 1 pads every key
  double pDrop = 0;
  double penalty = -INFINITY;  // the masked score (-inf or -1e9)
  DType dtype = DType::f32;
  // q, k, v, w are [B, T, H, D] inputs transposed to [B, H, T, D] in the graph, and out is
  // transposed back (split_heads / merge_heads): the fused graph folds all four (layout bthd).
  bool splitHeads = false;
  // An additive bias input "bias", trainable (its gradient is an output): per head
  // [1, H, Tq, Tk] added to the scaled scores (ALiBi's shape), per key [B, 1, 1, Tk] added
  // before the mask, or [Tq, Tk] added before the scale (so the fused op's bias is scaled).
  enum class Bias { None, Heads, Keys, BeforeScale } bias = Bias::None;
};

Shape biasShape(const Config& c) {
  switch (c.bias) {
    case Config::Bias::Heads: return {1, 2, c.tq, c.tk};
    case Config::Bias::Keys: return {2, 1, 1, c.tk};
    case Config::Bias::BeforeScale: return {c.tq, c.tk};
    case Config::Bias::None: break;
  }
  return {};
}

std::string describe(const Config& c) {
  return fmt::format("Tq={} Tk={} causal={} padding={} p={} penalty={} {}{} bias {}", c.tq, c.tk,
                     c.causal, c.padding, c.pDrop, c.penalty, dtypeName(c.dtype),
                     c.splitHeads ? " split heads" : "", static_cast<int>(c.bias));
}

// A head-split operand's shape [B, T, H, D] from [B, H, T, D].
Shape heads(const Config& c, Shape s) {
  if (c.splitHeads) std::swap(s[1], s[2]);
  return s;
}

constexpr int64_t kB = 2, kH = 2, kD = 8, kDv = 5;

// The frontend's attention (models/lib/nn.tg) over inputs q, k, v (and pad, seed, offset):
// outputs out, then the gradients of sum(out * w) for q, k and v.
std::unique_ptr<Graph> buildAttention(const Config& c, bool fuse) {
  auto g = std::make_unique<Graph>("attn");
  Builder b(*g);
  const DType dt = c.dtype;
  Value* qIn = b.input("q", {dt, heads(c, {kB, kH, c.tq, kD})});
  Value* kIn = b.input("k", {dt, heads(c, {kB, kH, c.tk, kD})});
  Value* vIn = b.input("v", {dt, heads(c, {kB, kH, c.tk, kDv})});
  Value* w = b.input("w", {dt, heads(c, {kB, kH, c.tq, kDv})});
  auto split = [&](Value* x) { return c.splitHeads ? b.transpose(x, {0, 2, 1, 3}) : x; };
  Value *q = split(qIn), *k = split(kIn), *v = split(vIn);
  Value* bias = c.bias == Config::Bias::None ? nullptr : b.input("bias", {dt, biasShape(c)});
  Value* s = b.matmul(q, k, false, true);
  if (c.bias == Config::Bias::BeforeScale) s = b.add(s, bias);
  s = b.mul(s, b.scalar(dt, 1 / std::sqrt(double{kD})), "scores");
  if (c.bias == Config::Bias::Heads) s = b.add(s, bias);
  if (c.bias == Config::Bias::Keys) s = b.add(bias, s);
  Value* allowed = nullptr;
  if (c.padding) allowed = b.input("pad", {DType::boolean, {kB, 1, 1, c.tk}});
  if (c.causal) {
    Value* rows = b.iota({DType::i64, {c.tq, c.tk}}, 0);
    Value* cols = b.iota({DType::i64, {c.tq, c.tk}}, 1);
    Value* causal = b.reshape(b.binary(OpKind::Le, cols, rows), {1, 1, c.tq, c.tk});
    allowed = allowed ? b.binary(OpKind::LogicalAnd, allowed, causal) : causal;
  }
  if (allowed) s = b.where(allowed, s, b.scalar(dt, c.penalty));
  Value* p = b.softmax(s, -1);
  if (c.pDrop > 0) {
    Value* seed = b.input("seed", {DType::i64, {}});
    Value* offset = b.input("offset", {DType::i64, {}});
    Value* u = b.philoxUniform(seed, offset, p->type());
    Value* keep = b.binary(OpKind::Ge, u, b.scalar(dt, c.pDrop));
    p = b.where(keep, b.mul(p, b.scalar(dt, 1 / (1 - c.pDrop))), b.scalar(dt, 0));
  }
  Value* out = c.splitHeads ? b.transpose(b.matmul(p, v), {0, 2, 1, 3}, "out")
                            : b.matmul(p, v, false, false, "out");
  Value* loss = b.reduce(OpKind::ReduceSum, b.mul(out, w), {0, 1, 2, 3}, false, "loss");
  // out as an output: the fusion replaces it (the head-split fold removes the value itself).
  g->setOutputs({out});
  if (fuse) {
    PassContext ctx;
    EXPECT_TRUE(runFuseAttention(*g, ctx));
  }
  out = g->outputs()[0];
  std::vector<Value*> wrt{qIn, kIn, vIn};
  if (bias) wrt.push_back(bias);
  std::vector<Value*> grads = appendGradients(*g, loss, wrt);
  std::vector<Value*> outs{out};
  outs.insert(outs.end(), grads.begin(), grads.end());
  g->setOutputs(outs);
  g->removeDeadNodes();
  EXPECT_TRUE(verifyGraph(*g).empty());
  return g;
}

int count(const Graph& g, OpKind op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op() == op;
  return n;
}

std::map<std::string, Tensor> inputs(const Config& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  auto fill = [&](Shape s) {
    Tensor t(TensorType{c.dtype, std::move(s)});
    for (int64_t i = 0; i < t.numel(); ++i) t.setF(i, normal(rng));
    return t;
  };
  std::map<std::string, Tensor> in{{"q", fill(heads(c, {kB, kH, c.tq, kD}))},
                                   {"k", fill(heads(c, {kB, kH, c.tk, kD}))},
                                   {"v", fill(heads(c, {kB, kH, c.tk, kDv}))},
                                   {"w", fill(heads(c, {kB, kH, c.tq, kDv}))}};
  if (c.padding) {
    // Batch 0: the first key and every third after it is padding (with causal, query 0 sees
    // no key: a fully masked row); batch 1: every key is padding.
    Tensor pad(TensorType{DType::boolean, {kB, 1, 1, c.tk}});
    for (int64_t j = 0; j < c.tk; ++j) pad.setI(j, j % 3 != 0);
    in["pad"] = pad;
  }
  if (c.bias != Config::Bias::None) in["bias"] = fill(biasShape(c));
  if (c.pDrop > 0) {
    in["seed"] = Tensor(TensorType{DType::i64, {}}, {987654321.0});
    in["offset"] = Tensor(TensorType{DType::i64, {}}, {12345.0});
  }
  return in;
}

// Runs both graphs and compares out, dq, dk, dv: `rel` relative to the largest value of each.
void expectSame(const Config& c, bool promote, double rel) {
  SCOPED_TRACE(describe(c) + (promote ? " promote_to_f64" : ""));
  auto unfused = buildAttention(c, false);
  auto fused = buildAttention(c, true);
  EXPECT_EQ(count(*fused, OpKind::FusedAttention), 1);
  EXPECT_EQ(count(*fused, OpKind::FusedAttentionGrad), 1);
  EXPECT_EQ(count(*fused, OpKind::Softmax), 0);
  // The head-split fold leaves no transpose, forward or backward, but the one that puts a
  // finite fill's row test [B, H, Tq, 1] in the fused op's layout.
  const bool rowTest = std::isfinite(c.penalty) && c.padding && c.pDrop == 0;
  EXPECT_EQ(count(*fused, OpKind::Transpose), rowTest && c.splitHeads ? 1 : 0);
  if (c.splitHeads) {
    EXPECT_GT(count(*unfused, OpKind::Transpose), 0);
  }
  for (const auto& n : fused->nodes()) {
    if (n->op() == OpKind::FusedAttention || n->op() == OpKind::FusedAttentionGrad) {
      EXPECT_EQ(n->attrString("layout"), c.splitHeads ? "bthd" : "bhtd");
    }
  }
  const auto in = inputs(c, 7);
  InterpreterOptions opts{.promote_to_f64 = promote};
  auto want = Interpreter(opts).run(*unfused, in);
  auto got = Interpreter(opts).run(*fused, in);
  const char* names[] = {"out", "dq", "dk", "dv", "dbias"};
  ASSERT_EQ(got.size(), c.bias == Config::Bias::None ? 4u : 5u);
  for (size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].type(), want[r].type()) << names[r];
    double scale = 0;
    for (int64_t i = 0; i < want[r].numel(); ++i) scale = std::max(scale, std::fabs(want[r].getF(i)));
    for (int64_t i = 0; i < want[r].numel(); ++i) {
      const double g = got[r].getF(i), w = want[r].getF(i);
      ASSERT_TRUE(std::isfinite(g)) << names[r] << "[" << i << "]";
      ASSERT_NEAR(g, w, rel * std::max(scale, 1.0)) << names[r] << "[" << i << "]";
    }
  }
}

TEST(FuseAttention, MatchesTheUnfusedGraphForwardAndBackward) {
  std::vector<Config> configs;
  for (int64_t t : {1, 7, 64}) {
    configs.push_back({t, t});
    configs.push_back({t, t, true});
    configs.push_back({t, t, true, true});
    configs.push_back({t, t, false, true, 0.2});
    configs.push_back({t, t, true, true, 0.1});
  }
  configs.push_back({1, 7, false, true});
  configs.push_back({7, 64, false, true, 0.3});
  configs.push_back({64, 1});
  for (const Config& c : configs) {
    expectSame(c, true, 1e-12);
    expectSame(c, false, 2e-5);
  }
}

// The head-split fold (layout bthd): q, k, v, out and the gradients through [0, 2, 1, 3]
// transposes that the fused graph no longer has.
TEST(FuseAttention, HeadSplitFoldMatchesTheUnfusedGraph) {
  std::vector<Config> configs;
  for (int64_t t : {1, 7, 64}) {
    configs.push_back({t, t, true, true});
    configs.push_back({t, t, true, true, 0.1});
  }
  configs.push_back({7, 64, false, true, 0.3});
  for (Config c : configs) {
    c.splitHeads = true;
    expectSame(c, true, 1e-12);
    expectSame(c, false, 2e-5);
  }
}

// An additive bias (per head, per key, or before the scale) becomes the fused op's bias
// operand, and its gradient fused_attention_grad's dbias (summed over its broadcast dims).
TEST(FuseAttention, AdditiveBiasesMatchTheUnfusedGraph) {
  for (auto bias : {Config::Bias::Heads, Config::Bias::Keys, Config::Bias::BeforeScale})
    for (Config c : std::vector<Config>{{1, 1}, {7, 7, true}, {7, 64, false, true}, {64, 64, true, true, 0.1}}) {
      c.bias = bias;
      expectSame(c, true, 1e-12);
      expectSame(c, false, 2e-5);
      c.splitHeads = true;
      expectSame(c, true, 1e-12);
    }
}

TEST(FuseAttention, Float64GraphsAgreeToRounding) {
  Config c{7, 7, true, true, 0.25};
  c.dtype = DType::f64;
  expectSame(c, false, 1e-12);
}

TEST(FuseAttention, FullyMaskedRowsKeepTheUnfusedResultOfAFiniteWhereFill) {
  // With where(m, s, -1e9) the unfused softmax gives a fully masked row uniform weights (the
  // mean of v), and the fused graph keeps that; with -inf both give zeros. Batch 0 allows
  // keys 1 and 2, batch 1 none; with causal=true the rows see keys j <= i only.
  for (double penalty : {-1e9, -std::numeric_limits<double>::infinity()})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(fmt::format("penalty {} causal {}", penalty, causal));
      Config c{4, 4, causal, true};
      c.penalty = penalty;
      c.dtype = DType::f64;
      auto unfused = buildAttention(c, false);
      auto fused = buildAttention(c, true);
      ASSERT_EQ(count(*fused, OpKind::FusedAttention), 1);
      const auto in = inputs(c, 3);
      auto want = Interpreter().run(*unfused, in).at(0);
      auto got = Interpreter().run(*fused, in).at(0);
      const Tensor& v = in.at("v");
      const int64_t perBatch = kH * c.tq * kDv;
      for (int64_t i = 0; i < want.numel(); ++i) {
        EXPECT_NEAR(got.getF(i), want.getF(i), 1e-12) << i;
        if (i < perBatch || std::isfinite(penalty)) continue;
        EXPECT_EQ(got.getF(i), 0) << i;  // -inf: batch 1's rows are zeros on both sides
      }
      const int64_t h = 0, col = 1, row = 0;  // batch 1, a -1e9 row: the mean of v
      double mean = 0;
      for (int64_t j = 0; j < c.tk; ++j) mean += v.getF(((kH + h) * c.tk + j) * kDv + col) / c.tk;
      if (std::isfinite(penalty)) {
        EXPECT_NEAR(got.getF(perBatch + (h * c.tq + row) * kDv + col), mean, 1e-12);
      }
    }
  // Forward and gradients against the unfused graph, in both layouts.
  for (Config c : std::vector<Config>{{7, 7, false, true}, {7, 7, true, true}, {7, 64, false, true}})
    for (bool split : {false, true}) {
      c.penalty = -1e9;
      c.splitHeads = split;
      expectSame(c, true, 1e-12);
      expectSame(c, false, 2e-5);
    }
}

TEST(FuseAttention, EnvironmentTurnsTheForwardFusionsOnAndOff) {
  auto graphWithSoftmax = [&] {
    auto g = std::make_unique<Graph>("fwd");
    Builder b(*g);
    Value* q = b.input("q", {DType::f32, {2, 7, 4}});
    g->setOutputs({b.matmul(b.softmax(b.matmul(q, q, false, true)), q)});
    return g;
  };
  auto g = graphWithSoftmax();
  setenv("TGC_FORWARD_FUSIONS", "0", 1);
  runForwardFusions(*g);
  EXPECT_EQ(count(*g, OpKind::FusedAttention), 0);
  setenv("TGC_FORWARD_FUSIONS", "1", 1);
  setenv("TGC_NO_FUSION", "1", 1);  // wins
  runForwardFusions(*g);
  EXPECT_EQ(count(*g, OpKind::FusedAttention), 0);
  unsetenv("TGC_NO_FUSION");
  runForwardFusions(*g);
  EXPECT_EQ(count(*g, OpKind::FusedAttention), 1);
  unsetenv("TGC_FORWARD_FUSIONS");
}

// The tiny preset's training graph (padding masks, causal decoder, cross-attention, and
// attention dropout when asked), its loss and every parameter gradient in float64, with and
// without the fusion.
void expectTinyTransformerUnchanged(const std::string& attnDropout) {
  SCOPED_TRACE("attn_dropout=" + attnDropout);
  ModelOptions mo;
  mo.preset = "tiny";
  mo.sets = {{"src_vocab", "24"}, {"tgt_vocab", "24"}, {"attn_dropout", attnDropout}};
  mo.dims = {{"B", 2}, {"S", 5}, {"T", 4}};
  std::vector<Tensor> results[2];
  for (bool fuse : {false, true}) {
    CompiledModel m = compileModelFile(TGC_SOURCE_DIR "/models/transformer.tg", mo);
    Graph& g = *m.graph;
    if (fuse) {
      PassContext ctx;
      ASSERT_TRUE(runFuseAttention(g, ctx));
      EXPECT_EQ(count(g, OpKind::FusedAttention), 6);
      int withDropout = 0;
      for (const auto& n : g.nodes())
        withDropout += n->op() == OpKind::FusedAttention && n->attrFloat("p_drop") > 0;
      EXPECT_EQ(withDropout, attnDropout == "0.0" ? 0 : 6);
    }
    Value* loss = g.outputs().at(static_cast<size_t>(m.loss_output));
    std::vector<Value*> grads = appendGradients(g, loss, trainableParameters(g));
    grads.insert(grads.begin(), loss);
    g.setOutputs(grads);
    std::map<std::string, Tensor> in;
    for (const ParamInit& p : m.params) in[p.name] = initParam(p, 11);
    // Token ids with padding (0) at the ends, so the masks matter.
    const std::vector<double> src{5, 9, 3, 0, 0, 7, 2, 0, 0, 0}, tgt{1, 4, 6, 0, 1, 8, 0, 0};
    in["src"] = Tensor(g.findValue("src")->type(), src);
    in["tgt_in"] = Tensor(g.findValue("tgt_in")->type(), tgt);
    in["tgt_out"] = Tensor(g.findValue("tgt_out")->type(), tgt);
    for (const char* name : {"seed", "step"})
      if (g.findValue(name)) in[name] = Tensor(g.findValue(name)->type(), {3});
    results[fuse] = Interpreter({.promote_to_f64 = true}).run(g, in);
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t r = 0; r < results[0].size(); ++r)
    for (int64_t i = 0; i < results[0][r].numel(); ++i)
      ASSERT_NEAR(results[1][r].getF(i), results[0][r].getF(i), 1e-10) << "output " << r << "[" << i << "]";
}

TEST(FuseAttention, TinyTransformerLossAndGradientsAreUnchanged) {
  expectTinyTransformerUnchanged("0.0");
  expectTinyTransformerUnchanged("0.1");
}

}  // namespace
}  // namespace tgc
