// Generic fusion (codegen/fusion_groups.h): which nodes share a kernel, on small graphs;
// then the tiny Transformer's training step compiled with fusion against the reference
// interpreter (state updated in place, freed memory poisoned) and against itself unfused.
#include "codegen/fusion_groups.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "codegen/lower.h"
#include "frontend/frontend.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "passes/train_step.h"
#include "runtime/executable.h"
#include "runtime/param_store.h"
#include "tests/runtime/exec_test_util.h"

using namespace tgc;

namespace {

using Names = std::vector<std::vector<std::string>>;

// Each group as the names of its nodes' results, in order.
Names groupsOf(const Graph& g) {
  Names out;
  for (const auto& group : codegen::formFusionGroups(g)) {
    out.emplace_back();
    for (const Node* n : group) out.back().push_back(n->result()->name());
  }
  return out;
}

TEST(FusionGroups, AChainOfElementwiseOpsIsOneGroup) {
  auto g = parseGraph(R"(graph @chain {
  %x = input() : f32[7,9]
  %a = exp(%x) : f32[7,9]
  %b = exp(%a) : f32[7,9]
  %c = mul(%b, %b) : f32[7,9]
  %d = tanh(%c) : f32[7,9]
  return %d
}
)");
  EXPECT_EQ(groupsOf(*g), (Names{{"a", "b", "c", "d"}}));
}

TEST(FusionGroups, AValueWithTwoUsersOrAGraphOutputIsMaterialized) {
  auto g = parseGraph(R"(graph @uses {
  %x = input() : f32[16]
  %a = exp(%x) : f32[16]
  %b = neg(%a) : f32[16]
  %c = mul(%a, %b) : f32[16]
  %d = sqrt(%c) : f32[16]
  %e = abs(%d) : f32[16]
  return %d, %e
}
)");
  // a feeds b and c; d is an output (e reads it from memory).
  EXPECT_EQ(groupsOf(*g), (Names{{"a"}, {"b", "c", "d"}, {"e"}}));
}

TEST(FusionGroups, AReductionEndsItsGroup) {
  auto g = parseGraph(R"(graph @reduce {
  %x = input() : f32[8,32]
  %a = mul(%x, %x) : f32[8,32]
  %s = reduce_sum(%a) {axes=[1]} : f32[8]
  %t = sqrt(%s) : f32[8]
  %p = softmax(%x) : f32[8,32]
  %q = neg(%p) : f32[8,32]
  return %t, %q
}
)");
  EXPECT_EQ(groupsOf(*g), (Names{{"a", "s"}, {"t"}, {"p"}, {"q"}}));
}

TEST(FusionGroups, GemmsViewsAndSourcesAreBoundaries) {
  auto g = parseGraph(R"(graph @bounds {
  %x = input() : f32[4,8]
  %w = input() : f32[8,8]
  %c = constant() {value=[2.0]} : f32[]
  %a = neg(%x) : f32[4,8]
  %m = matmul(%a, %w) : f32[4,8]
  %r = relu(%m) : f32[4,8]
  %v = reshape(%r) {shape=[32]} : f32[32]
  %y = mul(%v, %c) : f32[32]
  return %y
}
)");
  EXPECT_EQ(groupsOf(*g), (Names{{"a"}, {"r"}, {"y"}}));
}

TEST(FusionGroups, CostlyProducersAreNotRecomputedThroughABroadcast) {
  auto g = parseGraph(R"(graph @bcast {
  %x = input() : f32[8]
  %y = input() : f32[64,8]
  %a = exp(%x) : f32[8]
  %b = broadcast(%a) {shape=[64,8]} : f32[64,8]
  %c = add(%b, %y) : f32[64,8]
  %i = iota() {axis=0} : i64[64,8]
  %f = cast(%i) {dtype=f32} : f32[64,8]
  %d = mul(%c, %f) : f32[64,8]
  return %d
}
)");
  // exp would run 64 times per element of a; the broadcast, iota and cast are free.
  EXPECT_EQ(groupsOf(*g), (Names{{"a"}, {"b", "c", "i", "f", "d"}}));
}

constexpr const char* kOneHot = R"(graph @onehot {
  %x = input() : f32[4,16]
  %l = input() : i64[4,1]
  %w = input() : f32[16,3]
  %i = iota() {axis=1} : i64[4,16]
  %e = eq(%i, %l) : bool[4,16]
  %m = cast(%e) {dtype=f32} : f32[4,16]
  %a = mul(%x, %m) : f32[4,16]
  %s = reduce_sum(%a) {axes=[1]} : f32[4]
  %b = sub(%x, %m) : f32[4,16]
  %t = exp(%b) : f32[4,16]
  %k = ne(%i, %l) : bool[4,16]
  %f = cast(%k) {dtype=f32} : f32[4,16]
  %g = matmul(%f, %w) : f32[4,3]
  %h = neg(%f) : f32[4,16]
  return %s, %t, %g, %h
}
)";

TEST(FusionGroups, CheapValuesFromSmallInputsAreComputedByEachUser) {
  auto g = parseGraph(kOneHot);
  // The one-hot mask m is recomputed in both its users' kernels and never stored; f feeds a
  // GEMM, so it is stored, and h still computes its own copy.
  EXPECT_EQ(groupsOf(*g), (Names{{"i", "e", "m", "a", "s"},
                                 {"i", "e", "m", "b", "t"},
                                 {"i", "k", "f"},
                                 {"i", "k", "f", "h"}}));
  auto opts = tgc::testing::testExecOptions();
  opts.poisonFreed = true;
  auto exe = runtime::Executable::compile(*g, opts);
  EXPECT_EQ(exe->stats().kernels, 4);
  auto in = tgc::testing::randomInputs(*g, 2);
  in.insert_or_assign("l", Tensor(TensorType{DType::i64, {4, 1}}, {3, 0, 15, 9}));
  auto want = Interpreter().run(*g, in);
  auto got = exe->run(in);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(tgc::testing::allClose(got[i], want[i], 1e-5, 1e-6)) << "output " << i;
}

TEST(FusionGroups, FusedGraphMatchesTheInterpreter) {
  auto g = parseGraph(R"(graph @mixed {
  %x = input() : f32[6,40]
  %y = input() : f32[40]
  %g = input() : f32[40]
  %z = input() : f32[6,40]
  %yb = broadcast(%y) {shape=[6,40]} : f32[6,40]
  %a = add(%x, %yb) : f32[6,40]
  %n = layer_norm(%a, %g, %y) : f32[6,40]
  %t = transpose(%n) {perm=[1,0]} : f32[40,6]
  %s = slice(%t) {axis=0, start=2, end=40, step=3} : f32[13,6]
  %e = exp(%s) : f32[13,6]
  %m = reduce_max(%e) {axes=[0]} : f32[6]
  %zz = mul(%z, %z) : f32[6,40]
  %sm = log_softmax(%zz) : f32[6,40]
  return %m, %sm
}
)");
  auto opts = tgc::testing::testExecOptions();
  opts.fuse = true;
  opts.poisonFreed = true;
  auto exe = runtime::Executable::compile(*g, opts);
  EXPECT_EQ(exe->stats().kernels, 3);  // {yb a n}, {t s e m}, {zz sm}
  EXPECT_EQ(exe->stats().fusedNodes, 6);
  auto in = tgc::testing::randomInputs(*g, 4);
  auto want = Interpreter().run(*g, in);
  auto got = exe->run(in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(tgc::testing::allClose(got[i], want[i], 1e-5, 1e-6)) << "output " << i;
}

// ---- the tiny training step ------------------------------------------------------------------

constexpr int64_t kVocab = 24;

std::unique_ptr<Graph> tinyTrainStep(std::vector<ParamInit>& params) {
  ModelOptions o;
  o.preset = "tiny";
  o.sets = {{"src_vocab", std::to_string(kVocab)},
            {"tgt_vocab", std::to_string(kVocab)},
            {"p_drop", "0.1"}};
  o.dims = {{"B", 3}, {"S", 7}, {"T", 6}};
  CompiledModel m =
      compileModelFile(std::string(TGC_SOURCE_DIR) + "/models/transformer.tg", o);
  m.graph->setOutputs({m.graph->outputs()[m.loss_output]});
  OptimizerConfig cfg;
  cfg.schedule = "constant";
  cfg.lr = 3e-3;
  buildTrainStep(*m.graph, cfg);
  params = m.params;
  return std::move(m.graph);
}

Tensor tokens(Shape shape, uint64_t seed) {
  Tensor t(TensorType{DType::i64, shape});
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.setI(i, i % 5 == 4 ? 0 : 1 + static_cast<int64_t>(rng() % (kVocab - 1)));
  return t;
}

std::map<std::string, Tensor> batch() {
  std::map<std::string, Tensor> in;
  in.emplace("src", tokens({3, 7}, 1));
  in.emplace("tgt_in", tokens({3, 6}, 2));
  in.emplace("tgt_out", tokens({3, 6}, 3));
  for (const char* name : {"seed", "step"}) {
    Tensor t(TensorType{DType::i64, {}});
    t.setI(0, 7);
    in.emplace(name, std::move(t));
  }
  return in;
}

TEST(FusionTrainStep, FewerLaunchesSameStepAsTheInterpreter) {
  std::vector<ParamInit> inits;
  auto g = tinyTrainStep(inits);
  auto opts = tgc::testing::testExecOptions();
  opts.updateInPlace = true;
  opts.fuse = false;
  auto plain = runtime::Executable::compile(*g, opts);
  opts.fuse = true;
  opts.poisonFreed = true;
  auto fused = runtime::Executable::compile(*g, opts);
  const auto &ps = plain->stats(), &fs = fused->stats();
  EXPECT_EQ(ps.fusedNodes, 0);
  EXPECT_EQ(fs.kernels + fs.fusedNodes, ps.kernels) << "every Kernel node launched or fused";
  EXPECT_LT(fs.kernels, ps.kernels * 3 / 4) << "fusion should remove many launches";
  EXPECT_EQ(fs.gemms, ps.gemms);
  EXPECT_EQ(fs.stateCopies, 0) << "fused groups must still update the state in place";
  EXPECT_LE(fs.bufferBytes, ps.bufferBytes);
  std::cout << "tiny training step (B=3 S=7 T=6): " << ps.kernels << " kernel launches unfused, "
            << fs.kernels << " fused (" << fs.fusedNodes << " nodes fused); buffers "
            << ps.bufferBytes << " -> " << fs.bufferBytes << " bytes\n";

  runtime::ParamStore store(initParams(inits, 5));
  store.addZeroState(*g);
  std::map<std::string, Tensor> in = batch();
  for (const auto& [k, v] : store.tensors()) in.insert_or_assign(k, v);
  auto want = Interpreter().run(*g, in);
  auto got = fused->runStep(store, batch());
  const double loss = want[0].getF(0);
  EXPECT_NEAR(got.at("loss").getF(0), loss, 1e-5 * std::fabs(loss));
  size_t checked = 0;
  for (size_t i = 0; i < g->outputs().size(); ++i) {
    const std::string& name = g->outputs()[i]->name();
    if (!name.starts_with("new.")) continue;
    const std::string x = name.substr(4);
    if (x.ends_with("w_k.bias")) continue;  // a zero gradient stepped by rounding noise
    const bool param = !x.starts_with("adam.");
    EXPECT_TRUE(tgc::testing::allClose(store.at(x), want[i], param ? 1e-4 : 2e-3,
                                       param ? 3e-4 : 1e-6))
        << name;
    ++checked;
  }
  EXPECT_GT(checked, 2 * inits.size());
}

}  // namespace
