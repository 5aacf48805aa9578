// Batched GEMM on the CPU:  C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b]
// for f32 and f64, op = identity or transpose, any sizes, row-major with leading
// dimensions, batch dimensions with per-operand strides (stride 0 broadcasts an operand).
//
// The structure is BLIS/GotoBLAS: B is packed into kc x NR slivers and A into MR x kc
// slivers (zero-padded, contiguous), blocked for the caches (kc, mc, nc), and a
// register-blocked micro-kernel generated as LLVM IR for the host's vector registers and
// JIT-compiled (codegen/gemm_kernel.h) computes the MR x NR tiles of C. When B has few
// columns, A is read in place instead of packed (each A sliver would serve too few tiles).
//
// Threads: batch items are handed out whole when there are enough of them, in runs of
// consecutive items, the next item's A and B prefetched into L2 while the current one
// runs (small items wait on their operands otherwise); else each product packs B for all
// of K, or for a K super-block when B is large and K long (one barrier per packed panel,
// gemmBBlocking), and hands out blocks of rows, or of B slivers when
// there are few rows, from a shared counter, so the work balances itself across cores
// that other load slows down unevenly. The chunk count is a multiple of the thread count
// and chunks differ by at most one sliver, so that idle cores get equal shares.
//
// With GemmDesc::sumB the column sums of op(B) are taken from the packed slivers as they
// are packed (per k block, added up in k-block order after the packing barrier).
//
// An epilogue (codegen/gemm_epilogue.h: bias, addend, activation, scale, mask) is applied
// to each column of tiles right after the micro-kernel finishes its last K block, while
// those MR-row slivers x NR columns are still in L1.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "codegen/gemm_epilogue.h"
#include "codegen/gemm_kernel.h"
#include "codegen/gemm_pair_share.h"
#include "codegen/gemm_scratch.h"
#include "ir/dtype.h"

namespace tgc {
class ThreadPool;
}

namespace tgc::codegen {

class Jit;
struct GemmPackedB;

struct GemmDesc {
  DType dtype = DType::f32;  // f32 or f64, for A, B and C alike
  int64_t m = 0, n = 0, k = 0;  // op(A) is m x k, op(B) is k x n, C is m x n
  bool transA = false;  // A is stored k x m (row-major) and used transposed
  bool transB = false;  // B is stored n x k and used transposed
  int64_t lda = 0, ldb = 0, ldc = 0;  // row strides, in elements, of A, B, C as stored
  double alpha = 1.0, beta = 0.0;     // C is not read when beta == 0

  // Batch dimensions, outermost first (empty: a single product), and for each the
  // stride in elements between consecutive A, B and C matrices. A stride of 0 reuses one
  // matrix for the whole dimension (broadcast); C's may be 0 only for a dimension of 1.
  std::vector<int64_t> batch;
  std::vector<int64_t> strideA, strideB, strideC;

  // Applied to C after the product (empty: none); its operands come with the call.
  GemmEpilogue epilogue;
  // Also writes the column sums of op(B), sum over k of op(B)(k, j) for j < n, to the
  // call's GemmEpilogueOperands::sumB (the bias gradient db = sum of dY's rows next to
  // dW = x^T dY). They are summed while B is packed, where each element of B passes
  // exactly once, in an order that does not depend on the threads. A single product only.
  bool sumB = false;
  // bf16 products only: B is stored as f32 and rounded to bf16 (nearest even) as it is
  // packed or widened -- a cast of the weight folded into its GEMM
  // (runtime/gemm_cast_fold.h); ldb and strideB still count elements. Not with sumB.
  bool bF32 = false;

  // Contiguous row-major operands: lda/ldb/ldc set from the shapes.
  static GemmDesc contiguous(DType dtype, int64_t m, int64_t n, int64_t k, bool transA = false,
                             bool transB = false);
  // Adds an outer batch dimension of `count` items stored one after another, each the
  // size of everything added before (with broadcastA / broadcastB: one A or B for all).
  GemmDesc& addBatch(int64_t count, bool broadcastA = false, bool broadcastB = false);

  int64_t batchCount() const;
  // Throws std::invalid_argument naming the first inconsistent field.
  void validate() const;
};

// The JIT-compiled kernels of one configuration, and the driver that runs them.
class GemmEngine {
 public:
  // Generates and compiles the micro-kernel for `config` with `jit`.
  GemmEngine(Jit& jit, const GemmKernelConfig& config);

  // The engine for the host CPU and a dtype (f32 or f64), compiled on first use with a
  // process-wide JIT (and its object cache).
  static GemmEngine& host(DType dtype);

  const GemmKernelConfig& config() const { return config_; }

  // Runs the batched product and desc.epilogue (with `epi`'s operands); `pool` defaults to
  // ThreadPool::global(). `share`: the product is half of a GEMM pair, run on a pool of one
  // thread, whose other thread may help with it (a single product; ignored for a batch).
  // `packedB`: desc's B as packB packed it (ignored where packB would return null); b is
  // then not read.
  void run(const GemmDesc& desc, const void* a, const void* b, void* c, ThreadPool* pool = nullptr,
           const GemmEpilogueOperands& epi = {}, GemmPairShare::Side share = {},
           const GemmPackedB* packedB = nullptr) const;

  // B of a single product packed once into the panels run() would pack on every call, for
  // a B that does not change between calls (an inference weight): run() with it skips the
  // read and write of all of B that each call otherwise pays (at 32 rows, as much time as
  // the products). Null where run() would not pack B: a batch, sumB, bF32, k == 0, or few
  // enough rows that B is read in place (codegen/gemm_small_m.h); and for products small
  // enough for the batched path (codegen/gemm_batched.h), whose B is cheap to pack.
  std::shared_ptr<const GemmPackedB> packB(const GemmDesc& desc, const void* b) const;

  // The generated kernel (GemmEpilogueKernel<float or double>*) of epi's stages, compiled
  // on first use; null for an empty epilogue.
  void* epilogueKernel(const GemmEpilogue& epi) const;

 private:
  template <class T>
  void runTyped(const GemmDesc& desc, const T* a, const T* b, T* c, ThreadPool& pool,
                const GemmEpilogueOperands& epi, GemmPairShare::Side share,
                const GemmPackedB* packedB) const;

  Jit* jit_;
  GemmKernelConfig config_;
  void* kernel_ = nullptr;        // GemmMicroKernel<float or double>*
  void* kernelDirectA_ = nullptr;  // GemmMicroKernelDirectA<float or double>*
  mutable std::mutex epilogueMutex_;  // serializes compiling epilogue kernels
  mutable std::array<std::atomic<void*>, GemmEpilogue::kVariants> epilogues_{};
};

// How one product of `desc` packs B with `config`: column blocks of nc columns, each in K
// super-blocks of ks (ks >= k: all of K in one), a packed panel of ks x nc at a time.
struct GemmBBlocking {
  int64_t nc = 0, ks = 0;
};
GemmBBlocking gemmBBlocking(const GemmKernelConfig& config, const GemmDesc& desc);

// The panels of one B (GemmEngine::packB), one per (column block, K super-block) in
// product order, each as product() lays out its per-call scratch panel.
struct GemmPackedB {
  DType dtype = DType::f32;
  int64_t n = 0, k = 0;  // the product's shape it was packed for (checked by run)
  bool transB = false;
  GemmBBlocking blocking;
  std::vector<int64_t> offsets;  // per panel, in elements of `dtype` into data (64-byte aligned)
  Scratch storage;               // aligned as the kernels' loads need it
  void* data = nullptr;

  template <class T>
  const T* panel(int64_t column, int64_t super) const {
    const int64_t supers = (k + blocking.ks - 1) / blocking.ks;
    return static_cast<const T*>(data) + offsets[static_cast<size_t>(column * supers + super)];
  }
};

// Runs desc with the host engine for its dtype.
void gemm(const GemmDesc& desc, const void* a, const void* b, void* c, ThreadPool* pool = nullptr,
          const GemmEpilogueOperands& epi = {}, GemmPairShare::Side share = {},
          const GemmPackedB* packedB = nullptr);

}  // namespace tgc::codegen
