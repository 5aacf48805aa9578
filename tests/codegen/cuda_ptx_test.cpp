// Every kernel of the base preset's training step, printed as CUDA, compiles through NVRTC
// to PTX for compute_90 and assembles with ptxas for sm_90 (issue 8's CI test, no GPU
// needed); so does every kernel of the tiny and base steps with --precision bf16, whose
// matmuls all map to the tensor-core GEMM. Skipped, saying why, without libnvrtc or ptxas.
//
// Kernels that differ only in their names (the same op in each layer) are compiled once:
// the test checks every distinct kernel text. They go through NVRTC in groups, on two
// threads, bypassing the cache so that the compiler really runs.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <unistd.h>

#include "codegen/cuda/cuda_batch.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/nvrtc.h"
#include "frontend/frontend.h"
#include "passes/train_step.h"
#include "runtime/cuda/cuda_gemm.h"
#include "runtime/executable.h"
#include "runtime/matmul_gemm.h"

using namespace tgc;
namespace cuda = tgc::codegen::cuda;
namespace fs = std::filesystem;

namespace {

// ptxas from $TGC_PTXAS, the toolkit CMake found, $CUDA_HOME or /usr/local/cuda; "" if none.
std::string findPtxas() {
  std::vector<std::string> candidates;
  if (const char* p = std::getenv("TGC_PTXAS"); p && *p) candidates.emplace_back(p);
#ifdef TGC_CUDA_BIN_DIR
  candidates.emplace_back(std::string(TGC_CUDA_BIN_DIR) + "/ptxas");
#endif
  if (const char* h = std::getenv("CUDA_HOME"); h && *h) candidates.push_back(std::string(h) + "/bin/ptxas");
  candidates.emplace_back("/usr/local/cuda/bin/ptxas");
  for (const auto& c : candidates)
    if (access(c.c_str(), X_OK) == 0) return c;
  return "";
}

std::unique_ptr<Graph> trainStep(const std::string& preset, DType precision = DType::f32) {
  ModelOptions o;
  o.preset = preset;
  CompiledModel m = compileModelFile(std::string(TGC_SOURCE_DIR) + "/models/transformer.tg", o);
  EXPECT_GE(m.loss_output, 0);
  m.graph->setOutputs({m.graph->outputs()[m.loss_output]});
  OptimizerConfig cfg;
  cfg.precision = precision;
  for (const auto& [k, v] : m.config)
    if (k == "d_model" && std::holds_alternative<int64_t>(v)) cfg.d_model = std::get<int64_t>(v);
  buildTrainStep(*m.graph, cfg);
  return std::move(m.graph);
}

// Every distinct kernel of the steps through NVRTC (PTX, compute_90) and ptxas (sm_90).
void expectKernelsPassPtxas(const std::vector<const Graph*>& steps, const std::string& label,
                            size_t minKernels);

TEST(CudaPtx, BaseTrainStepKernelsPassPtxas) {
  auto step = trainStep("base");
  expectKernelsPassPtxas({step.get()}, "base train step", 100);
}

// --precision bf16: the casts around the matmuls and the bf16 reductions of the weight
// gradients compile too, and every matmul is a bf16 GEMM the CUDA executable runs on tensor
// cores (mma.sync, f32 accumulation): checked on the descriptors, no GPU needed.
TEST(CudaPtx, Bf16TrainStepKernelsPassPtxas) {
  std::vector<std::unique_ptr<Graph>> steps;
  for (const char* preset : {"tiny", "base"}) {
    auto& step = steps.emplace_back(trainStep(preset, DType::bf16));
    int matmuls = 0;
    for (const auto& n : step->nodes()) {
      if (n->op() != OpKind::MatMul) continue;
      ++matmuls;
      const auto d = runtime::matmulGemmDesc<runtime::cuda::CudaGemmDesc>(*n);
      EXPECT_NO_THROW(d.validate()) << describeNode(*n);
      EXPECT_TRUE(runtime::cuda::gemmKernelName(d).starts_with("tgc_gemm_mma_bf16_")) << describeNode(*n);
    }
    EXPECT_GT(matmuls, 50) << preset;
  }
  // The two presets' kernels differ mostly in sizes: one set of distinct texts for both.
  expectKernelsPassPtxas({steps[0].get(), steps[1].get()}, "tiny + base bf16 train steps", 100);
}

void expectKernelsPassPtxas(const std::vector<const Graph*>& steps, const std::string& label,
                            size_t minKernels) {
  if (std::string why = cuda::nvrtcUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  const std::string ptxas = findPtxas();
  if (ptxas.empty()) GTEST_SKIP() << "ptxas not found (set TGC_PTXAS or CUDA_HOME)";

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<codegen::kir::Kernel> kernels;
  for (size_t i = 0; i < steps.size(); ++i)
    for (auto& k : runtime::lowerGraphKernels(*steps[i])) {
      if (i > 0) k.name = fmt::format("s{}_{}", i, k.name);  // names are unique per step only
      kernels.push_back(std::move(k));
    }
  ASSERT_GT(kernels.size(), minKernels);
  // One representative per distinct kernel text, the names of the kernel and its buffers
  // (which only name graph values) made alike.
  std::map<std::string, const codegen::kir::Kernel*> distinct;
  for (const auto& k : kernels) {
    codegen::kir::Kernel plain = k;
    plain.name = "k";
    for (auto& b : plain.buffers) b.name = "x";
    distinct.emplace(cuda::kernelFunction(plain), &k);
  }
  std::vector<const codegen::kir::Kernel*> unique;
  for (const auto& [text, k] : distinct) unique.push_back(k);

  cuda::NvrtcOptions options;
  options.useCache = false;
  const auto modules =
      cuda::compileKernelModules(unique, cuda::Product::Ptx, "compute_90", 48, 2, options);
  const auto t1 = std::chrono::steady_clock::now();

  const fs::path dir = fs::temp_directory_path() / fmt::format("tgc-cuda-ptx-{}", getpid());
  fs::create_directories(dir);
  size_t entries = 0;
  for (const auto& m : modules)  // the generated code compiles cleanly
    EXPECT_EQ(m.compiled.log.find("warning"), std::string::npos) << m.compiled.log.substr(0, 2000);
  for (size_t m = 0; m < modules.size(); ++m) {
    const std::string& ptx = modules[m].compiled.image;
    for (size_t at = 0; (at = ptx.find(".entry ", at)) != std::string::npos; ++at) ++entries;
    const fs::path file = dir / fmt::format("module{}.ptx", m);
    std::ofstream(file) << ptx;
  }
  // ptxas over the modules, two at a time.
  std::string script;
  for (size_t m = 0; m < modules.size(); ++m)
    script += fmt::format("{} -arch=sm_90 -o /dev/null {}/module{}.ptx > {}/module{}.log 2>&1 || echo {} >> {}/failed\n",
                          ptxas, dir.string(), m, dir.string(), m, m, dir.string());
  std::ofstream(dir / "run.sh") << script;
  const std::string cmd = fmt::format("xargs -P 2 -I CMD sh -c CMD < {0}/run.sh", dir.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::string failed;
  if (std::ifstream f(dir / "failed"); f) {
    for (std::string m; std::getline(f, m);) {
      std::ifstream log(dir / fmt::format("module{}.log", m));
      failed += fmt::format("module {} ({} ...):\n{}\n", m, modules[std::stoul(m)].names.front(),
                            std::string(std::istreambuf_iterator<char>(log), {}));
    }
  }
  const auto t2 = std::chrono::steady_clock::now();
  fs::remove_all(dir);
  EXPECT_EQ(failed, "") << "ptxas rejected modules";
  EXPECT_EQ(entries, unique.size());
  const auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  std::printf("%s: %zu kernels, %zu distinct, %zu NVRTC programs; NVRTC %.1f s, "
              "ptxas sm_90 %.1f s\n",
              label.c_str(), kernels.size(), unique.size(), modules.size(), secs(t0, t1), secs(t1, t2));
}

}  // namespace
