// Generic fusion (codegen/fusion_groups.h): which nodes share a kernel, on small graphs;
// then the tiny Transformer's training step compiled with fusion against the reference
// interpreter (state updated in place, freed memory poisoned) and against itself unfused.
#include "codegen/fusion_groups.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
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
    for (const Node* n : group.nodes) out.back().push_back(n->result()->name());
  }
  return out;
}

// Each group's extra outputs (multi-output groups), by name.
Names extraOutputsOf(const Graph& g) {
  Names out;
  for (const auto& group : codegen::formFusionGroups(g)) {
    out.emplace_back();
    for (const Value* v : group.extraOutputs) out.back().push_back(v->name());
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
  %s = reduce_sum(%d) {axes=[0]} : f32[]
  return %d, %e, %s
}
)");
  // a feeds b and c, which share it inside one kernel. d is an output that a reduction
  // after e reads too: the kernel of e, its elementwise user, stores it as a second output.
  EXPECT_EQ(groupsOf(*g), (Names{{"a", "b", "c", "d", "e"}, {"s"}}));
  EXPECT_EQ(extraOutputsOf(*g), (Names{{"d"}, {}}));
}

TEST(FusionGroups, AValueUsedBeforeTheLastNodeIsNotAnotherOutput) {
  auto g = parseGraph(R"(graph @between {
  %x = input() : f32[16]
  %a = exp(%x) : f32[16]
  %b = neg(%a) : f32[16]
  %c = mul(%a, %b) : f32[16]
  %d = sqrt(%c) : f32[16]
  %s = reduce_sum(%d) {axes=[0]} : f32[]
  %e = abs(%d) : f32[16]
  return %d, %e, %s
}
)");
  // The reduction reads d before e runs: d is stored by a launch of its own.
  EXPECT_EQ(groupsOf(*g), (Names{{"a", "b", "c", "d"}, {"s"}, {"e"}}));
  EXPECT_EQ(extraOutputsOf(*g), (Names{{}, {}, {}}));
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

// ---- multi-output groups ----------------------------------------------------------------

// One parameter's AdamW update as passes/train_step.cpp builds it (clipping, bias
// corrections and weight decay as scalars computed once per step). new.adam.m and
// new.adam.v are state outputs and feed new.w: one kernel stores all three.
constexpr const char* kAdamW = R"(graph @adamw {
  %w = input() {role="param"} : f32[37,29]
  %adam.m.w = input() {role="state"} : f32[37,29]
  %adam.v.w = input() {role="state"} : f32[37,29]
  %grad = input() : f32[37,29]
  %clip = input() : f32[]
  %step_size = input() : f32[]
  %inv_sqrt_bias2 = input() : f32[]
  %lr_decay = input() : f32[]
  %b1 = constant() {value=[0.9]} : f32[]
  %nb1 = constant() {value=[0.1]} : f32[]
  %b2 = constant() {value=[0.98]} : f32[]
  %nb2 = constant() {value=[0.02]} : f32[]
  %eps = constant() {value=[1e-9]} : f32[]
  %clipped = mul(%grad, %clip) : f32[37,29]
  %m1 = mul(%adam.m.w, %b1) : f32[37,29]
  %m2 = mul(%clipped, %nb1) : f32[37,29]
  %new.adam.m.w = add(%m1, %m2) : f32[37,29]
  %v1 = mul(%adam.v.w, %b2) : f32[37,29]
  %gg = mul(%clipped, %clipped) : f32[37,29]
  %v2 = mul(%gg, %nb2) : f32[37,29]
  %new.adam.v.w = add(%v1, %v2) : f32[37,29]
  %sq = sqrt(%new.adam.v.w) : f32[37,29]
  %sc = mul(%sq, %inv_sqrt_bias2) : f32[37,29]
  %denom = add(%sc, %eps) : f32[37,29]
  %ratio = div(%new.adam.m.w, %denom) : f32[37,29]
  %step = mul(%ratio, %step_size) : f32[37,29]
  %decay = mul(%w, %lr_decay) : f32[37,29]
  %update = add(%step, %decay) : f32[37,29]
  %new.w = sub(%w, %update) : f32[37,29]
  return %new.w, %new.adam.m.w, %new.adam.v.w
}
)";

// Runs g in the stateful mode (fused, freed memory poisoned) for two steps against the
// interpreter; `state` are the inputs updated in place. Returns the executable's stats.
runtime::ExecStats expectStatefulStepsMatch(const Graph& g,
                                            const std::vector<std::string>& state) {
  auto opts = tgc::testing::testExecOptions();
  opts.fuse = true;
  opts.updateInPlace = true;
  opts.poisonFreed = true;
  auto exe = runtime::Executable::compile(g, opts);
  auto ref = tgc::testing::randomInputs(g, 11);
  for (auto& [name, t] : ref)  // second moments are never negative
    if (name.starts_with("adam.v."))
      for (int64_t e = 0; e < t.numel(); ++e) t.setF(e, std::fabs(t.getF(e)));
  runtime::ParamStore store;
  std::map<std::string, Tensor> batch;
  for (const auto& [name, t] : ref) {
    if (std::find(state.begin(), state.end(), name) != state.end())
      store.set(name, t);
    else
      batch.insert_or_assign(name, t);
  }
  for (int step = 0; step < 2; ++step) {
    auto want = Interpreter().run(g, ref);
    exe->runStep(store, batch);
    for (size_t i = 0; i < g.outputs().size(); ++i) {
      const std::string& name = g.outputs()[i]->name();
      if (!name.starts_with("new.")) continue;
      EXPECT_TRUE(tgc::testing::allClose(store.at(name.substr(4)), want[i], 1e-6, 1e-6))
          << name << " step " << step;
      ref.insert_or_assign(name.substr(4), want[i]);
    }
  }
  return exe->stats();
}

TEST(FusionGroups, AnAdamWUpdateIsOneKernelWithThreeOutputsUpdatedInPlace) {
  auto g = parseGraph(kAdamW);
  const auto groups = codegen::formFusionGroups(*g);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].nodes.back()->result()->name(), "new.w");
  EXPECT_EQ(extraOutputsOf(*g), (Names{{"new.adam.m.w", "new.adam.v.w"}}));
  const auto stats = expectStatefulStepsMatch(*g, {"w", "adam.m.w", "adam.v.w"});
  EXPECT_EQ(stats.kernels, 1);
  EXPECT_EQ(stats.stateInPlace, 3) << "w, m and v all written over their old values";
  EXPECT_EQ(stats.stateCopies, 0);
}

TEST(FusionGroups, WithoutMultiOutputGroupsAdamWIsThreeKernels) {
  auto g = parseGraph(kAdamW);
  setenv("TGC_NO_MULTI_OUTPUT", "1", 1);
  const Names groups = groupsOf(*g);
  unsetenv("TGC_NO_MULTI_OUTPUT");
  EXPECT_EQ(groups.size(), 3u);
}

// An output stored after another output that overwrites what it reads would read the new
// value: the state whose old value is read later is copied back instead of updated in place.
TEST(FusionGroups, AnOutputReadingOverwrittenStateForcesACopy) {
  auto g = parseGraph(R"(graph @late {
  %w = input() {role="param"} : f32[40]
  %m = input() {role="state"} : f32[40]
  %g = input() : f32[40]
  %c = constant() {value=[0.5]} : f32[]
  %half = mul(%m, %c) : f32[40]
  %new.m = add(%m, %g) : f32[40]
  %t = add(%half, %new.m) : f32[40]
  %new.w = sub(%w, %t) : f32[40]
  return %new.w, %new.m, %half
}
)");
  // Stores run new.w, new.m, half: half reads m after new.m would have replaced it, while
  // w is read by new.w's store only.
  EXPECT_EQ(extraOutputsOf(*g), (Names{{"half", "new.m"}}));
  const auto stats = expectStatefulStepsMatch(*g, {"w", "m"});
  EXPECT_EQ(stats.kernels, 1);
  EXPECT_EQ(stats.stateInPlace, 1);
  EXPECT_EQ(stats.stateCopies, 1);
}

TEST(FusionGroups, OtherOutputsNeedTheLastNodesIterationSpace) {
  auto g = parseGraph(R"(graph @near {
  %x = input() : f32[8]
  %y = input() : f32[4,8]
  %z = input() : f32[8,8]
  %a = neg(%x) : f32[8]
  %ab = broadcast(%a) {shape=[4,8]} : f32[4,8]
  %b = add(%ab, %y) : f32[4,8]
  %c = mul(%z, %z) : f32[8,8]
  %ct = transpose(%c) {perm=[1,0]} : f32[8,8]
  %d = add(%ct, %z) : f32[8,8]
  %e = relu(%z) : f32[8,8]
  %f = reduce_sum(%e) {axes=[1]} : f32[8]
  return %a, %b, %c, %d, %e, %f
}
)");
  // a has another shape than b (broadcast); d reads c transposed; f is a reduction.
  EXPECT_EQ(groupsOf(*g), (Names{{"a"}, {"ab", "b"}, {"c"}, {"ct", "d"}, {"e"}, {"f"}}));
  EXPECT_EQ(extraOutputsOf(*g), (Names{{}, {}, {}, {}, {}, {}}));
}

TEST(FusionGroups, LowerGroupRefusesOutputsOutsideTheIterationSpace) {
  auto g = parseGraph(R"(graph @bad {
  %x = input() : f32[4,8]
  %a = neg(%x) : f32[4,8]
  %s = reduce_sum(%a) {axes=[1]} : f32[4]
  %y = input() : f32[8]
  %b = exp(%y) : f32[8]
  %bb = broadcast(%b) {shape=[4,8]} : f32[4,8]
  %c = add(%bb, %x) : f32[4,8]
  return %s, %c
}
)");
  auto node = [&](const char* name) { return g->findValue(name)->def(); };
  EXPECT_THROW(codegen::lowerGroup(codegen::FusionGroup{{node("a"), node("s")},
                                                        {g->findValue("a")}}),
               IRError);
  EXPECT_THROW(codegen::lowerGroup(codegen::FusionGroup{{node("b"), node("bb"), node("c")},
                                                        {g->findValue("b")}}),
               IRError);
  EXPECT_THROW(codegen::lowerGroup(codegen::FusionGroup{{node("b"), node("bb"), node("c")},
                                                        {g->findValue("c")}}),
               IRError);
  const auto ok = codegen::lowerGroup(
      codegen::FusionGroup{{node("b"), node("bb"), node("c")}, {g->findValue("bb")}});
  EXPECT_EQ(ok.values.size(), 4u);  // c, bb, then the values read: y and x
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
  // Each parameter's AdamW update is one group storing the parameter, m and v.
  size_t adamw = 0;
  for (const auto& group : codegen::formFusionGroups(*g)) {
    const std::string& name = group.nodes.back()->result()->name();
    if (!name.starts_with("new.") || name.starts_with("new.adam.")) continue;
    const std::string x = name.substr(4);
    std::vector<std::string> extra;
    for (const Value* v : group.extraOutputs) extra.push_back(v->name());
    EXPECT_EQ(extra, (std::vector<std::string>{"new.adam.m." + x, "new.adam.v." + x})) << x;
    ++adamw;
  }
  EXPECT_EQ(adamw, inits.size());
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
