// --precision bf16 on the GPU executable (runtime/cuda): the training step lays out without a
// device (every matmul a GEMM launch, the state the f32 master weights and moments), and with
// a device (skipped, saying why, without one) two bf16 steps match the CPU's bf16 steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "frontend/frontend.h"
#include "passes/train_step.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/executable.h"
#include "runtime/param_store.h"
#include "tests/runtime/cuda_test_util.h"
#include "tests/runtime/exec_test_util.h"

using namespace tgc;
using runtime::cuda::CudaExecOptions;
using runtime::cuda::CudaExecutable;

namespace {

constexpr int64_t kVocab = 24;

CudaExecOptions cudaOptions() {
  CudaExecOptions o;
  o.updateInPlace = true;
  setenv("TGC_CACHE_DIR", (std::string(TGC_BINARY_DIR) + "/test-kernel-cache").c_str(), 0);
  return o;
}

CompiledModel bf16Step(const std::string& preset, int64_t b, int64_t s, int64_t t) {
  ModelOptions o;
  o.preset = preset;
  o.sets = {{"src_vocab", std::to_string(kVocab)}, {"tgt_vocab", std::to_string(kVocab)},
            {"p_drop", "0.1"}};
  o.dims = {{"B", b}, {"S", s}, {"T", t}};
  CompiledModel m = compileModelFile(std::string(TGC_SOURCE_DIR) + "/models/transformer.tg", o);
  m.graph->setOutputs({m.graph->outputs()[m.loss_output]});
  OptimizerConfig cfg;
  cfg.schedule = "constant";
  cfg.lr = 3e-3;
  cfg.precision = DType::bf16;
  buildTrainStep(*m.graph, cfg);
  return m;
}

int64_t matmuls(const Graph& g) {
  int64_t n = 0;
  for (const auto& node : g.nodes()) n += node->op() == OpKind::MatMul;
  return n;
}

// The state stays the f32 parameters and their two f32 moments (256-byte aligned each).
int64_t f32StateBytes(const CompiledModel& m) {
  int64_t state = 0;
  for (const Node* in : m.graph->inputs())
    if (in->attrString("role") == "param")
      state += 3 * ((in->result()->type().numel() * 4 + 255) / 256 * 256);
  return state;
}

TEST(MixedPrecisionCuda, Bf16StepLayoutWithoutADevice) {
  for (auto [preset, b, s] : {std::tuple<const char*, int64_t, int64_t>{"tiny", 3, 7}, {"base", 64, 64}}) {
    SCOPED_TRACE(preset);
    CompiledModel m = bf16Step(preset, b, s, s);
    const CudaExecutable::Layout l = CudaExecutable::layout(*m.graph, cudaOptions());
    EXPECT_GE(l.stats.gemms, matmuls(*m.graph) - 1);  // an empty product launches nothing
    EXPECT_EQ(l.stats.stateCopies, static_cast<int>(3 * m.params.size()));
    EXPECT_EQ(l.stats.stateBytes, f32StateBytes(m));
  }
}

// Two steps of the tiny bf16 step, CPU against GPU. Both sum the bf16 products in f32 and
// round once per product (the GPU also once per batch item of a weight gradient, which the
// CPU folds into one product), so they differ by bf16 roundings, which f32-level differences
// upstream of a cast trigger: on the CPU such noise moves this step's loss by ~7e-4 and its
// gradients by ~1.6e-2 (tests/train/mixed_precision_test.cpp), hence loss within 3e-3,
// gradient norm within 5e-2, moments and parameters within bf16-sized tolerances.
TEST(MixedPrecisionCuda, TwoBf16StepsMatchTheCpuBackend) {
  TGC_REQUIRE_CUDA_DEVICE();
  TGC_REQUIRE_NVRTC();
  CompiledModel m = bf16Step("tiny", 3, 7, 6);
  auto cpuOpts = tgc::testing::testExecOptions();
  cpuOpts.updateInPlace = true;
  auto cpu = runtime::Executable::compile(*m.graph, cpuOpts);
  auto gpu = CudaExecutable::compile(*m.graph, cudaOptions());

  runtime::ParamStore cpuStore(initParams(m.params, 5));
  cpuStore.addZeroState(*m.graph);
  runtime::ParamStore gpuStore = cpuStore;
  gpu->loadState(gpuStore);
  for (int64_t step = 1; step <= 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::map<std::string, Tensor> in;
    auto tokens = [&](Shape s, uint64_t seed) {
      Tensor t(TensorType{DType::i64, s});
      std::mt19937_64 rng(seed);
      for (int64_t i = 0; i < t.numel(); ++i) t.setI(i, 1 + static_cast<int64_t>(rng() % (kVocab - 1)));
      return t;
    };
    in.emplace("src", tokens({3, 7}, 1));
    in.emplace("tgt_in", tokens({3, 6}, 2));
    in.emplace("tgt_out", tokens({3, 6}, 3));
    Tensor seed(TensorType{DType::i64, {}}), st(TensorType{DType::i64, {}});
    seed.setI(0, 77);
    st.setI(0, step);
    in.emplace("seed", seed);
    in.emplace("step", st);
    auto want = cpu->runStep(cpuStore, in);
    auto got = gpu->runStep(in);
    const double loss = want.at("loss").getF(0);
    EXPECT_NEAR(got.at("loss").getF(0), loss, 3e-3 * std::fabs(loss));
    EXPECT_TRUE(tgc::testing::allClose(got.at("grad_norm"), want.at("grad_norm"), 5e-2, 1e-6));
  }
  gpu->saveState(gpuStore);
  // Adam moves a parameter by about lr per step whatever its gradient's size, so where the
  // gradient is rounding noise each side may step its own way: up to 2 lr per step apart.
  // Not yet run on a GPU: the tolerances are the CPU-vs-interpreter ones, loosened for bf16.
  for (const std::string& name : cpu->stateNames()) {
    const double atol = name.starts_with("adam.m.") ? 1e-4 : name.starts_with("adam.v.") ? 1e-6 : 4 * 3e-3;
    EXPECT_TRUE(tgc::testing::allClose(gpuStore.at(name), cpuStore.at(name), 5e-2, atol)) << name;
  }
}

}  // namespace
