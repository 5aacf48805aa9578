#include "codegen/gemm_batched.h"

#include "codegen/gemm_scratch.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace tgc::codegen::batched {

bool smallItems(const GemmKernelConfig& cfg, const GemmDesc& d) {
  const int64_t elem = d.dtype == DType::f64 ? 8 : 4;
  const int64_t storedA = (d.transA ? d.k : d.m) * d.lda, storedB = (d.transB ? d.n : d.k) * d.ldb;
  // One K block and one column panel; alpha == 0 and k == 0 only scale C (the general path).
  return d.k > 0 && d.alpha != 0.0 && d.k <= cfg.kc && d.n <= cfg.nc && !d.sumB &&
         elem * (storedA + storedB) <= kItemOperandBytes;
}

namespace {

thread_local Scratch tBuffers[2];  // codegen/gemm_scratch.h

}  // namespace

void* scratch(int slot, int64_t bytes) { return tBuffers[slot].get<unsigned char>(bytes); }

void packBTransposedF32(const float* b, int64_t ldb, int64_t n, int64_t kc, float* dst) {
  constexpr int64_t W = 16;
  for (int64_t s = 0; s * W < n; ++s) {
    const float* src = b + s * W * ldb;  // row s*W + j of B is column j of the sliver
    float* out = dst + s * kc * W;
    const int64_t w = std::min(W, n - s * W);
    if (w < W) {  // the last, partial sliver: per element, zero past column n
      pack::packB(b, ldb, true, s * W, w, 0, kc, W, 0, 1, out);
      continue;
    }
    int64_t k = 0;
#if defined(__SSE2__)
    // Four rows (columns of the sliver) by four k at a time: a 4x4 transposition turns
    // four row loads into the four k-rows' 16-byte stores.
    for (; k + 4 <= kc; k += 4)
      for (int64_t g = 0; g < W; g += 4) {
        const float* r = src + g * ldb + k;
        __m128 t0 = _mm_loadu_ps(r), t1 = _mm_loadu_ps(r + ldb);
        __m128 t2 = _mm_loadu_ps(r + 2 * ldb), t3 = _mm_loadu_ps(r + 3 * ldb);
        _MM_TRANSPOSE4_PS(t0, t1, t2, t3);
        float* o = out + k * W + g;
        _mm_storeu_ps(o, t0);
        _mm_storeu_ps(o + W, t1);
        _mm_storeu_ps(o + 2 * W, t2);
        _mm_storeu_ps(o + 3 * W, t3);
      }
#endif
    for (; k < kc; ++k)
      for (int64_t j = 0; j < W; ++j) out[k * W + j] = src[j * ldb + k];
  }
}

}  // namespace tgc::codegen::batched
