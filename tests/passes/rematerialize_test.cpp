// rematerialize on the tiny Transformer (dropout on): the loss and every parameter's gradient
// are bit-identical to the unrewritten graph's in the interpreter (so gradcheck's verdict on
// the gradients carries over), the compiled rewritten graph equals the interpreter to float32
// accuracy, fewer bytes are saved for the backward, the compiled arena is no larger, and no
// matmul, reduction or library op is added. buildTrainStep runs the pass unless TGC_NO_REMAT=1 or
// TGC_NO_FUSION=1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <unordered_set>

#include "frontend/frontend.h"
#include "ir/interpreter.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "passes/train_step.h"
#include "runtime/executable.h"
#include "tests/runtime/exec_test_util.h"

using namespace tgc;

namespace {

constexpr int64_t kVocab = 23;

CompiledModel tinyModel() {
  ModelOptions o;
  o.preset = "tiny";
  o.sets = {{"src_vocab", std::to_string(kVocab)},
            {"tgt_vocab", std::to_string(kVocab)},
            {"p_drop", "0.1"}};
  o.dims = {{"B", 3}, {"S", 5}, {"T", 4}};
  CompiledModel m = compileModelFile(std::string(TGC_SOURCE_DIR) + "/models/transformer.tg", o);
  Graph& g = *m.graph;
  g.setOutputs({g.outputs()[m.loss_output]});
  return m;
}

// The loss, then every parameter's gradient.
std::unique_ptr<Graph> gradientGraph() {
  CompiledModel m = tinyModel();
  Graph& g = *m.graph;
  Value* loss = g.outputs()[0];
  std::vector<Value*> outs{loss};
  for (Value* gr : appendGradients(g, loss, trainableParameters(g))) outs.push_back(gr);
  g.setOutputs(outs);
  return std::move(m.graph);
}

// Parameters small normal floats; token ids in [1, V) with the odd rows ending in padding;
// the seed and step 7.
std::map<std::string, Tensor> inputsFor(const Graph& g) {
  return tgc::testing::transformerInputs(g, 11, kVocab, /*zeroState=*/true);
}

// Bytes of the forward values (what outputs[0] depends on) that other nodes read, counted
// once per buffer (a reshape is its operand's memory).
int64_t savedBytes(const Graph& g) {
  std::unordered_set<const Node*> forward;
  std::vector<const Node*> work{g.outputs()[0]->def()};
  while (!work.empty()) {
    const Node* n = work.back();
    work.pop_back();
    if (!forward.insert(n).second) continue;
    for (const Value* v : n->operands()) work.push_back(v->def());
  }
  std::unordered_set<const Value*> saved;
  for (const auto& n : g.nodes()) {
    if (forward.count(n.get())) continue;
    for (const Value* v : n->operands()) {
      while (v->def()->op() == OpKind::Reshape) v = v->def()->operand(0);
      const OpKind op = v->def()->op();
      if (forward.count(v->def()) && op != OpKind::Input && op != OpKind::Constant) saved.insert(v);
    }
  }
  int64_t bytes = 0;
  for (const Value* v : saved)
    bytes += v->type().numel() * static_cast<int64_t>(dtypeSize(v->type().dtype));
  return bytes;
}

int rematerialized(const Graph& g) {
  int c = 0;
  for (const auto& n : g.nodes()) c += n->result()->name().ends_with(".remat");
  return c;
}

// Matmuls, reductions and library ops (opaque nodes but gather, which may be recomputed).
int countFusionKind(const Graph& g, FusionKind k) {
  int c = 0;
  for (const auto& n : g.nodes()) c += n->info().fusion == k && n->op() != OpKind::Gather;
  return c;
}

bool bitEqual(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(Rematerialize, TinyTransformerGradientsBitIdenticalWithLessSaved) {
  auto plain = gradientGraph(), remat = gradientGraph();
  PassContext ctx;
  ASSERT_TRUE(runRematerialize(*remat, ctx));
  EXPECT_GT(rematerialized(*remat), 0);
  EXPECT_EQ(rematerialized(*plain), 0);
  // Every clone is cheap: the matmuls, reductions and library ops are those of before
  // (gathers, embedding lookups, may be recomputed).
  for (FusionKind k : {FusionKind::MatMul, FusionKind::Reduction, FusionKind::Opaque})
    EXPECT_EQ(countFusionKind(*remat, k), countFusionKind(*plain, k)) << fusionKindName(k);
  EXPECT_LT(savedBytes(*remat), savedBytes(*plain));

  const auto in = inputsFor(*plain);
  const auto want = Interpreter().run(*plain, in);
  const auto got = Interpreter().run(*remat, in);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(bitEqual(got[i], want[i])) << "interpreter: " << plain->outputs()[i]->name();

  auto exeRemat = runtime::Executable::compile(*remat, tgc::testing::testExecOptions());
  auto exePlain = runtime::Executable::compile(*plain, tgc::testing::testExecOptions());
  const auto compiled = exeRemat->run(in);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(tgc::testing::allClose(compiled[i], want[i], 1e-4, 1e-5))
        << "compiled vs interpreter: " << remat->outputs()[i]->name();
  EXPECT_LE(exeRemat->stats().arenaBytes, exePlain->stats().arenaBytes);
}

// A second run finds nothing more: the clones' readers are outside the forward.
TEST(Rematerialize, IsIdempotent) {
  auto g = gradientGraph();
  PassContext ctx;
  ASSERT_TRUE(runRematerialize(*g, ctx));
  EXPECT_FALSE(runRematerialize(*g, ctx));
}

std::unique_ptr<Graph> trainStep() {
  CompiledModel m = tinyModel();
  OptimizerConfig cfg;
  cfg.schedule = "constant";
  buildTrainStep(*m.graph, cfg);
  return std::move(m.graph);
}

TEST(Rematerialize, TrainStepRunsItUnlessTurnedOff) {
  ASSERT_EQ(setenv("TGC_NO_REMAT", "1", 1), 0);
  auto off = trainStep();
  ASSERT_EQ(unsetenv("TGC_NO_REMAT"), 0);
  ASSERT_EQ(setenv("TGC_NO_FUSION", "1", 1), 0);
  auto unfused = trainStep();
  ASSERT_EQ(unsetenv("TGC_NO_FUSION"), 0);
  auto on = trainStep();
  EXPECT_EQ(rematerialized(*off), 0);
  EXPECT_EQ(rematerialized(*unfused), 0);
  EXPECT_GT(rematerialized(*on), 0);
  EXPECT_LT(savedBytes(*on), savedBytes(*off));

  const auto in = inputsFor(*off);
  const auto want = Interpreter().run(*off, in);
  const auto got = Interpreter().run(*on, in);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(bitEqual(got[i], want[i])) << off->outputs()[i]->name();
}

}  // namespace
