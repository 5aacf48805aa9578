// Training on the GPU (runtime/train/step_backend.h, CUDA backend; `tgc train --target cuda`).
// Without a device: the trainer stops with "no CUDA device: ..." before writing anything,
// and the graphs the backend runs (the trainer's guarded step with its state shared between
// buckets, the averaging graph) lay out for the GPU. With a device (skipped visibly without
// one): a run of the CPU trainer and of the CUDA trainer over two length buckets agree step
// by step within tolerance, validation and resuming work from the device's state, and a short
// `tgc train --target cuda` run lowers its loss.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "frontend/frontend.h"
#include "passes/train_step.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/train/step_backend.h"
#include "runtime/train/trainer.h"
#include "tests/runtime/cuda_test_util.h"
#include "tests/runtime/exec_test_util.h"
#include "tests/train/trainer_test_util.h"

using namespace tgc;
using namespace tgc::train;
namespace fs = std::filesystem;

namespace {

// ---- without a device ------------------------------------------------------------------------

TEST(CudaTrain, TrainerWithoutADeviceSaysSoAndWritesNothing) {
  const std::string why = runtime::cuda::noDeviceReason();
  if (why.empty()) GTEST_SKIP() << "a CUDA device is present";
  traintest::ScratchDir dir("cuda-train-nodevice");
  const std::string out = dir.str("run");
  try {
    Trainer t(traintest::microModel(), traintest::microData(), traintest::microConfig(), out,
              traintest::trainExecOptions(), nullptr, Target::cuda);
    FAIL() << "a trainer for CUDA without a device";
  } catch (const runtime::cuda::NoDeviceError& e) {
    EXPECT_EQ(std::string(e.what()), why);
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_THROW(makeStepBackend(Target::cuda, traintest::trainExecOptions()),
               runtime::cuda::NoDeviceError);
}

runtime::cuda::CudaExecOptions sharedStateOptions() {
  runtime::cuda::CudaExecOptions o;
  o.updateInPlace = true;
  o.sharedState = true;
  return o;
}

// The trainer's step (forward fusions on, the non-finite guard) for the GPU: every state
// update a copy within the shared state, every launch there; the averaging graph over the
// same parameters too.
TEST(CudaTrain, TrainerGraphsLayOutForTheGpu) {
  ModelOptions mo = traintest::microModel().options("train", {{"B", 16}, {"S", 12}, {"T", 14}},
                                                    {{"src_vocab", "30"}, {"tgt_vocab", "40"}});
  CompiledModel m = compileModelFile(traintest::microModel().path, mo);
  m.graph->setOutputs({m.graph->outputs()[static_cast<size_t>(m.loss_output)]});
  const size_t params = buildTrainStep(*m.graph, OptimizerConfig{});
  EXPECT_EQ(guardNonFinite(*m.graph), 3 * params);
  const auto step = runtime::cuda::CudaExecutable::layout(*m.graph, sharedStateOptions());
  EXPECT_EQ(step.stats.stateCopies, static_cast<int>(3 * params));
  EXPECT_GT(step.stats.libraryLaunches, 0);  // fused attention and cross-entropy
  EXPECT_GT(step.stats.gemms, 10);

  std::map<std::string, TensorType> types;
  for (const ParamInit& p : m.params) types.emplace(p.name, m.graph->findValue(p.name)->type());
  const auto avg = runtime::cuda::CudaExecutable::layout(*averagesGraph(types), sharedStateOptions());
  EXPECT_EQ(avg.stats.stateCopies, static_cast<int>(types.size()));
  EXPECT_EQ(avg.stats.gemms, 0);
  EXPECT_GE(avg.stats.kernels, 1);
  // One fused kernel per parameter, and 1 - decay once.
  EXPECT_LE(avg.stats.kernels, static_cast<int>(types.size()) + 1);
}

// ---- on the GPU ------------------------------------------------------------------------------

TrainConfig twoBuckets() {
  TrainConfig c = traintest::microConfig();
  c.buckets = 2;  // two compiled steps sharing the state on the device
  return c;
}

void expectClose(const runtime::ParamStore& gpu, const runtime::ParamStore& cpu) {
  ASSERT_EQ(gpu.names(), cpu.names());
  for (const auto& [name, t] : cpu.tensors()) {
    // Parameters move by about lr per step whatever the gradient's size; moments are float32
    // sums in another order.
    const bool moment = name.starts_with("adam.");
    EXPECT_TRUE(tgc::testing::allClose(gpu.at(name), t, moment ? 1e-2 : 2e-3, moment ? 1e-6 : 2e-3))
        << name;
  }
}

// The micro model of the trainer tests, or the tiny preset itself (without dropout).
ModelSpec modelNamed(const std::string& name) {
  if (name == "micro") return traintest::microModel("0");
  ModelSpec m = traintest::microModel("0");
  m.sets = {{"p_drop", "0"}};
  return m;
}

// 10 steps (both buckets, averages on) on the CPU and on the GPU: the same losses and gradient
// norms within tolerance, the same state; validation from the device's state; a checkpoint
// of the GPU run resumed on the GPU starts from exactly that state and keeps training.
class CudaTrainOnDeviceModel : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaTrainOnDeviceModel, TrainerMatchesTheCpuTrainer) {
  TGC_REQUIRE_CUDA_DEVICE();
  TGC_REQUIRE_NVRTC();
  traintest::ScratchDir cpuDir("cuda-train-cpu"), gpuDir("cuda-train-gpu");
  const auto exec = traintest::trainExecOptions();
  const ModelSpec model = modelNamed(GetParam());
  Trainer cpu(model, traintest::microData(), twoBuckets(), cpuDir.str(), exec);
  Trainer gpu(model, traintest::microData(), twoBuckets(), gpuDir.str(), exec, nullptr, Target::cuda);
  EXPECT_NE(gpu.backend().describe().find("CUDA device"), std::string::npos);
  std::set<int64_t> shapes;
  for (int i = 0; i < 10; ++i) {
    SCOPED_TRACE(fmt::format("step {}", i + 1));
    const HistoryRow a = cpu.step(), b = gpu.step();
    ASSERT_TRUE(std::isfinite(b.loss));
    EXPECT_NEAR(b.loss, a.loss, 2e-3 * std::fabs(a.loss));
    EXPECT_NEAR(b.gradNorm, a.gradNorm, 1e-2 * std::fabs(a.gradNorm) + 1e-6);
    EXPECT_NEAR(b.lr, a.lr, 1e-6 * a.lr);
    EXPECT_EQ(b.update, a.update);
  }
  EXPECT_EQ(gpu.updates(), 10);
  expectClose(gpu.state(), cpu.state());
  EXPECT_TRUE(gpu.state().contains("ema.encoder.layers.0.norm1.gamma"));

  const ValidRow va = cpu.validate(), vb = gpu.validate();
  EXPECT_NEAR(vb.loss, va.loss, 2e-3 * std::fabs(va.loss));

  const std::string saved = gpu.saveCheckpoint();
  const runtime::ParamStore before = gpu.state();
  auto resumed = Trainer::resume(saved, "", exec, nullptr, Target::cuda);
  for (const auto& [name, t] : before.tensors())
    EXPECT_EQ(std::memcmp(resumed->state().at(name).data(), t.data(), t.nbytes()), 0) << name;
  const HistoryRow next = resumed->step(), ref = gpu.step();
  EXPECT_NEAR(next.loss, ref.loss, 1e-4 * std::fabs(ref.loss));
  EXPECT_EQ(resumed->updates(), 11);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaTrainOnDeviceModel, ::testing::Values("micro", "tiny"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

struct ShellRun {
  int status = -1;
  std::string output;
};

ShellRun shell(const std::string& cmd) {
  ShellRun r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// `tgc train --target cuda` for 150 steps of the micro model: exit 0, the steps compiled for
// the device, the loss of the last 20 steps well below that of the first 10 (on the CPU:
// 4.8 -> 1.9), the final evaluation run.
TEST(CudaTrainOnDevice, TgcTrainTargetCudaLowersTheLoss) {
  TGC_REQUIRE_CUDA_DEVICE();
  TGC_REQUIRE_NVRTC();
  const char* exe = std::getenv("TGC_EXE");
  ASSERT_TRUE(exe) << "TGC_EXE is not set (ctest sets it)";
  traintest::ScratchDir dir("cuda-train-cli");
  const std::string out = dir.str("run");
  const ShellRun r = shell(fmt::format(
      "TGC_CACHE_DIR={}/test-kernel-cache {} train {}/models/transformer.tg --preset tiny "
      "--set d_model=32 --set heads=2 --set d_ff=64 --set n_enc=1 --set n_dec=1 --batch 32 "
      "--steps 150 --valid-every 0 --samples 2 --target cuda --out {}",
      TGC_BINARY_DIR, exe, TGC_SOURCE_DIR, out));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("compiled the training step for"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" on CUDA device "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("test (held-out numbers): exact match"), std::string::npos) << r.output;

  std::ifstream csv(out + "/loss.csv");
  std::string line;
  std::getline(csv, line);  // step,update,loss,grad_norm,lr,tokens
  std::vector<double> loss;
  while (std::getline(csv, line)) {
    std::stringstream row(line);
    std::string cell;
    for (int col = 0; col < 3 && std::getline(row, cell, ','); ++col)
      if (col == 2) loss.push_back(std::stod(cell));
  }
  ASSERT_EQ(loss.size(), 150u);
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) first += loss[static_cast<size_t>(i)] / 10;
  for (int i = 130; i < 150; ++i) last += loss[static_cast<size_t>(i)] / 20;
  std::printf("tgc train --target cuda: loss %.3f (first 10 steps) -> %.3f (last 20)\n", first, last);
  EXPECT_LT(last, 0.6 * first);
}

}  // namespace
