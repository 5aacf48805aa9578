#include "codegen/gemm_small_m.h"

#include <algorithm>

#include "codegen/gemm.h"
#include "ir/env_flag.h"

#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12 reports the intrinsics' own _mm512_undefined_* pass-through operands as
// maybe-uninitialized once they are inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define TGC_SMALL_M_X86 1
#define TGC_AVX512 __attribute__((target("avx512f,fma")))
#define TGC_AVX512_INLINE __attribute__((target("avx512f,fma"), always_inline)) inline
#endif

namespace tgc::codegen::small_m {

#ifdef TGC_SMALL_M_X86
namespace {

constexpr int kLanes = 16;
constexpr int kStripVectors = static_cast<int>(kColumnBlock / kLanes);  // 4

TGC_AVX512_INLINE __mmask16 lanesMask(int64_t count) {
  return count >= kLanes ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
}

TGC_AVX512_INLINE void storeScaled(float* c, __mmask16 mask, __m512 acc, float alpha, float beta) {
  __m512 out = _mm512_mul_ps(acc, _mm512_set1_ps(alpha));
  if (beta != 0.0f) out = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, c), _mm512_set1_ps(beta), out);
  _mm512_mask_storeu_ps(c, mask, out);
}

// R rows of A against one strip of up to 64 columns of B as stored (k x n, row stride
// ldb): 4R accumulators, each k step one row of the strip times R broadcast A values.
template <int R>
TGC_AVX512 void stripAsStored(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                              float* c, int64_t ldc, int64_t cols, float alpha, float beta) {
  __mmask16 mask[kStripVectors];
  for (int v = 0; v < kStripVectors; ++v) mask[v] = lanesMask(std::max<int64_t>(0, cols - v * kLanes));
  __m512 acc[R][kStripVectors];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kStripVectors; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const float* row = b + p * ldb;
    __m512 bv[kStripVectors];
    for (int v = 0; v < kStripVectors; ++v) bv[v] = _mm512_maskz_loadu_ps(mask[v], row + v * kLanes);
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + p]);
      for (int v = 0; v < kStripVectors; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kStripVectors; ++v)
      if (mask[v]) storeScaled(c + r * ldc + v * kLanes, mask[v], acc[r][v], alpha, beta);
}

// R rows of A against 4 rows of B transposed (n x k): 4R dot products over k, 16 lanes
// at a time, each summed across its lanes at the end. `cols` (1..4) rows of B are real.
template <int R>
TGC_AVX512 void dotsTransposed(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                               float* c, int64_t ldc, int64_t cols, float alpha, float beta) {
  constexpr int C = 4;
  const float* rows[C];
  for (int j = 0; j < C; ++j) rows[j] = b + std::min<int64_t>(j, cols - 1) * ldb;  // padding repeats a row
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < C; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; p += kLanes) {
    const __mmask16 mask = lanesMask(k - p);
    __m512 bv[C];
    for (int j = 0; j < C; ++j) bv[j] = _mm512_maskz_loadu_ps(mask, rows[j] + p);
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_maskz_loadu_ps(mask, a + r * lda + p);
      for (int j = 0; j < C; ++j) acc[r][j] = _mm512_fmadd_ps(av, bv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < cols; ++j) {
      float* out = c + r * ldc + j;
      const float sum = alpha * _mm512_reduce_add_ps(acc[r][j]);
      *out = beta == 0.0f ? sum : sum + beta * *out;
    }
}

using Kernel = void (*)(int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t,
                        float, float);

// The kernels for `rows` (1..4) rows.
Kernel asStoredFor(int64_t rows) {
  static constexpr Kernel table[4] = {&stripAsStored<1>, &stripAsStored<2>, &stripAsStored<3>,
                                      &stripAsStored<4>};
  return table[rows - 1];
}

Kernel transposedFor(int64_t rows) {
  static constexpr Kernel table[4] = {&dotsTransposed<1>, &dotsTransposed<2>, &dotsTransposed<3>,
                                      &dotsTransposed<4>};
  return table[rows - 1];
}

bool hostHasAvx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return has;
}

}  // namespace

bool applies(const GemmDesc& d) {
  static const bool off = envFlag("TGC_NO_GEMM_SMALL_M");
  if (off || !hostHasAvx512()) return false;
  if (d.dtype != DType::f32 || d.m < 1 || d.m > kMaxRows || d.sumB || d.bF32) return false;
  return !d.transA || (d.m == 1 && d.lda == 1);
}

void product(const GemmDesc& d, const float* a, const float* b, float* c, int64_t j0, int64_t j1) {
  const float alpha = static_cast<float>(d.alpha), beta = static_cast<float>(d.beta);
  // A transposed with one row and lda 1 is the same memory as one row as stored.
  const int64_t lda = d.transA ? d.k : d.lda;
  const int64_t step = d.transB ? 4 : kColumnBlock;
  // Columns outer: the strip (or the 4 rows of B) is still in L2 for the next rows of A.
  for (int64_t j = j0; j < j1; j += step) {
    const int64_t cols = std::min(step, j1 - j);
    const float* bj = d.transB ? b + j * d.ldb : b + j;
    for (int64_t i0 = 0; i0 < d.m; i0 += 4) {
      const int64_t rows = std::min<int64_t>(4, d.m - i0);
      const Kernel kernel = d.transB ? transposedFor(rows) : asStoredFor(rows);
      kernel(d.k, a + i0 * lda, lda, bj, d.ldb, c + i0 * d.ldc + j, d.ldc, cols, alpha, beta);
    }
  }
}

#else  // not x86-64: the general path runs

bool applies(const GemmDesc&) { return false; }
void product(const GemmDesc&, const float*, const float*, float*, int64_t, int64_t) {}

#endif

}  // namespace tgc::codegen::small_m
