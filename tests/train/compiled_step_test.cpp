// The tiny Transformer's training step (forward, loss, backward, AdamW) compiled for the CPU
// against the reference interpreter: the loss and every updated parameter and optimizer
// moment over two consecutive steps, with the state updated in place in a ParamStore, with
// dropout on and off, and with freed arena memory poisoned. Also: the kernel cache.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "frontend/frontend.h"
#include "ir/interpreter.h"
#include "passes/train_step.h"
#include "runtime/executable.h"
#include "runtime/param_store.h"
#include "tests/runtime/exec_test_util.h"

using namespace tgc;

namespace {

constexpr int64_t kVocab = 24;

// The tiny preset's loss graph on a small batch (B=3, S=7, T=6, vocabularies of 24), and its
// training step.
CompiledModel tinyModel(double pDrop) {
  ModelOptions o;
  o.preset = "tiny";
  o.sets = {{"src_vocab", std::to_string(kVocab)},
            {"tgt_vocab", std::to_string(kVocab)},
            {"p_drop", std::to_string(pDrop)}};
  o.dims = {{"B", 3}, {"S", 7}, {"T", 6}};
  return compileModelFile(std::string(TGC_SOURCE_DIR) + "/models/transformer.tg", o);
}

std::unique_ptr<Graph> tinyTrainStep(double pDrop, std::vector<ParamInit>* params = nullptr) {
  CompiledModel m = tinyModel(pDrop);
  EXPECT_GE(m.loss_output, 0);
  std::vector<Value*> outs{m.graph->outputs()[m.loss_output]};
  m.graph->setOutputs(outs);
  OptimizerConfig cfg;
  cfg.schedule = "constant";  // a rate that moves the parameters visibly in two steps
  cfg.lr = 3e-3;
  buildTrainStep(*m.graph, cfg);
  if (params) *params = m.params;
  return std::move(m.graph);
}

Tensor tokens(Shape shape, uint64_t seed, int64_t padFrom) {
  Tensor t(TensorType{DType::i64, shape});
  std::mt19937_64 rng(seed);
  const int64_t cols = shape[1];
  for (int64_t i = 0; i < t.numel(); ++i) {
    const bool pad = (i / cols) % 2 == 1 && i % cols >= padFrom;  // odd rows end in padding
    t.setI(i, pad ? 0 : 1 + static_cast<int64_t>(rng() % (kVocab - 1)));
  }
  return t;
}

Tensor scalarI64(int64_t v) {
  Tensor t(TensorType{DType::i64, {}});
  t.setI(0, v);
  return t;
}

std::map<std::string, Tensor> batch(int64_t step) {
  std::map<std::string, Tensor> in;
  in.emplace("src", tokens({3, 7}, 1, 5));
  in.emplace("tgt_in", tokens({3, 6}, 2, 4));
  in.emplace("tgt_out", tokens({3, 6}, 3, 4));
  in.emplace("seed", scalarI64(77));
  in.emplace("step", scalarI64(step));
  return in;
}

// Two steps compiled (state in a ParamStore, updated in place) and interpreted (state fed
// back by name) must agree to float32 accuracy.
void expectStepsMatch(double pDrop, bool poison) {
  std::vector<ParamInit> inits;
  auto g = tinyTrainStep(pDrop, &inits);
  auto opts = tgc::testing::testExecOptions();
  opts.updateInPlace = true;
  opts.poisonFreed = poison;
  auto exe = runtime::Executable::compile(*g, opts);

  runtime::ParamStore store(initParams(inits, 5));
  EXPECT_EQ(store.addZeroState(*g), 2 * inits.size());
  std::map<std::string, Tensor> ref = store.tensors();
  for (int64_t step = 1; step <= 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::map<std::string, Tensor> in = batch(step);
    auto got = exe->runStep(store, in);
    for (const auto& [k, v] : ref) in.insert_or_assign(k, v);  // the state before the step
    auto want = Interpreter().run(*g, in);
    const double loss = want[0].getF(0);
    EXPECT_NEAR(got.at("loss").getF(0), loss, 1e-5 * std::fabs(loss)) << "loss";
    EXPECT_TRUE(tgc::testing::allClose(got.at("grad_norm"), want[1], 1e-4, 1e-6)) << "grad_norm";
    size_t checked = 0;
    for (size_t i = 0; i < g->outputs().size(); ++i) {
      const std::string& name = g->outputs()[i]->name();
      if (!name.starts_with("new.")) continue;
      const std::string x = name.substr(4);
      // Moments: float32 sums of differently ordered terms. Parameters: Adam's step has size
      // lr whatever the gradient's size, so a tiny gradient's rounding moves it by up to lr.
      // The key bias's gradient is zero exactly (softmax ignores a shift shared by a row's
      // scores): both sides step by the sign of rounding noise, so only the step's size is
      // checked for it.
      const bool param = !x.starts_with("adam.");
      if (param && x.ends_with("w_k.bias")) {
        for (int64_t e = 0; e < store.at(x).numel(); ++e)
          EXPECT_LE(std::fabs(store.at(x).getF(e) - ref.at(x).getF(e)), 1.01 * 3e-3) << name;
      } else {
        EXPECT_TRUE(tgc::testing::allClose(store.at(x), want[i], param ? 1e-4 : 2e-3,
                                           param ? 3e-4 : 1e-6))
            << name;
      }
      ref.insert_or_assign(x, want[i]);
      ++checked;
    }
    EXPECT_EQ(checked, 3 * inits.size());
  }
}

}  // namespace

TEST(CompiledTrainStep, TinyMatchesTheInterpreterOverTwoStepsWithDropout) {
  expectStepsMatch(0.1, false);
}
TEST(CompiledTrainStep, TinyMatchesTheInterpreterOverTwoStepsWithoutDropout) {
  expectStepsMatch(0.0, false);
}
TEST(CompiledTrainStep, TinyMatchesWithFreedMemoryPoisoned) { expectStepsMatch(0.1, true); }

TEST(CompiledTrainStep, PlanIsSoundAndStateIsUpdatedWithoutCopies) {
  auto g = tinyTrainStep(0.1);
  auto opts = tgc::testing::testExecOptions();
  opts.updateInPlace = true;
  auto exe = runtime::Executable::compile(*g, opts);
  const auto& s = exe->stats();
  EXPECT_EQ(static_cast<size_t>(s.stateInPlace + s.stateCopies), exe->stateNames().size());
  EXPECT_EQ(s.stateCopies, 0) << "every new.X should be written straight into X";
  EXPECT_GT(s.gemms, 0);
  EXPECT_GT(s.foldedReductions, 0) << "weight gradients should be single GEMMs";
  EXPECT_LT(s.distinctKernels, s.kernels / 4) << "layers' identical kernels compiled once each";
  EXPECT_LT(s.arenaBytes, s.bufferBytes / 2);
  EXPECT_GE(s.arenaBytes, s.peakLiveBytes);
  auto bufs = exe->arenaBuffers();
  for (size_t i = 0; i < bufs.size(); ++i)
    for (size_t j = i + 1; j < bufs.size(); ++j) {
      const auto &a = bufs[i], &b = bufs[j];
      if (a.bytes == 0 || b.bytes == 0 || a.last < b.first || b.last < a.first) continue;
      ASSERT_TRUE(a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset)
          << a.value << " and " << b.value << " are live together and overlap";
    }
}

// The cache is judged by the cache: a fresh directory, the same model compiled twice (the
// forward graph, whose kernels are compiled cold on every run of this test).
TEST(CompiledTrainStep, SecondCompileHitsTheCacheForEveryKernel) {
  CompiledModel m = tinyModel(0.1);
  const Graph& g = *m.graph;
  tgc::testing::ScratchDir dir("compiled-step-cache");
  runtime::ExecOptions opts;
  opts.cacheDir = dir.str();
  auto first = runtime::Executable::compile(g, opts);
  EXPECT_EQ(first->stats().cacheHits, 0);
  auto second = runtime::Executable::compile(g, opts);
  EXPECT_GT(second->stats().distinctKernels, 20);
  EXPECT_EQ(second->stats().cacheHits, second->stats().distinctKernels);
  opts.useCache = false;
  EXPECT_EQ(runtime::Executable::compile(g, opts)->stats().cacheHits, 0);
}

TEST(CompiledTrainStep, ParamStoreRoundTripsThroughSafetensors) {
  std::vector<ParamInit> inits;
  auto g = tinyTrainStep(0.0, &inits);
  runtime::ParamStore store(initParams(inits, 9));
  store.addZeroState(*g);
  tgc::testing::ScratchDir dir("param-store");
  const std::string path = dir.str() + "/state.safetensors";
  store.save(path, {{"step", "2"}});
  std::map<std::string, std::string> meta;
  runtime::ParamStore back = runtime::ParamStore::load(path, &meta);
  EXPECT_EQ(meta.at("step"), "2");
  ASSERT_EQ(back.names(), store.names());
  for (const auto& name : store.names()) EXPECT_TRUE(back.at(name).bitwiseEqual(store.at(name)));
}
