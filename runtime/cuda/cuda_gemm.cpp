#include "runtime/cuda/cuda_gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "codegen/cuda/nvrtc.h"
#include "runtime/cuda/gemm_kernels_cu.h"  // generated: kGemmKernelsSource

namespace tgc::runtime::cuda {

namespace {

// Mirrors GemmParams in gemm_kernels.cu: only 8-byte fields, so host and device agree on
// the layout without packing rules.
struct GemmParams {
  long long m, n, k, lda, ldb, ldc;
  long long batchDims, batchCount;
  long long batch[kMaxGemmBatchDims], strideA[kMaxGemmBatchDims], strideB[kMaxGemmBatchDims],
      strideC[kMaxGemmBatchDims];
  double alpha, beta;
};
static_assert(sizeof(GemmParams) == 8 * (8 + 4 * kMaxGemmBatchDims + 2));

constexpr unsigned kThreads = 256;
constexpr unsigned kMaxGridZ = 65535;

bool tensorCores(DType d) { return d == DType::bf16 || d == DType::f16; }

// Tile sizes of the kernels (gemm_kernels.cu): 128 x 128 but f64's 64 x 64.
int64_t tileM(DType d) { return d == DType::f64 ? 64 : 128; }
int64_t tileN(DType d) { return d == DType::f64 ? 64 : 128; }

}  // namespace

CudaGemmDesc CudaGemmDesc::contiguous(DType dtype, int64_t m, int64_t n, int64_t k, bool transA,
                                      bool transB) {
  CudaGemmDesc d;
  d.dtype = dtype;
  d.m = m;
  d.n = n;
  d.k = k;
  d.transA = transA;
  d.transB = transB;
  d.lda = std::max<int64_t>(1, transA ? m : k);
  d.ldb = std::max<int64_t>(1, transB ? k : n);
  d.ldc = std::max<int64_t>(1, n);
  return d;
}

int64_t CudaGemmDesc::batchCount() const {
  int64_t c = 1;
  for (int64_t b : batch) c *= b;
  return c;
}

void CudaGemmDesc::validate() const {
  auto bad = [](const std::string& why) { throw std::invalid_argument("cuda gemm: " + why); };
  if (dtype != DType::f32 && dtype != DType::f64 && !tensorCores(dtype))
    bad(fmt::format("dtype {} is not supported (f32, f64, bf16, f16)", dtypeName(dtype)));
  if (m < 0 || n < 0 || k < 0) bad(fmt::format("negative size m={} n={} k={}", m, n, k));
  if (lda < std::max<int64_t>(1, transA ? m : k)) bad(fmt::format("lda={} too small", lda));
  if (ldb < std::max<int64_t>(1, transB ? k : n)) bad(fmt::format("ldb={} too small", ldb));
  if (ldc < std::max<int64_t>(1, n)) bad(fmt::format("ldc={} too small", ldc));
  if (batch.size() > static_cast<size_t>(kMaxGemmBatchDims))
    bad(fmt::format("{} batch dimensions (at most {})", batch.size(), kMaxGemmBatchDims));
  if (strideA.size() != batch.size() || strideB.size() != batch.size() ||
      strideC.size() != batch.size())
    bad(fmt::format("{} batch dimensions but {}/{}/{} strides for A/B/C", batch.size(),
                    strideA.size(), strideB.size(), strideC.size()));
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i] < 0 || strideA[i] < 0 || strideB[i] < 0 || strideC[i] < 0)
      bad(fmt::format("negative size or stride in batch dimension {}", i));
    if (strideC[i] == 0 && batch[i] > 1)
      bad(fmt::format("C cannot broadcast (batch dimension {})", i));
  }
}

const std::string& gemmSource() {
  static const std::string source(kGemmKernelsSource);
  return source;
}

std::vector<std::string> gemmKernelNames() {
  std::vector<std::string> names;
  for (const char* family : {"simt_f32", "simt_f64", "mma_bf16", "mma_f16"})
    for (const char* t : {"nn", "nt", "tn", "tt"})
      names.push_back(fmt::format("tgc_gemm_{}_{}", family, t));
  return names;
}

std::string gemmKernelName(const CudaGemmDesc& d) {
  return fmt::format("tgc_gemm_{}_{}_{}{}", tensorCores(d.dtype) ? "mma" : "simt",
                     dtypeName(d.dtype), d.transA ? 't' : 'n', d.transB ? 't' : 'n');
}

CudaGemm::CudaGemm(std::shared_ptr<Device> device) : device_(std::move(device)) {
  const auto compiled =
      codegen::cuda::compileCubin(gemmSource(), "tgc_gemm", device_->info().arch());
  module_ = std::make_unique<Module>(device_, compiled.image, "the GEMM kernels");
  for (const std::string& name : gemmKernelNames()) functions_[name] = module_->function(name);
}

CudaGemm::~CudaGemm() = default;

void CudaGemm::run(const CudaGemmDesc& d, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c,
                   Stream& stream) const {
  d.validate();
  const int64_t count = d.batchCount();
  if (d.m == 0 || d.n == 0 || count == 0) return;
  GemmParams p{};
  p.m = d.m;
  p.n = d.n;
  p.k = d.k;
  p.lda = d.lda;
  p.ldb = d.ldb;
  p.ldc = d.ldc;
  p.batchDims = static_cast<long long>(d.batch.size());
  p.batchCount = count;
  for (size_t i = 0; i < d.batch.size(); ++i) {
    p.batch[i] = d.batch[i];
    p.strideA[i] = d.strideA[i];
    p.strideB[i] = d.strideB[i];
    p.strideC[i] = d.strideC[i];
  }
  p.alpha = d.alpha;
  p.beta = d.beta;
  const int64_t gx = (d.n + tileN(d.dtype) - 1) / tileN(d.dtype);
  const int64_t gy = (d.m + tileM(d.dtype) - 1) / tileM(d.dtype);
  if (gx > 0x7FFFFFFF || gy > 65535)
    throw std::invalid_argument(fmt::format("cuda gemm: {}x{} is too large for one grid", d.m, d.n));
  const Dim3 grid{static_cast<unsigned>(gx), static_cast<unsigned>(gy),
                  static_cast<unsigned>(std::min<int64_t>(count, kMaxGridZ))};
  const std::string name = gemmKernelName(d);
  void* args[] = {&a, &b, &c, &p};
  launch(functions_.at(name), grid, Dim3{kThreads, 1, 1}, 0, stream, args,
         fmt::format("{} ({}x{}x{}, batch {})", name, d.m, d.n, d.k, count));
}

}  // namespace tgc::runtime::cuda
