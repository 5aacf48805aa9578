// The tiny Transformer's training step (forward, loss, backward, AdamW) compiled for the CPU
// against the reference interpreter: the loss and every updated parameter and optimizer
// moment over two consecutive steps, with the state updated in place in a ParamStore, with
// dropout on and off, and with freed arena memory poisoned. Also: the kernel cache.
#include <gtest/gtest.h>

#include <algorithm>
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

OptimizerConfig stepConfig() {
  OptimizerConfig cfg;
  cfg.schedule = "constant";  // a rate that moves the parameters visibly in two steps
  cfg.lr = 3e-3;
  return cfg;
}

std::unique_ptr<Graph> tinyTrainStep(double pDrop, std::vector<ParamInit>* params = nullptr) {
  CompiledModel m = tinyModel(pDrop);
  EXPECT_GE(m.loss_output, 0);
  std::vector<Value*> outs{m.graph->outputs()[m.loss_output]};
  m.graph->setOutputs(outs);
  buildTrainStep(*m.graph, stepConfig());
  if (params) *params = m.params;
  return std::move(m.graph);
}

Tensor tokens(Shape shape, uint64_t seed, int64_t padFrom) {
  return tgc::testing::tokenIds(shape, seed, padFrom, kVocab);
}
using tgc::testing::scalarI64;

std::map<std::string, Tensor> batch(int64_t step) {
  std::map<std::string, Tensor> in;
  in.emplace("src", tokens({3, 7}, 1, 5));
  in.emplace("tgt_in", tokens({3, 6}, 2, 4));
  in.emplace("tgt_out", tokens({3, 6}, 3, 4));
  in.emplace("seed", scalarI64(77));
  in.emplace("step", scalarI64(step));
  return in;
}

// The gradient Adam saw at this step, from its first moment: m = b1 m_old + (1 - b1) g.
std::vector<double> gradientFromMoments(const Tensor& mNew, const Tensor& mOld, double b1) {
  std::vector<double> g(static_cast<size_t>(mNew.numel()));
  for (int64_t e = 0; e < mNew.numel(); ++e)
    g[static_cast<size_t>(e)] = (mNew.getF(e) - b1 * mOld.getF(e)) / (1 - b1);
  return g;
}

double l2(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

// How the compiled step is judged against the interpreter's:
// - the loss, the gradient norm and the optimizer moments element by element;
// - each parameter's gradient (recovered from the moments) in the L2 norm: within kGradRtol
//   of the gradient's norm, plus kGradFloor of the step's largest gradient per element (the
//   key bias's true gradient is exactly 0: softmax ignores a shift shared by a row's
//   scores). float32 sums of differently ordered terms differ by rounding (~1e-5 measured);
//   a 1% error in one of the attention backward's gradients fails it;
// - each step's parameter update element by element, where Adam's denominator sqrt(v_hat)
//   (the gradient's size over the steps) is at least kGradNoise of the largest: Adam's step
//   has size ~lr whatever the gradient's size, so where the gradient is rounding noise (~1e-8
//   against a largest of ~1e-1) each side steps in the direction of its own noise. There
//   only the step's size is checked, and such elements must stay a small part of all.
constexpr double kGradNoise = 1e-4;
constexpr double kGradRtol = 1e-3;
constexpr double kGradFloor = 1e-6;
constexpr double kStepAtol = 1e-4;

// Two steps compiled (state in a ParamStore, updated in place) and interpreted (state fed
// back by name) must agree to float32 accuracy.
void expectStepsMatch(double pDrop, bool poison) {
  const OptimizerConfig cfg = stepConfig();
  std::vector<ParamInit> inits;
  auto g = tinyTrainStep(pDrop, &inits);
  auto opts = tgc::testing::testExecOptions();
  opts.updateInPlace = true;
  opts.poisonFreed = poison;
  auto exe = runtime::Executable::compile(*g, opts);

  runtime::ParamStore store(initParams(inits, 5));
  EXPECT_EQ(store.addZeroState(*g), 2 * inits.size());
  std::map<std::string, Tensor> ref = store.tensors();
  std::map<std::string, size_t> outIndex;
  for (size_t i = 0; i < g->outputs().size(); ++i) outIndex[g->outputs()[i]->name()] = i;
  for (int64_t step = 1; step <= 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::map<std::string, Tensor> in = batch(step);
    const std::map<std::string, Tensor> before = store.tensors();  // the compiled side's state
    auto got = exe->runStep(store, in);
    for (const auto& [k, v] : ref) in.insert_or_assign(k, v);  // the state before the step
    auto want = Interpreter().run(*g, in);
    auto wantOf = [&](const std::string& name) -> const Tensor& {
      return want.at(outIndex.at(name));
    };
    const double loss = want[0].getF(0);
    EXPECT_NEAR(got.at("loss").getF(0), loss, 1e-5 * std::fabs(loss)) << "loss";
    EXPECT_TRUE(tgc::testing::allClose(got.at("grad_norm"), want[1], 1e-4, 1e-6)) << "grad_norm";

    // The largest gradient and Adam denominator of the step, over all parameters.
    const double bias2 = 1 - std::pow(cfg.beta2, static_cast<double>(step));
    double gradMax = 0, denomMax = 0;
    for (const ParamInit& p : inits) {
      const Tensor& m = wantOf("new.adam.m." + p.name);
      const Tensor& v = wantOf("new.adam.v." + p.name);
      for (double x : gradientFromMoments(m, ref.at("adam.m." + p.name), cfg.beta1))
        gradMax = std::max(gradMax, std::fabs(x));
      for (int64_t e = 0; e < v.numel(); ++e)
        denomMax = std::max(denomMax, std::sqrt(v.getF(e) / bias2));
    }
    ASSERT_GT(gradMax, 0);

    int64_t compared = 0, noise = 0;
    for (const ParamInit& p : inits) {
      const std::string& x = p.name;
      SCOPED_TRACE(x);
      for (const std::string& moment : {"adam.m." + x, "adam.v." + x})
        EXPECT_TRUE(tgc::testing::allClose(store.at(moment), wantOf("new." + moment), 2e-3, 1e-6))
            << moment;
      const auto gWant =
          gradientFromMoments(wantOf("new.adam.m." + x), ref.at("adam.m." + x), cfg.beta1);
      const auto gGot =
          gradientFromMoments(store.at("adam.m." + x), before.at("adam.m." + x), cfg.beta1);
      std::vector<double> diff(gWant.size());
      for (size_t e = 0; e < diff.size(); ++e) diff[e] = gGot[e] - gWant[e];
      const double floor = kGradFloor * gradMax * std::sqrt(static_cast<double>(diff.size()));
      EXPECT_LE(l2(diff), kGradRtol * l2(gWant) + floor) << "gradient of " << x;

      // Each step's update, so that a noise element's step-1 difference is not held against
      // its step 2.
      const Tensor& pWant = wantOf("new." + x);
      const Tensor& v = wantOf("new.adam.v." + x);
      for (int64_t e = 0; e < pWant.numel(); ++e) {
        const double stepGot = store.at(x).getF(e) - before.at(x).getF(e);
        const double stepWant = pWant.getF(e) - ref.at(x).getF(e);
        const double denom = std::sqrt(v.getF(e) / bias2);
        if (denom >= kGradNoise * denomMax) {
          EXPECT_LE(std::fabs(stepGot - stepWant), kStepAtol) << x << " element " << e;
          ++compared;
        } else {
          EXPECT_LE(std::fabs(stepGot), 1.01 * cfg.lr) << x << " element " << e;
          noise += denom > 0;  // exact zeros (dead ReLUs, tokens not in the batch) aside
        }
      }
    }
    EXPECT_LT(noise, compared / 20) << "parameters whose gradient is rounding noise";
    for (size_t i = 0; i < g->outputs().size(); ++i) {
      const std::string& name = g->outputs()[i]->name();
      if (name.starts_with("new.")) ref.insert_or_assign(name.substr(4), want[i]);
    }
    EXPECT_EQ(ref.size(), 3 * inits.size());
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
  // The arena reuses memory: well under the sum of all buffers (0.56 since the head-split
  // fold removed the attention transposes' short-lived buffers; the arena stayed the same).
  EXPECT_LT(s.arenaBytes, s.bufferBytes * 3 / 5);
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
  // Every kernel the first compile built (each a cold compile: none was cached) is a hit the
  // second time, however many the fusions leave.
  EXPECT_GT(first->stats().distinctKernels, 0);
  EXPECT_EQ(first->stats().jitCompiles, first->stats().distinctKernels);
  EXPECT_EQ(second->stats().distinctKernels, first->stats().distinctKernels);
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
