// Graphs compiled for the GPU (runtime/cuda/cuda_executable.h) against the CPU backend.
// Without a device: compile stops with "no CUDA device: ...", and so do `tgc run --backend
// cuda` and `tgc train --target cuda`, exit status 1, writing nothing. With a device (the
// rest skips visibly without one): every op that runs as a generated kernel, larger shapes
// where the block mapping matters, batched and broadcast matmuls, and two steps of the tiny and
// small Transformers' training with the state kept on the device.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "codegen/lower.h"
#include "frontend/frontend.h"
#include "ir/op_table.h"
#include "ir/parser.h"
#include "passes/train_step.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/executable.h"
#include "runtime/param_store.h"
#include "tests/ir/all_ops_graph.h"
#include "tests/runtime/cuda_test_util.h"
#include "tests/runtime/exec_test_util.h"

using namespace tgc;
using runtime::cuda::CudaExecOptions;
using runtime::cuda::CudaExecutable;
namespace fs = std::filesystem;

namespace {

constexpr const char* kMatmul = R"(graph @mm {
  %a = input() : f32[4,3]
  %b = input() : f32[3,5]
  %c = matmul(%a, %b) : f32[4,5]
  return %c
}
)";

CudaExecOptions testCudaOptions() {
  CudaExecOptions o;
  setenv("TGC_CACHE_DIR", (std::string(TGC_BINARY_DIR) + "/test-kernel-cache").c_str(), 0);
  return o;
}

// ---- without a device ------------------------------------------------------------------------

TEST(CudaExec, CompileWithoutADeviceSaysSo) {
  const std::string why = runtime::cuda::noDeviceReason();
  if (why.empty()) GTEST_SKIP() << "a CUDA device is present";
  try {
    CudaExecutable::compile(*parseGraph(kMatmul, "mm.tir"), testCudaOptions());
    FAIL() << "compiled without a device";
  } catch (const runtime::cuda::NoDeviceError& e) {
    EXPECT_EQ(std::string(e.what()), why);
  }
}

struct ShellRun {
  int status;
  std::string output;
};

ShellRun shell(const std::string& cmd) {
  ShellRun r{-1, ""};
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

TEST(CudaExec, TgcRunAndTrainWithoutADeviceStopAndWriteNothing) {
  const std::string why = runtime::cuda::noDeviceReason();
  if (why.empty()) GTEST_SKIP() << "a CUDA device is present";
  const char* exe = std::getenv("TGC_EXE");
  ASSERT_TRUE(exe) << "TGC_EXE is not set (ctest sets it)";
  tgc::testing::ScratchDir dir("cuda-nodevice");
  const std::string graph = dir.str() + "/mm.tir", out = dir.str() + "/out.safetensors";
  std::ofstream(graph) << kMatmul;

  ShellRun run = shell(fmt::format("{} run {} --random-inputs 1 --backend cuda -o {}", exe, graph, out));
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("tgc run: error: no CUDA device: "), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(out));

  const std::string runDir = dir.str() + "/run";
  ShellRun train = shell(fmt::format("{} train {}/models/transformer.tg --preset tiny --target cuda "
                                "--steps 1 --out {}",
                                exe, TGC_SOURCE_DIR, runDir));
  EXPECT_EQ(train.status, 1) << train.output;
  EXPECT_NE(train.output.find("tgc train: error: no CUDA device: "), std::string::npos)
      << train.output;
  EXPECT_FALSE(fs::exists(runDir));
}

#ifdef TGC_CUDA_STUB
// The toolkit's stub libcuda has every entry point the wrapper looks up, and its cuInit
// fails: the whole loader runs, and the error names the driver's code.
TEST(CudaExec, TheToolkitsStubDriverLoadsAndSaysItIsAStub) {
  const char* exe = std::getenv("TGC_EXE");
  ASSERT_TRUE(exe) << "TGC_EXE is not set (ctest sets it)";
  tgc::testing::ScratchDir dir("cuda-stub");
  const std::string graph = dir.str() + "/mm.tir";
  std::ofstream(graph) << kMatmul;
  ShellRun run = shell(fmt::format("TGC_LIBCUDA={} {} run {} --random-inputs 1 --backend cuda",
                                   TGC_CUDA_STUB, exe, graph));
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("no CUDA device: cuInit failed with CUDA_ERROR_STUB_LIBRARY"),
            std::string::npos)
      << run.output;
}
#endif

// ---- on the GPU ------------------------------------------------------------------------------

// Compiles `g` for the CPU and the GPU, runs both on the same random inputs and compares
// every output (integers and bools exactly).
void expectSameAsCpu(const Graph& g, const std::string& label, double rtol = 2e-5,
                     double atol = 1e-5) {
  SCOPED_TRACE(label);
  auto in = tgc::testing::randomInputs(g, 7);
  auto cpu = runtime::Executable::compile(g, tgc::testing::testExecOptions())->run(in);
  auto gpu = CudaExecutable::compile(g, testCudaOptions())->run(in);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    const bool exact = !isFloat(cpu[i].dtype());
    EXPECT_TRUE(tgc::testing::allClose(gpu[i], cpu[i], exact ? 0 : rtol, exact ? 0 : atol))
        << label << " output " << g.outputs()[i]->name();
  }
}

// Each node of the all-ops graph that runs as a generated kernel, alone in a graph whose
// inputs are its operands.
TEST(CudaExecOnDevice, EveryKernelOpMatchesTheCpuBackend) {
  TGC_REQUIRE_CUDA_DEVICE();
  TGC_REQUIRE_NVRTC();
  auto all = test::buildAllOpsGraph();
  std::set<OpKind> covered;
  for (const auto& n : all->nodes()) {
    if (codegen::classify(*n) != codegen::NodeExecution::Kernel) continue;
    Graph g("one_" + std::string(opName(n->op())));
    std::vector<Value*> operands;
    for (size_t i = 0; i < n->operands().size(); ++i)
      operands.push_back(g.add(OpKind::Input, {}, {}, {fmt::format("in{}", i)},
                               {n->operand(i)->type()})
                             ->result());
    std::vector<TensorType> types;
    std::vector<std::string> names;
    for (size_t i = 0; i < n->numResults(); ++i) {
      types.push_back(n->result(i)->type());
      names.push_back(fmt::format("out{}", i));
    }
    Node* m = g.add(n->op(), operands, n->attrs(), names, types);
    for (size_t i = 0; i < m->numResults(); ++i) g.addOutput(m->result(i));
    expectSameAsCpu(g, std::string(opName(n->op())));
    covered.insert(n->op());
  }
  EXPECT_GT(covered.size(), 30u);
}

// Shapes large enough for many blocks, rows longer than a block, and sizes that are not
// multiples of the warp: the reductions' and row ops' block mappings.
TEST(CudaExecOnDevice, LargerShapesMatchTheCpuBackend) {
  TGC_REQUIRE_CUDA_DEVICE();
  TGC_REQUIRE_NVRTC();
  const char* text = R"(graph @rows {
  %x = input() : f32[333,1029]
  %g = input() : f32[1029]
  %b = input() : f32[1029]
  %s = softmax(%x) {axis=-1} : f32[333,1029]
  %n = layer_norm(%x, %g, %b) : f32[333,1029]
  %r = reduce_sum(%x) {axes=[0]} : f32[1029]
  %m = reduce_max(%x) {axes=[1]} : f32[333]
  %t = transpose(%x) {perm=[1,0]} : f32[1029,333]
  %e = exp(%t) : f32[1029,333]
  return %s, %n, %r, %m, %e
}
)";
  expectSameAsCpu(*parseGraph(text, "rows.tir"), "rows", 1e-4, 1e-4);
}

TEST(CudaExecOnDevice, BatchedAndBroadcastMatmulsMatchTheCpuBackend) {
  TGC_REQUIRE_CUDA_DEVICE();
  TGC_REQUIRE_NVRTC();
  const char* text = R"(graph @mm {
  %x = input() : f32[3,70,130]
  %w = input() : f32[130,65]
  %q = input() : f32[3,4,70,16]
  %k = input() : f32[3,4,70,16]
  %h = matmul(%x, %w) : f32[3,70,65]
  %s = matmul(%q, %k) {transpose_b=true} : f32[3,4,70,70]
  %g = matmul(%x, %h) {transpose_a=true} : f32[3,130,65]
  return %h, %s, %g
}
)";
  expectSameAsCpu(*parseGraph(text, "mm.tir"), "matmuls", 1e-4, 1e-4);
}

constexpr int64_t kVocab = 24;

// The training step of a preset with vocabularies of kVocab. Fused attention does not run
// on the GPU yet: the step is built with the forward fusions off (layer_norm_grad, a
// library op from autodiff, runs on the GPU).
CompiledModel trainStep(const std::string& preset, int64_t b, int64_t s, int64_t t) {
  setenv("TGC_NO_FUSION", "1", 1);
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
  buildTrainStep(*m.graph, cfg);
  unsetenv("TGC_NO_FUSION");
  return m;
}

// The launches and memory of the training step on the GPU, worked out without a device:
// every node has a GPU launch (generated kernels, GEMMs, library kernels), every GEMM
// descriptor is valid, and the state is the parameters with their two Adam moments.
// Integer inputs used as indices are checked on the host before the upload, in the CPU
// backend's words (runtime/index_bounds.h): an index outside its table, a target outside the
// logits; ids in range run.
TEST(CudaExecOnDevice, AnIndexOutsideItsTableOrTheLogitsIsAnError) {
  TGC_REQUIRE_CUDA_DEVICE();
  TGC_REQUIRE_NVRTC();
  auto g = parseGraph(R"(graph @ce {
  %table = input() : f32[5,5]
  %src = input() : i64[2,3]
  %tgt = input() : i64[2,3]
  %logits = gather(%table, %src) : f32[2,3,5]
  %per_token, %lse = softmax_cross_entropy(%logits, %tgt) : f32[2,3], f32[2,3]
  return %per_token
}
)",
                      "ce.tir");
  auto exe = CudaExecutable::compile(*g, testCudaOptions());
  auto ids = [](std::vector<int64_t> v) {
    Tensor t(TensorType{DType::i64, {2, 3}});
    for (int64_t i = 0; i < 6; ++i) t.setI(i, v[static_cast<size_t>(i)]);
    return t;
  };
  std::map<std::string, Tensor> in{{"table", tgc::testing::randomTensor({DType::f32, {5, 5}}, 1)},
                                   {"src", ids({0, 1, 2, 3, 4, 0})},
                                   {"tgt", ids({0, 1, 2, 3, 4, 0})}};
  EXPECT_NO_THROW(exe->run(in));
  in.at("src") = ids({0, 1, 2, 3, 5, 0});
  try {
    exe->run(in);
    FAIL() << "an index outside its table ran";
  } catch (const IRError& e) {
    EXPECT_STREQ(e.what(),
                 "gather %logits (f32[5,5], i64[2,3]): index 5 (at position [1, 1] of input "
                 "%src) is out of range for a table of 5 rows; valid indices are [0, 5)");
  }
  in.at("src") = ids({0, 1, 2, 3, 4, 0});
  in.at("tgt") = ids({0, -1, 2, 3, 4, 0});
  try {
    exe->run(in);
    FAIL() << "a target outside the logits ran";
  } catch (const IRError& e) {
    EXPECT_STREQ(e.what(),
                 "softmax_cross_entropy %per_token (f32[2,3,5], i64[2,3]): target -1 (at "
                 "position [0, 1] of input %tgt) is outside [0, 5)");
  }
}

TEST(CudaExec, TrainingStepLayoutWithoutADevice) {
  CompiledModel m = trainStep("tiny", 3, 7, 6);
  CudaExecOptions o = testCudaOptions();
  o.updateInPlace = true;
  const CudaExecutable::Layout l = CudaExecutable::layout(*m.graph, o);
  EXPECT_GT(l.stats.kernels, 100);
  EXPECT_GT(l.stats.gemms, 20);
  EXPECT_GT(l.stats.libraryLaunches, 0);  // layer_norm_grad
  EXPECT_LT(l.stats.distinctKernels, l.stats.kernels);
  EXPECT_EQ(static_cast<int>(l.launches.size()),
            l.stats.kernels + l.stats.gemms + l.stats.libraryLaunches);
  EXPECT_EQ(l.stats.stateCopies, static_cast<int>(3 * m.params.size()));
  int64_t state = 0;
  for (const Node* in : m.graph->inputs())
    if (in->attrString("role") == "param")
      state += 3 * ((in->result()->type().numel() * 4 + 255) / 256 * 256);
  EXPECT_EQ(l.stats.stateBytes, state);
  EXPECT_GT(l.stats.arenaBytes, 0);
  EXPECT_LE(l.stats.arenaBytes, l.stats.bufferBytes);
}

// The base preset's step at bench/gpu.sh's shapes (B = 64, S = T = 64) lays out as well.
TEST(CudaExec, BaseTrainingStepLayoutWithoutADevice) {
  CompiledModel m = trainStep("base", 64, 64, 64);
  CudaExecOptions o = testCudaOptions();
  o.updateInPlace = true;
  const CudaExecutable::Layout l = CudaExecutable::layout(*m.graph, o);
  EXPECT_GT(l.stats.gemms, 100);
  EXPECT_EQ(l.stats.stateCopies, static_cast<int>(3 * m.params.size()));
  EXPECT_LT(l.stats.arenaBytes, int64_t{16} << 30);
}

// Two training steps of the tiny and small Transformers: CPU (state updated in place in a
// ParamStore) against GPU (state on the device, loaded once and saved after two steps).
class CudaTrainStepOnDevice : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaTrainStepOnDevice, TwoStepsMatchTheCpuBackend) {
  TGC_REQUIRE_CUDA_DEVICE();
  TGC_REQUIRE_NVRTC();
  CompiledModel m = trainStep(GetParam(), 3, 7, 6);

  auto cpuOpts = tgc::testing::testExecOptions();
  cpuOpts.updateInPlace = true;
  auto cpu = runtime::Executable::compile(*m.graph, cpuOpts);
  CudaExecOptions gpuOpts = testCudaOptions();
  gpuOpts.updateInPlace = true;
  auto gpu = CudaExecutable::compile(*m.graph, gpuOpts);
  EXPECT_EQ(gpu->stateNames().size(), cpu->stateNames().size());

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
    EXPECT_NEAR(got.at("loss").getF(0), loss, 1e-4 * std::fabs(loss));
    EXPECT_TRUE(tgc::testing::allClose(got.at("grad_norm"), want.at("grad_norm"), 1e-3, 1e-6));
  }
  gpu->saveState(gpuStore);
  for (const std::string& name : cpu->stateNames()) {
    // Parameters move by about lr per step whatever the gradient's size: allow a fraction
    // of it; moments are float32 sums in another order.
    const bool param = !name.starts_with("adam.");
    EXPECT_TRUE(tgc::testing::allClose(gpuStore.at(name), cpuStore.at(name), param ? 1e-3 : 5e-3,
                                       param ? 1e-3 : 1e-6))
        << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, CudaTrainStepOnDevice, ::testing::Values("tiny", "small"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
