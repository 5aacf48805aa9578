// GEMM on NVIDIA GPUs: the kernels of runtime/cuda/gemm_kernels.cu, compiled by NVRTC for
// the device (CUBIN) and launched on a stream.
//
//   C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b]    (row-major, C not read when beta == 0)
//
// f32 and f64 run on CUDA cores (128x128 and 64x64 tiles); bf16 and f16 on tensor cores (mma.sync
// m16n8k16, fp32 accumulation, C rounded to the input type). Any sizes, transposes, up to
// four batch dimensions with per-operand strides (0 broadcasts one matrix).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "runtime/cuda/driver.h"

namespace tgc::runtime::cuda {

struct CudaGemmDesc {
  DType dtype = DType::f32;     // A, B and C alike: f32, f64, bf16 or f16
  int64_t m = 0, n = 0, k = 0;  // op(A) is m x k, op(B) k x n, C m x n
  bool transA = false, transB = false;  // A stored k x m, B stored n x k
  int64_t lda = 0, ldb = 0, ldc = 0;    // row strides as stored, in elements
  double alpha = 1.0, beta = 0.0;
  // Batch dims, outermost first, with element strides between consecutive matrices.
  std::vector<int64_t> batch, strideA, strideB, strideC;

  static CudaGemmDesc contiguous(DType dtype, int64_t m, int64_t n, int64_t k,
                                 bool transA = false, bool transB = false);
  int64_t batchCount() const;
  // Throws std::invalid_argument naming the first inconsistent field.
  void validate() const;
};

inline constexpr int kMaxGemmBatchDims = 4;

// The CUDA C++ source of every GEMM kernel (a complete translation unit).
const std::string& gemmSource();
// The extern "C" kernels in gemmSource(), and the one that runs `desc`.
std::vector<std::string> gemmKernelNames();
std::string gemmKernelName(const CudaGemmDesc& desc);

// The kernels loaded on one device.
class CudaGemm {
 public:
  // Compiles gemmSource() to CUBIN for the device's architecture (NVRTC's disk cache makes
  // later constructions cheap) and loads it. Throws codegen::cuda::NvrtcError, CudaError.
  explicit CudaGemm(std::shared_ptr<Device> device);
  ~CudaGemm();

  // Enqueues the product on `stream`. An empty product (m, n or batch 0) launches
  // nothing; k == 0 with beta == 0 writes zeros.
  void run(const CudaGemmDesc& desc, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c,
           Stream& stream) const;

 private:
  std::shared_ptr<Device> device_;
  std::unique_ptr<Module> module_;
  std::map<std::string, CUfunction> functions_;
};

}  // namespace tgc::runtime::cuda
