// FlashAttention forward and backward on the CPU (see attention_cpu.h).
#include "codegen/attention_cpu.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <type_traits>

#include "ir/env_flag.h"
#include "ir/fused_ops.h"
#include "ir/graph.h"
#include "ir/philox.h"
#include "support/thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TGC_ATTENTION_X86 1
#endif

// AVX2+FMA variants of the inner loops, compiled next to the portable ones (the project
// builds without -march); prims() picks one set at run time.
#define TGC_AVX2 __attribute__((target("avx2,fma")))
#define TGC_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) inline

namespace tgc::codegen {
namespace {

constexpr int64_t kBlockQ = 64;  // queries per block
constexpr int64_t kBlockK = 64;  // keys per block
// Columns of every block product are padded to a multiple of this (two AVX2 vectors of
// f32, four of f64), so the vector kernels never need a column tail.
constexpr int64_t kPad = 16;

int64_t padded(int64_t n) { return (n + kPad - 1) / kPad * kPad; }

// ---- the inner loops ---------------------------------------------------------------------

// C[m x n] = alpha * A B (+ C when accumulate), A(i, l) = a[i * sam + l * sak] (so A may be
// read transposed), B row-major [k x n] with row stride ldb, C with row stride ldc. n is a
// multiple of kPad.
template <class T>
using GemmFn = void (*)(int64_t m, int64_t n, int64_t k, const T* a, int64_t sam, int64_t sak,
                        const T* b, int64_t ldb, T* c, int64_t ldc, T alpha, bool accumulate);
// The largest of x[0..n), n a multiple of kPad; NaN if any x is NaN (softmax's rule: a NaN
// score makes its row NaN, never a masked row).
template <class T>
using MaxFn = T (*)(const T* x, int64_t n);
// x[i] = exp(x[i] - shift) for i < n (a multiple of kPad), exactly 0 for -inf; returns the
// sum of the new x.
template <class T>
using ExpFn = T (*)(T* x, int64_t n, T shift);

// u[i] = philoxUniformAt(seed, offset, first + i) for i < n.
using UniformFn = void (*)(uint64_t seed, uint64_t offset, uint64_t first, int64_t n, float* u);
// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols.
template <class T>
using TransposeFn = void (*)(const T* src, int64_t lds, int64_t rows, int64_t cols, T* dst,
                             int64_t ldd);
// The sum of x[i] * y[i], i < n (any n).
template <class T>
using DotFn = T (*)(const T* x, const T* y, int64_t n);
// s[c] = -inf where m[c] == 0, c < n (any n): a mask row with unit stride.
template <class T>
using MaskFn = void (*)(T* s, const uint8_t* m, int64_t n);
// One row's softmax in place, x[0..n) (n a multiple of kPad, the disallowed keys -inf):
// x = exp(x - max) / l with l the sum of the exps; returns max + log(l). A row without an
// allowed key returns -inf and is left as it is; a NaN score makes the row and the result
// NaN. (max, exp and the scaling in one call: at short lengths the calls cost as much as
// the work.)
template <class T>
using SoftmaxFn = T (*)(T* x, int64_t n);

template <class T>
struct Prims {
  GemmFn<T> gemm;
  MaxFn<T> max;
  ExpFn<T> exp;
  UniformFn uniforms;
  TransposeFn<T> transpose;
  DotFn<T> dot;
  MaskFn<T> mask;
  SoftmaxFn<T> softmax;
};

void uniformsPortable(uint64_t seed, uint64_t offset, uint64_t first, int64_t n, float* u) {
  for (int64_t i = 0; i < n; ++i) u[i] = philoxUniformAt(seed, offset, first + static_cast<uint64_t>(i));
}

template <class T>
void gemmPortable(int64_t m, int64_t n, int64_t k, const T* a, int64_t sam, int64_t sak,
                  const T* b, int64_t ldb, T* c, int64_t ldc, T alpha, bool accumulate) {
  for (int64_t i = 0; i < m; ++i) {
    T* cr = c + i * ldc;
    if (!accumulate) std::fill(cr, cr + n, T(0));
    for (int64_t l = 0; l < k; ++l) {
      const T av = alpha * a[i * sam + l * sak];
      const T* br = b + l * ldb;
      for (int64_t j = 0; j < n; ++j) cr[j] += av * br[j];
    }
  }
}

template <class T>
void transposePortable(const T* src, int64_t lds, int64_t rows, int64_t cols, T* dst,
                       int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

template <class T>
T dotPortable(const T* x, const T* y, int64_t n) {
  T acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += x[i] * y[i];
  return acc;
}

template <class T>
void maskPortable(T* s, const uint8_t* m, int64_t n) {
  for (int64_t c = 0; c < n; ++c)
    if (!m[c]) s[c] = -std::numeric_limits<T>::infinity();
}

template <class T>
T maxPortable(const T* x, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return x[i];
    m = std::max(m, x[i]);
  }
  return m;
}

template <class T>
T expPortable(T* x, int64_t n, T shift) {
  T sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

template <class T>
T softmaxPortable(T* x, int64_t n) {
  const T mx = maxPortable(x, n);
  if (mx == -std::numeric_limits<T>::infinity()) return mx;
  if (std::isnan(mx)) {
    std::fill(x, x + n, mx);
    return mx;
  }
  const T l = expPortable(x, n, mx), inv = T(1) / l;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
  return mx + std::log(l);
}

#ifdef TGC_ATTENTION_X86
// AVX2 vectors of T behind one interface, so one kernel template serves f32 and f64.
template <class T>
struct Avx;
template <>
struct Avx<float> {
  using V = __m256;
  static constexpr int64_t kLanes = 8;
  TGC_AVX2_INLINE static V zero() { return _mm256_setzero_ps(); }
  TGC_AVX2_INLINE static V set1(float x) { return _mm256_set1_ps(x); }
  TGC_AVX2_INLINE static V load(const float* p) { return _mm256_loadu_ps(p); }
  TGC_AVX2_INLINE static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  TGC_AVX2_INLINE static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
};
template <>
struct Avx<double> {
  using V = __m256d;
  static constexpr int64_t kLanes = 4;
  TGC_AVX2_INLINE static V zero() { return _mm256_setzero_pd(); }
  TGC_AVX2_INLINE static V set1(double x) { return _mm256_set1_pd(x); }
  TGC_AVX2_INLINE static V load(const double* p) { return _mm256_loadu_pd(p); }
  TGC_AVX2_INLINE static void store(double* p, V v) { _mm256_storeu_pd(p, v); }
  TGC_AVX2_INLINE static V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
};

// Writes alpha * acc (+ the old value) to c.
template <class T>
TGC_AVX2_INLINE void storeTile(T* c, typename Avx<T>::V acc, typename Avx<T>::V alpha,
                               bool accumulate) {
  using A = Avx<T>;
  A::store(c, accumulate ? A::fma(acc, alpha, A::load(c)) : A::fma(acc, alpha, A::zero()));
}

// R rows x 2 vectors of C, accumulated over k in 2R registers.
template <class T, int R>
TGC_AVX2_INLINE void gemmTile(int64_t k, const T* a, int64_t sam, int64_t sak, const T* b,
                              int64_t ldb, T* c, int64_t ldc, typename Avx<T>::V alpha,
                              bool accumulate) {
  using A = Avx<T>;
  using V = typename A::V;
  constexpr int64_t W = A::kLanes;
  V c0[R], c1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) c0[r] = c1[r] = A::zero();
  for (int64_t l = 0; l < k; ++l) {
    const V b0 = A::load(b + l * ldb), b1 = A::load(b + l * ldb + W);
    const T* al = a + l * sak;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const V x = A::set1(al[r * sam]);
      c0[r] = A::fma(x, b0, c0[r]);
      c1[r] = A::fma(x, b1, c1[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    storeTile<T>(c + r * ldc, c0[r], alpha, accumulate);
    storeTile<T>(c + r * ldc + W, c1[r], alpha, accumulate);
  }
}

// All column tiles of rows [i, i + R).
template <class T, int R>
TGC_AVX2_INLINE void gemmRows(int64_t i, int64_t n, int64_t k, const T* a, int64_t sam,
                              int64_t sak, const T* b, int64_t ldb, T* c, int64_t ldc,
                              typename Avx<T>::V alpha, bool accumulate) {
  constexpr int64_t W = Avx<T>::kLanes;
  for (int64_t j = 0; j < n; j += 2 * W)
    gemmTile<T, R>(k, a + i * sam, sam, sak, b + j, ldb, c + i * ldc + j, ldc, alpha,
                   accumulate);
}

// Register blocking: 6 rows x 2 vectors (12 accumulators hide the FMA latency). The rows
// left over go in one tile of 3-5 rows, or two (4 + 3, 4 + 4) when 1 or 2 are left after a
// 6-row tile: a tile of 1 or 2 rows has too few accumulators to keep both FMA pipes busy
// (m = 32, common at short lengths, was 5 x 6 + 2 x 1).
template <class T>
TGC_AVX2 void gemmAvx2(int64_t m, int64_t n, int64_t k, const T* a, int64_t sam, int64_t sak,
                       const T* b, int64_t ldb, T* c, int64_t ldc, T alpha, bool accumulate) {
  const typename Avx<T>::V va = Avx<T>::set1(alpha);
  int64_t sixes = m / 6, rest = m % 6;
  if ((rest == 1 || rest == 2) && sixes > 0) {
    --sixes;
    rest += 6;
  }
  int64_t i = 0;
  for (; sixes > 0; --sixes, i += 6) gemmRows<T, 6>(i, n, k, a, sam, sak, b, ldb, c, ldc, va, accumulate);
  while (rest > 0) {
    const int64_t r = rest > 5 ? 4 : rest;
    switch (r) {
      case 5: gemmRows<T, 5>(i, n, k, a, sam, sak, b, ldb, c, ldc, va, accumulate); break;
      case 4: gemmRows<T, 4>(i, n, k, a, sam, sak, b, ldb, c, ldc, va, accumulate); break;
      case 3: gemmRows<T, 3>(i, n, k, a, sam, sak, b, ldb, c, ldc, va, accumulate); break;
      case 2: gemmRows<T, 2>(i, n, k, a, sam, sak, b, ldb, c, ldc, va, accumulate); break;
      default: gemmRows<T, 1>(i, n, k, a, sam, sak, b, ldb, c, ldc, va, accumulate); break;
    }
    i += r;
    rest -= r;
  }
}

// dst[c * ldd + r] = src[r * lds + c] in 8 x 8 blocks of floats (unpack, shuffle and lane
// permutes), the edges element by element.
TGC_AVX2_INLINE void transpose8x8(const float* s, int64_t lds, float* d, int64_t ldd) {
  __m256 r[8], t[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(s + i * lds);
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(d + i * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(d + (i + 4) * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

TGC_AVX2 void transposeAvx2(const float* src, int64_t lds, int64_t rows, int64_t cols,
                            float* dst, int64_t ldd) {
  const int64_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
  for (int64_t r = 0; r < rows8; r += 8)
    for (int64_t c = 0; c < cols8; c += 8) transpose8x8(src + r * lds + c, lds, dst + c * ldd + r, ldd);
  for (int64_t r = 0; r < rows; ++r)  // the columns right of the blocks
    for (int64_t c = cols8; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
  for (int64_t r = rows8; r < rows; ++r)  // the rows below them
    for (int64_t c = 0; c < cols8; ++c) dst[c * ldd + r] = src[r * lds + c];
}

TGC_AVX2 float dotAvx2(const float* x, const float* y, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), s1);
  }
  if (i + 8 <= n) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), s0);
    i += 8;
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_add_ps(s0, s1));
  float acc = ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
  for (; i < n; ++i) acc += x[i] * y[i];
  return acc;
}

TGC_AVX2 void maskAvx2(float* s, const uint8_t* m, int64_t n) {
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    int64_t bytes;
    std::memcpy(&bytes, m + c, 8);
    const __m256i mb = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes));
    const __m256 off = _mm256_castsi256_ps(_mm256_cmpeq_epi32(mb, _mm256_setzero_si256()));
    _mm256_storeu_ps(s + c, _mm256_blendv_ps(_mm256_loadu_ps(s + c), ninf, off));
  }
  maskPortable(s + c, m + c, n - c);
}

// exp over 8 floats: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by Cephes' expf polynomial,
// 2^n through the exponent bits. Arguments below -87.3 (where 2^n leaves the normal range)
// give exactly 0, -inf included; NaN stays NaN (max/min return their second operand when
// either is NaN).
TGC_AVX2_INLINE __m256 exp8(__m256 x) {
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_set1_ps(88.3f), _mm256_max_ps(_mm256_set1_ps(-87.3f), x));
  const __m256 fx =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(under, y);
}

TGC_AVX2 float expAvx2(float* x, int64_t n, float shift) {
  const __m256 sh = _mm256_set1_ps(shift);
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __m256 y0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh));
    const __m256 y1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), sh));
    _mm256_storeu_ps(x + i, y0);
    _mm256_storeu_ps(x + i + 8, y1);
    s0 = _mm256_add_ps(s0, y0);
    s1 = _mm256_add_ps(s1, y1);
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_add_ps(s0, s1));
  return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

template <class T>
TGC_AVX2 T maxAvx2(const T* x, int64_t n) {
  alignas(32) T t[16];
  if constexpr (std::is_same_v<T, float>) {
    __m256 m0 = _mm256_set1_ps(-std::numeric_limits<float>::infinity()), m1 = m0;
    __m256 nan = _mm256_setzero_ps();  // lanes that saw a NaN (max_ps would drop it)
    for (int64_t i = 0; i < n; i += 16) {
      const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
      m0 = _mm256_max_ps(m0, x0);
      m1 = _mm256_max_ps(m1, x1);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(x0, x1, _CMP_UNORD_Q));
    }
    if (_mm256_movemask_ps(nan)) return std::numeric_limits<float>::quiet_NaN();
    _mm256_store_ps(t, _mm256_max_ps(m0, m1));
    return maxPortable(t, 8);
  } else {
    __m256d m0 = _mm256_set1_pd(-std::numeric_limits<double>::infinity()), m1 = m0;
    __m256d nan = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; i += 8) {
      const __m256d x0 = _mm256_loadu_pd(x + i), x1 = _mm256_loadu_pd(x + i + 4);
      m0 = _mm256_max_pd(m0, x0);
      m1 = _mm256_max_pd(m1, x1);
      nan = _mm256_or_pd(nan, _mm256_cmp_pd(x0, x1, _CMP_UNORD_Q));
    }
    if (_mm256_movemask_pd(nan)) return std::numeric_limits<double>::quiet_NaN();
    _mm256_store_pd(t, _mm256_max_pd(m0, m1));
    return maxPortable(t, 4);
  }
}

// As softmaxPortable, with the AVX2 max and exp.
TGC_AVX2 float softmaxAvx2(float* x, int64_t n) {
  const float mx = maxAvx2<float>(x, n);
  if (mx == -std::numeric_limits<float>::infinity()) return mx;
  if (std::isnan(mx)) {
    std::fill(x, x + n, mx);
    return mx;
  }
  const float l = expAvx2(x, n, mx);
  const __m256 inv = _mm256_set1_ps(1.0f / l);
  for (int64_t i = 0; i < n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  return mx + std::log(l);
}

// Philox4x32-10 (ir/philox.cpp) on 8 counters at once. The 32 x 32 -> 64-bit products go
// through _mm256_mul_epu32, which multiplies the even 32-bit lanes: the odd lanes are
// shifted down for a second product, and the halves are blended back into place.
TGC_AVX2_INLINE void mulHiLo(__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

// The top 24 bits of each 32-bit word, scaled to [0, 1) (exact in a float).
TGC_AVX2_INLINE __m256 uniformOf(__m256i w) {
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(w, 8)),
                       _mm256_set1_ps(1.0f / 16777216.0f));
}

// The even / odd 64-bit halves of x and y interleaved: x0 y0 | x2 y2 (lo), x1 y1 | x3 y3 (hi).
TGC_AVX2_INLINE __m256 lo64(__m256 x, __m256 y) {
  return _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(x), _mm256_castps_pd(y)));
}
TGC_AVX2_INLINE __m256 hi64(__m256 x, __m256 y) {
  return _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(x), _mm256_castps_pd(y)));
}

// Elements 4q .. 4q + 31 of the stream (q = quad, the first of 8 consecutive calls) into
// out[0..32): call l's word w is element 4 (q + l) + w, so the four word vectors are
// transposed, 4 x 8 -> 8 x 4, on the way out.
TGC_AVX2_INLINE void uniformQuads8(uint64_t seed, uint64_t offset, uint64_t q, float* out) {
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  alignas(32) uint32_t lo[8], hi[8];
  for (int l = 0; l < 8; ++l) {  // the 64-bit counters offset + q + l
    const uint64_t ctr = offset + q + static_cast<uint64_t>(l);
    lo[l] = static_cast<uint32_t>(ctr);
    hi[l] = static_cast<uint32_t>(ctr >> 32);
  }
  __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo));
  __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi));
  __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    __m256i hi0, lo0, hi1, lo1;
    mulHiLo(c0, m0, hi0, lo0);
    mulHiLo(c2, m1, hi1, lo1);
    const __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1),
                                        _mm256_set1_epi32(static_cast<int>(k0)));
    const __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3),
                                        _mm256_set1_epi32(static_cast<int>(k1)));
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  const __m256 a = uniformOf(c0), b = uniformOf(c1), c = uniformOf(c2), d = uniformOf(c3);
  // Per 128-bit half: a0 b0 c0 d0 | a1 b1 c1 d1 | ... (the classic 4 x 4 transpose).
  const __m256 ab0 = _mm256_unpacklo_ps(a, b), ab1 = _mm256_unpackhi_ps(a, b);
  const __m256 cd0 = _mm256_unpacklo_ps(c, d), cd1 = _mm256_unpackhi_ps(c, d);
  const __m256 e0 = lo64(ab0, cd0), e1 = hi64(ab0, cd0);  // calls 0, 1 | 4, 5
  const __m256 e2 = lo64(ab1, cd1), e3 = hi64(ab1, cd1);  // calls 2, 3 | 6, 7
  _mm256_storeu_ps(out, _mm256_permute2f128_ps(e0, e1, 0x20));
  _mm256_storeu_ps(out + 8, _mm256_permute2f128_ps(e2, e3, 0x20));
  _mm256_storeu_ps(out + 16, _mm256_permute2f128_ps(e0, e1, 0x31));
  _mm256_storeu_ps(out + 24, _mm256_permute2f128_ps(e2, e3, 0x31));
}

TGC_AVX2 void uniformsAvx2(uint64_t seed, uint64_t offset, uint64_t first, int64_t n, float* u) {
  // Blocks of 32 elements aligned to the stream's quads: whole blocks are written in place,
  // the partial ones at the ends (a first element inside a quad) through a buffer.
  const uint64_t end = first + static_cast<uint64_t>(n);
  for (uint64_t e = first & ~uint64_t{3}; e < end; e += 32) {
    const uint64_t from = std::max(e, first), to = std::min(e + 32, end);
    if (from == e && to == e + 32) {
      uniformQuads8(seed, offset, e >> 2, u + (e - first));
    } else {
      alignas(32) float t[32];
      uniformQuads8(seed, offset, e >> 2, t);
      std::copy(t + (from - e), t + (to - e), u + (from - first));
    }
  }
}

bool cpuHasAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
bool cpuHasAvx2() { return false; }
#endif  // TGC_ATTENTION_X86

AttentionIsa& currentIsa() {
  static AttentionIsa isa = cpuHasAvx2() ? AttentionIsa::Avx2 : AttentionIsa::Portable;
  return isa;
}

template <class T>
Prims<T> prims() {
#ifdef TGC_ATTENTION_X86
  if (currentIsa() == AttentionIsa::Avx2) {
    if constexpr (std::is_same_v<T, float>)
      return {&gemmAvx2<float>, &maxAvx2<float>, &expAvx2,  &uniformsAvx2,
              &transposeAvx2,   &dotAvx2,        &maskAvx2, &softmaxAvx2};
    else
      return {&gemmAvx2<double>,        &maxAvx2<double>,  &expPortable<double>,
              &uniformsAvx2,            &transposePortable<double>, &dotPortable<double>,
              &maskPortable<double>,    &softmaxPortable<double>};
  }
#endif
  return {&gemmPortable<T>,      &maxPortable<T>, &expPortable<T>,  &uniformsPortable,
          &transposePortable<T>, &dotPortable<T>, &maskPortable<T>, &softmaxPortable<T>};
}

// ---- masks and dropout -------------------------------------------------------------------

// What decides whether (i, j) is allowed, and dropout's keep factor, for one batch item.
template <class T>
struct RowRules {
  const AttentionParams& p;
  const uint8_t* mask;  // at the batch item's base, or null
  int64_t b;
  T keepScale;
  UniformFn uniforms;
  MaskFn<T> maskUnitStride;

  RowRules(const AttentionParams& params, const Prims<T>& pr, const uint8_t* m,
           int64_t batchItem)
      : p(params), mask(m && params.hasMask ? m + params.maskBase[batchItem] : nullptr),
        b(batchItem),
        keepScale(static_cast<T>(1.0 / (1.0 - params.pDrop))),
        uniforms(pr.uniforms),
        maskUnitStride(pr.mask) {}

  // How many keys the kernels walk: with a mask that is the same for every query (a
  // key-padding mask, [B, 1, 1, Tk]), up to its last allowed key, else all of tk. The keys
  // cut off are disallowed for every query: they add exact zeros to l, out and dq and get
  // dk = dv = 0, as in the reference, which skips disallowed keys (a padded batch item skips
  // its padding's block products, transposes and exps).
  int64_t keysUsed() const {
    if (!mask || p.maskStrideI != 0) return p.tk;
    int64_t end = p.tk;
    while (end > 0 && !mask[(end - 1) * p.maskStrideJ]) --end;
    return end;
  }

  // Sets s[c] to -inf for every disallowed key j0 + c of query i, c < cols, and for the
  // padding columns up to colsPadded.
  void maskRow(T* s, int64_t i, int64_t j0, int64_t cols, int64_t colsPadded) const {
    constexpr T ninf = -std::numeric_limits<T>::infinity();
    int64_t allowedEnd = cols;
    if (p.causal) allowedEnd = std::clamp<int64_t>(i - j0 + 1, 0, cols);
    if (mask) {
      const uint8_t* mr = mask + i * p.maskStrideI + j0 * p.maskStrideJ;
      if (p.maskStrideJ == 1) {
        maskUnitStride(s, mr, allowedEnd);
      } else {  // stride 0: one byte decides the whole row
        for (int64_t c = 0; c < allowedEnd; ++c)
          if (!mr[c * p.maskStrideJ]) s[c] = ninf;
      }
    }
    std::fill(s + allowedEnd, s + colsPadded, ninf);
  }

  // Dropout's factors z[c] for the keys j0 + c of query i, c < cols (at most kBlockK):
  // 0 or 1 / (1 - p_drop), the uniform compared with p_drop in T.
  void keepFactors(int64_t i, int64_t j0, int64_t cols, T* z) const {
    alignas(32) float u[kBlockK];
    uniforms(p.seed, p.offset, static_cast<uint64_t>((b * p.tq + i) * p.tk + j0), cols, u);
    const T pd = static_cast<T>(p.pDrop);
    for (int64_t c = 0; c < cols; ++c) z[c] = static_cast<T>(u[c]) >= pd ? keepScale : T(0);
  }
};

// Copies rows [r0, r0 + rows) of src [*, cols] (row stride lds) into dst [rows, ld] (zero
// padding on the right), or transposed into dst [cols, ld] (zero padding below the rows).
template <class T>
void copyRows(const T* src, int64_t r0, int64_t rows, int64_t cols, int64_t lds, T* dst,
              int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(src + (r0 + r) * lds, cols, dst + r * ld);
    std::fill(dst + r * ld + cols, dst + (r + 1) * ld, T(0));
  }
}
template <class T>
void copyRowsTransposed(const Prims<T>& pr, const T* src, int64_t r0, int64_t rows,
                        int64_t cols, int64_t lds, T* dst, int64_t ld) {
  // The zero padding in one fill of the block first (a key-padding cut leaves 1-15 padding
  // rows: a fill per column was a memset call per column, ~3% of the kernels' time).
  if (rows < ld) std::fill(dst, dst + cols * ld, T(0));
  pr.transpose(src + r0 * lds, lds, rows, cols, dst, ld);
}

// Whether rows of n elements serve as a block product's B operand or output as they are
// (no padded copy): n a multiple of the column padding.
bool unpadded(int64_t n) { return n % kPad == 0; }

// Batch item b's rows of an operand with rows of `width` and T rows per item: where they
// start and their stride. [batch, T, width] when heads = 1; layout bthd's
// [batch / heads, T, heads, width] (item b is head b % heads) otherwise.
int64_t rowStride(const AttentionParams& p, int64_t width) { return p.heads * width; }
int64_t itemBase(const AttentionParams& p, int64_t b, int64_t T, int64_t width) {
  return ((b / p.heads) * T * p.heads + b % p.heads) * width;
}

// Layout bthd: a head's rows are pieces of width elements heads * width apart, which the
// hardware prefetchers do not stream as they do one contiguous head; a task asks for all of
// an operand's rows up front, so that their misses overlap.
template <class T>
void prefetchRows(const AttentionParams& p, const T* rows, int64_t n, int64_t width) {
  if (p.heads == 1) return;
  const int64_t ld = rowStride(p, width);
  constexpr int64_t kLine = 64 / sizeof(T);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < width; c += kLine) __builtin_prefetch(rows + r * ld + c);
}

// Causal: in a block pair (queries i0 + r, keys j0 + c), row r needs only the keys
// c <= i0 + r - j0. The rows go in groups of kPad, each group's block products cut at the
// columns its last row needs (keysNeeded of its end), so most of the masked triangle is
// skipped: 1/4 of the products at L = 32, 3/8 at L = 64 (all keys in one block).
int64_t causalGroup(const AttentionParams& p, int64_t rows) { return p.causal ? kPad : rows; }
int64_t keysNeeded(const AttentionParams& p, int64_t queryEnd, int64_t j0, int64_t cols) {
  return p.causal ? std::clamp<int64_t>(queryEnd - j0, 0, cols) : cols;
}

// This thread's Scratch for a call at p's lengths and head dims, kept from call to call
// (the training step calls the kernels at a few shapes over and over: no allocation and
// no zero-filling each call), rebuilt when the sizes change; newCall() clears what one
// call leaves behind.
template <class Scratch>
Scratch& threadScratch(const AttentionParams& p) {
  thread_local std::unique_ptr<Scratch> w;
  thread_local std::array<int64_t, 4> sizes{-1, -1, -1, -1};
  const std::array<int64_t, 4> want{p.tq, p.tk, p.d, p.dv};
  if (!w || sizes != want) {
    w = std::make_unique<Scratch>(p);
    sizes = want;
  }
  w->newCall();
  return *w;
}

// Runs fn(task, scratch) for every task in [0, tasks), handed out one at a time from a
// shared counter (tasks cost unequal time under a causal mask), with the thread's Scratch.
template <class Scratch, class Fn>
void forEachTask(ThreadPool& pool, const AttentionParams& p, int64_t tasks, const Fn& fn) {
  std::atomic<int64_t> next{0};
  const int threads = static_cast<int>(std::min<int64_t>(pool.numThreads(), tasks));
  if (threads <= 0) return;
  pool.runOnThreads(threads, [&](int) {
    Scratch& w = threadScratch<Scratch>(p);
    for (int64_t t = next.fetch_add(1); t < tasks; t = next.fetch_add(1)) fn(t, w);
  });
}

// ---- forward -----------------------------------------------------------------------------

template <class T>
struct ForwardScratch {
  // The head `head`'s keys, transposed per key block ([d, 64] each), and (when dv needs
  // padding) its values with padded rows: made once per head a thread works on, not once
  // per query block (the copies cost as much as a block product when redone for every
  // block pair).
  int64_t head = -1;
  std::vector<T> kt, vp, s, o, m, l;
  explicit ForwardScratch(const AttentionParams& p)
      : kt(static_cast<size_t>((p.tk + kBlockK - 1) / kBlockK * p.d * kBlockK)),
        vp(unpadded(p.dv) ? 0 : static_cast<size_t>(p.tk * padded(p.dv))),
        s(static_cast<size_t>(kBlockQ * kBlockK)),
        o(static_cast<size_t>(kBlockQ * padded(p.dv))),
        m(kBlockQ),
        l(kBlockQ) {}
  void newCall() { head = -1; }  // another call's keys are not this one's
};

// Whether forwardBlock takes forwardOneBlock when all keys fit one block
// (TGC_NO_ATTENTION_ONE_BLOCK=1: always the online softmax, for A/B runs).
bool oneBlockForward() {
  static const bool on = !envFlag("TGC_NO_ATTENTION_ONE_BLOCK");
  return on;
}

// Queries [i0, i0 + rows) when all keys fit one block (p.tk <= kBlockK: the Transformer
// presets' lengths; tk <= p.tk are the keys used) and dv needs no padding. Each row's
// softmax is then exact -- no running max, no rescaling of the output -- so p is scaled by
// 1 / l (and dropout's keep factors) before the product, which writes the output rows in
// place: no accumulator block and no pass over it. qb, ob, lb are the block's first query,
// output row and lse; kt the keys transposed [d, padded(tk)]; s the scratch for p.
template <class T>
void forwardOneBlock(const AttentionParams& p, const Prims<T>& pr, const RowRules<T>& rules,
                     const T* qb, int64_t ldq, const T* kt, const T* vrows, int64_t ldv, T* ob,
                     T* lb, int64_t i0, int64_t rows, int64_t tk, T* s) {
  constexpr T ninf = -std::numeric_limits<T>::infinity();
  const int64_t colsP = padded(tk);
  for (int64_t r0 = 0; r0 < rows; r0 += causalGroup(p, rows)) {
    const int64_t r1 = std::min(rows, r0 + causalGroup(p, rows));
    const int64_t gCols = keysNeeded(p, i0 + r1, 0, tk), gColsP = padded(gCols);
    if (gCols > 0)
      pr.gemm(r1 - r0, gColsP, p.d, qb + r0 * ldq, ldq, 1, kt, colsP, s + r0 * colsP, colsP,
              static_cast<T>(p.scale), false);
    bool anyEmpty = gCols == 0;
    for (int64_t r = r0; r < r1 && gCols > 0; ++r) {
      T* sr = s + r * colsP;
      const int64_t i = i0 + r;
      rules.maskRow(sr, i, 0, gCols, gColsP);
      lb[r] = pr.softmax(sr, gColsP);
      if (lb[r] == ninf) {  // no allowed key: out = 0 (below)
        std::fill(sr, sr + gCols, T(0));
        anyEmpty = true;
        continue;
      }
      if (p.pDrop > 0) {
        T z[kBlockK];
        rules.keepFactors(i, 0, gCols, z);
        for (int64_t c = 0; c < gCols; ++c) sr[c] *= z[c];
      }
    }
    if (gCols > 0)
      pr.gemm(r1 - r0, p.dv, gCols, s + r0 * colsP, colsP, 1, vrows, ldv, ob + r0 * ldv, ldv,
              T(1), false);
    if (anyEmpty)  // rows without keys: written after the product, which may have read a NaN v
      for (int64_t r = r0; r < r1; ++r)
        if (gCols == 0 || lb[r] == ninf) {
          lb[r] = ninf;
          std::fill_n(ob + r * ldv, p.dv, T(0));
        }
  }
}

// Queries [i0, i0 + rows) of batch item b.
template <class T>
void forwardBlock(const AttentionParams& p, const Prims<T>& pr, const T* q, const T* k,
                  const T* v, const uint8_t* mask, T* out, T* lse, int64_t b, int64_t i0,
                  ForwardScratch<T>& w) {
  constexpr T ninf = -std::numeric_limits<T>::infinity();
  const int64_t rows = std::min(kBlockQ, p.tq - i0), dvp = padded(p.dv);
  const RowRules<T> rules(p, pr, mask, b);
  const int64_t tk = rules.keysUsed();
  const int64_t ldq = rowStride(p, p.d), ldv = rowStride(p, p.dv);  // k as q, out as v
  const T* qb = q + itemBase(p, b, p.tq, p.d) + i0 * ldq;
  const T* kb = k + itemBase(p, b, p.tk, p.d);
  const T* vb = v + itemBase(p, b, p.tk, p.dv);
  std::fill_n(w.m.begin(), rows, ninf);
  std::fill_n(w.l.begin(), rows, T(0));
  prefetchRows(p, qb, rows, p.d);
  if (w.head != b) {
    prefetchRows(p, kb, tk, p.d);
    prefetchRows(p, vb, tk, p.dv);
    for (int64_t j0 = 0; j0 < tk; j0 += kBlockK)
      copyRowsTransposed(pr, kb, j0, std::min(kBlockK, tk - j0), p.d, ldq,
                         w.kt.data() + j0 * p.d, padded(std::min(kBlockK, tk - j0)));
    if (!unpadded(p.dv)) copyRows(vb, 0, tk, p.dv, ldv, w.vp.data(), dvp);
    w.head = b;
  }
  const T* vrows = unpadded(p.dv) ? vb : w.vp.data();  // [tk, dvp] with row stride ldvRows
  const int64_t ldvRows = unpadded(p.dv) ? ldv : dvp;
  // (Decided by the shapes, not by tk: a key-padding cut must not change the arithmetic.)
  if (p.tk <= kBlockK && unpadded(p.dv) && oneBlockForward()) {
    forwardOneBlock(p, pr, rules, qb, ldq, w.kt.data(), vrows, ldvRows,
                    out + itemBase(p, b, p.tq, p.dv) + i0 * ldv, lse + b * p.tq + i0, i0, rows,
                    tk, w.s.data());
    return;
  }
  const int64_t keyEnd = p.causal ? std::min(tk, i0 + rows) : tk;
  for (int64_t j0 = 0; j0 < keyEnd; j0 += kBlockK) {
    const int64_t cols = std::min(kBlockK, tk - j0), colsP = padded(cols);
    const T* kt = w.kt.data() + j0 * p.d;
    for (int64_t r0 = 0; r0 < rows; r0 += causalGroup(p, rows)) {
      const int64_t r1 = std::min(rows, r0 + causalGroup(p, rows));
      const int64_t gCols = keysNeeded(p, i0 + r1, j0, cols), gColsP = padded(gCols);
      if (gCols == 0) continue;  // (only when j0 > 0: o is already written)
      // s = scale * q k^T, then p = exp(s - m_new) with the running max.
      pr.gemm(r1 - r0, gColsP, p.d, qb + r0 * ldq, ldq, 1, kt, colsP, w.s.data() + r0 * colsP,
              colsP, static_cast<T>(p.scale), false);
      for (int64_t r = r0; r < r1; ++r) {
        T* sr = w.s.data() + r * colsP;
        const int64_t i = i0 + r;
        rules.maskRow(sr, i, j0, gCols, gColsP);
        const T mx = pr.max(sr, gColsP);
        if (mx == ninf) {  // nothing allowed in this block: it adds nothing
          std::fill(sr, sr + gColsP, T(0));
          continue;
        }
        // A NaN score makes the row NaN (out and lse), as in the unfused softmax.
        const T mNew = std::isnan(mx) ? mx : std::max(w.m[r], mx);  // max keeps a NaN w.m[r]
        const T corr = std::exp(w.m[r] - mNew);  // 0 when the row had no allowed key yet
        w.l[r] = w.l[r] * corr + pr.exp(sr, gColsP, mNew);
        w.m[r] = mNew;
        if (p.pDrop > 0) {
          T z[kBlockK];
          rules.keepFactors(i, j0, gCols, z);
          for (int64_t c = 0; c < gCols; ++c) sr[c] *= z[c];
        }
        if (j0 > 0 && corr != T(1)) {  // (o is not yet written in the first block)
          T* orow = w.o.data() + r * dvp;
          for (int64_t c = 0; c < dvp; ++c) orow[c] *= corr;
        }
      }
      pr.gemm(r1 - r0, dvp, gCols, w.s.data() + r0 * colsP, colsP, 1, vrows + j0 * ldvRows,
              ldvRows, w.o.data() + r0 * dvp, dvp, T(1), j0 > 0);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    T* orow = out + itemBase(p, b, p.tq, p.dv) + (i0 + r) * ldv;
    const T* acc = w.o.data() + r * dvp;
    if (w.l[r] == T(0)) {  // no allowed key at all
      lse[b * p.tq + i0 + r] = ninf;
      std::fill(orow, orow + p.dv, T(0));
      continue;
    }
    lse[b * p.tq + i0 + r] = w.m[r] + std::log(w.l[r]);
    const T inv = T(1) / w.l[r];
    for (int64_t c = 0; c < p.dv; ++c) orow[c] = acc[c] * inv;
  }
}

template <class T>
void forwardTyped(const AttentionParams& p, const T* q, const T* k, const T* v,
                  const uint8_t* mask, T* out, T* lse, ThreadPool& pool) {
  const Prims<T> pr = prims<T>();
  const int64_t qBlocks = (p.tq + kBlockQ - 1) / kBlockQ;
  forEachTask<ForwardScratch<T>>(pool, p, p.batch * qBlocks, [&](int64_t t, ForwardScratch<T>& w) {
    forwardBlock(p, pr, q, k, v, mask, out, lse, t / qBlocks, t % qBlocks * kBlockQ, w);
  });
}

// ---- backward ----------------------------------------------------------------------------

template <class T>
struct BackwardScratch {
  // Per key block its transposes and per block pair s / p, z and dp / ds. When d or dv is
  // not a multiple of kPad, padded copies of the head's q, dout and key block, and the dq,
  // dk, dv accumulators (otherwise the inputs are read and the outputs accumulated in place).
  std::vector<T> qp, dop, dq, delta, kt, kp, vt, dk, dv, s, pz, ds;
  explicit BackwardScratch(const AttentionParams& p)
      : qp(padCopy(p.d, p.tq)),
        dop(padCopy(p.dv, p.tq)),
        dq(padCopy(p.d, p.tq)),
        delta(static_cast<size_t>(p.tq)),
        kt(static_cast<size_t>(p.d * kBlockK)),
        kp(padCopy(p.d, kBlockK)),
        vt(static_cast<size_t>(p.dv * kBlockK)),
        dk(padCopy(p.d, kBlockK)),
        dv(padCopy(p.dv, kBlockK)),
        s(static_cast<size_t>(kBlockQ * kBlockK)),
        pz(static_cast<size_t>(kBlockQ * kBlockK)),
        ds(static_cast<size_t>(kBlockQ * kBlockK)) {}
  void newCall() {}
  static size_t padCopy(int64_t cols, int64_t rows) {
    return unpadded(cols) ? 0 : static_cast<size_t>(rows * padded(cols));
  }
};

template <class T>
void backwardHead(const AttentionParams& p, const Prims<T>& pr, const T* q, const T* k,
                  const T* v, const T* out, const T* lse, const T* dout, const uint8_t* mask,
                  T* dq, T* dk, T* dv, int64_t b, BackwardScratch<T>& w) {
  constexpr T ninf = -std::numeric_limits<T>::infinity();
  const int64_t dp = padded(p.d), dvp = padded(p.dv);
  const bool directD = unpadded(p.d), directDv = unpadded(p.dv);
  const RowRules<T> rules(p, pr, mask, b);
  const int64_t tk = rules.keysUsed();
  // Row strides: k, dq, dk as q's (ldq); v, out, dout, dv as ldv.
  const int64_t ldq = rowStride(p, p.d), ldv = rowStride(p, p.dv);
  const int64_t qBase = itemBase(p, b, p.tq, p.d), kBase = itemBase(p, b, p.tk, p.d);
  const int64_t vBase = itemBase(p, b, p.tk, p.dv), oBase = itemBase(p, b, p.tq, p.dv);
  const T* qb = q + qBase;
  const T* kb = k + kBase;
  const T* vb = v + vBase;
  const T* ob = out + oBase;
  const T* dob = dout + oBase;
  const T* lb = lse + b * p.tq;
  // q and dout with rows of dp / dvp, and where dq [tq, dp] accumulates (each with its row
  // stride: the operand's in place, the padded width in a copy).
  prefetchRows(p, qb, p.tq, p.d);
  prefetchRows(p, dob, p.tq, p.dv);
  prefetchRows(p, ob, p.tq, p.dv);
  prefetchRows(p, kb, p.tk, p.d);
  prefetchRows(p, vb, p.tk, p.dv);
  if (!directD) copyRows(qb, 0, p.tq, p.d, ldq, w.qp.data(), dp);
  if (!directDv) copyRows(dob, 0, p.tq, p.dv, ldv, w.dop.data(), dvp);
  const T* qrows = directD ? qb : w.qp.data();
  const T* dorows = directDv ? dob : w.dop.data();
  const int64_t ldQrows = directD ? ldq : dp, ldDorows = directDv ? ldv : dvp;
  T* dqAcc = directD ? dq + qBase : w.dq.data();  // written, not added to, at j0 = 0
  const int64_t ldDq = directD ? ldq : dp, ldDk = ldDq, ldDv = directDv ? ldv : dvp;
  if (tk == 0)
    for (int64_t i = 0; i < p.tq; ++i) std::fill_n(dqAcc + i * ldDq, dp, T(0));
  // The keys past tk get no gradient.
  for (int64_t j = tk; j < p.tk; ++j) {
    std::fill_n(dk + kBase + j * ldq, p.d, T(0));
    std::fill_n(dv + vBase + j * ldv, p.dv, T(0));
  }
  for (int64_t i = 0; i < p.tq; ++i)
    w.delta[static_cast<size_t>(i)] = pr.dot(dob + i * ldv, ob + i * ldv, p.dv);
  const T scale = static_cast<T>(p.scale);
  for (int64_t j0 = 0; j0 < tk; j0 += kBlockK) {
    const int64_t cols = std::min(kBlockK, tk - j0), colsP = padded(cols);
    copyRowsTransposed(pr, kb, j0, cols, p.d, ldq, w.kt.data(), colsP);
    copyRowsTransposed(pr, vb, j0, cols, p.dv, ldv, w.vt.data(), colsP);
    if (!directD) copyRows(kb, j0, cols, p.d, ldq, w.kp.data(), dp);
    const T* krows = directD ? kb + j0 * ldq : w.kp.data();  // row stride ldDk
    // This key block's dk [cols, dp] and dv [cols, dvp] accumulate here (written, not added
    // to, by the first query block).
    T* dkAcc = directD ? dk + kBase + j0 * ldq : w.dk.data();
    T* dvAcc = directDv ? dv + vBase + j0 * ldv : w.dv.data();
    // Causal: query blocks whose last row is before j0 see none of these keys.
    const int64_t firstQ = p.causal ? j0 / kBlockQ * kBlockQ : 0;
    if (firstQ >= p.tq)  // no query at all (tq = 0)
      for (int64_t c = 0; c < cols; ++c) {
        std::fill_n(dkAcc + c * ldDk, dp, T(0));
        std::fill_n(dvAcc + c * ldDv, dvp, T(0));
      }
    for (int64_t i0 = firstQ; i0 < p.tq; i0 += kBlockQ) {
      const int64_t rows = std::min(kBlockQ, p.tq - i0);
      const T* pz = p.pDrop > 0 ? w.pz.data() : w.s.data();  // p * z
      // Row groups (causalGroup): p, ds and dq over the keys each group needs.
      for (int64_t r0 = 0; r0 < rows; r0 += causalGroup(p, rows)) {
        const int64_t r1 = std::min(rows, r0 + causalGroup(p, rows));
        const int64_t gCols = keysNeeded(p, i0 + r1, j0, cols), gColsP = padded(gCols);
        // p = exp(scale * q k^T - lse), 0 where disallowed or the row has no allowed key.
        pr.gemm(r1 - r0, gColsP, p.d, qb + (i0 + r0) * ldq, ldq, 1, w.kt.data(), colsP,
                w.s.data() + r0 * colsP, colsP, scale, false);
        for (int64_t r = r0; r < r1; ++r) {
          T* sr = w.s.data() + r * colsP;
          const T l = lb[i0 + r];
          if (l == ninf) {
            std::fill(sr, sr + gColsP, T(0));
            continue;
          }
          rules.maskRow(sr, i0 + r, j0, gCols, gColsP);
          pr.exp(sr, gColsP, l);
        }
        // dp (before dropout) = dout v^T.
        pr.gemm(r1 - r0, gColsP, p.dv, dob + (i0 + r0) * ldv, ldv, 1, w.vt.data(), colsP,
                w.ds.data() + r0 * colsP, colsP, T(1), false);
        // pz = p * z; ds = p * (dp * z - delta).
        if (p.pDrop > 0) {
          T z[kBlockK];
          for (int64_t r = r0; r < r1; ++r) {
            rules.keepFactors(i0 + r, j0, gCols, z);
            std::fill(z + gCols, z + gColsP, T(0));
            T* pzr = w.pz.data() + r * colsP;
            T* dr = w.ds.data() + r * colsP;
            const T* sr = w.s.data() + r * colsP;
            for (int64_t c = 0; c < gColsP; ++c) {
              pzr[c] = sr[c] * z[c];
              dr[c] *= z[c];
            }
          }
        }
        for (int64_t r = r0; r < r1; ++r) {
          const T dl = w.delta[static_cast<size_t>(i0 + r)];
          T* dr = w.ds.data() + r * colsP;
          const T* sr = w.s.data() + r * colsP;
          for (int64_t c = 0; c < gColsP; ++c) dr[c] = sr[c] * (dr[c] - dl);
        }
        // dq += scale ds k.
        pr.gemm(r1 - r0, dp, gCols, w.ds.data() + r0 * colsP, colsP, 1, krows, ldDk,
                dqAcc + (i0 + r0) * ldDq, ldDq, scale, j0 > 0);
      }
      // Key groups: dv += pz^T dout and dk += scale ds^T q over the query rows that see
      // them (under causal, from row j0 + c0 - i0 on; those rows' groups computed these
      // columns).
      for (int64_t c0 = 0; c0 < cols; c0 += causalGroup(p, cols)) {
        const int64_t c1 = std::min(cols, c0 + causalGroup(p, cols));
        const int64_t rStart = p.causal ? std::clamp<int64_t>(j0 + c0 - i0, 0, rows) : 0;
        const int64_t at = rStart * colsP + c0;
        pr.gemm(c1 - c0, dvp, rows - rStart, pz + at, 1, colsP,
                dorows + (i0 + rStart) * ldDorows, ldDorows, dvAcc + c0 * ldDv, ldDv, T(1),
                i0 > firstQ);
        pr.gemm(c1 - c0, dp, rows - rStart, w.ds.data() + at, 1, colsP,
                qrows + (i0 + rStart) * ldQrows, ldQrows, dkAcc + c0 * ldDk, ldDk, scale,
                i0 > firstQ);
      }
    }
    for (int64_t c = 0; c < cols; ++c) {
      if (!directD) std::copy_n(w.dk.data() + c * dp, p.d, dk + kBase + (j0 + c) * ldq);
      if (!directDv) std::copy_n(w.dv.data() + c * dvp, p.dv, dv + vBase + (j0 + c) * ldv);
    }
  }
  if (!directD)
    for (int64_t i = 0; i < p.tq; ++i)
      std::copy_n(w.dq.data() + i * dp, p.d, dq + qBase + i * ldq);
}

template <class T>
void backwardTyped(const AttentionParams& p, const T* q, const T* k, const T* v, const T* out,
                   const T* lse, const T* dout, const uint8_t* mask, T* dq, T* dk, T* dv,
                   ThreadPool& pool) {
  const Prims<T> pr = prims<T>();
  forEachTask<BackwardScratch<T>>(pool, p, p.batch, [&](int64_t b, BackwardScratch<T>& w) {
    backwardHead(p, pr, q, k, v, out, lse, dout, mask, dq, dk, dv, b, w);
  });
}

void checkDtype(const AttentionParams& p) {
  if (p.dtype != DType::f32 && p.dtype != DType::f64)
    throw std::invalid_argument(
        fmt::format("fused attention runs in f32 and f64 only, not {}", dtypeName(p.dtype)));
}

}  // namespace

void attentionForward(const AttentionParams& p, const void* q, const void* k, const void* v,
                      const uint8_t* mask, void* out, void* lse, ThreadPool& pool) {
  checkDtype(p);
  if (p.dtype == DType::f32)
    forwardTyped(p, static_cast<const float*>(q), static_cast<const float*>(k),
                 static_cast<const float*>(v), mask, static_cast<float*>(out),
                 static_cast<float*>(lse), pool);
  else
    forwardTyped(p, static_cast<const double*>(q), static_cast<const double*>(k),
                 static_cast<const double*>(v), mask, static_cast<double*>(out),
                 static_cast<double*>(lse), pool);
}

void attentionBackward(const AttentionParams& p, const void* q, const void* k, const void* v,
                       const void* out, const void* lse, const void* dout, const uint8_t* mask,
                       void* dq, void* dk, void* dv, ThreadPool& pool) {
  checkDtype(p);
  if (p.dtype == DType::f32)
    backwardTyped(p, static_cast<const float*>(q), static_cast<const float*>(k),
                  static_cast<const float*>(v), static_cast<const float*>(out),
                  static_cast<const float*>(lse), static_cast<const float*>(dout), mask,
                  static_cast<float*>(dq), static_cast<float*>(dk), static_cast<float*>(dv), pool);
  else
    backwardTyped(p, static_cast<const double*>(q), static_cast<const double*>(k),
                  static_cast<const double*>(v), static_cast<const double*>(out),
                  static_cast<const double*>(lse), static_cast<const double*>(dout), mask,
                  static_cast<double*>(dq), static_cast<double*>(dk), static_cast<double*>(dv),
                  pool);
}

AttentionParams attentionParamsFor(const Node& n) {
  AttentionParams p;
  p.dtype = n.operand(0)->type().dtype;
  if (p.dtype != DType::f32 && p.dtype != DType::f64)
    throw IRError(fmt::format("{}: the CPU attention kernels run f32 and f64 only, not {}",
                              describeNode(n), dtypeName(p.dtype)));
  // q, k, v as the op reads them, [..., H, T, D] (ir/fused_ops.h).
  const bool bthd = attentionLayoutOf(n.attrString("layout")) == AttentionLayout::Bthd;
  auto logical = [&](size_t i) {
    const Shape& s = n.operand(i)->type().shape;
    return bthd ? bthdAsBhtd(s) : s;
  };
  const Shape qs = logical(0), ks = logical(1), vs = logical(2);
  const size_t r = qs.size();
  p.batch = 1;
  for (size_t i = 0; i + 2 < r; ++i) p.batch *= qs[i];
  p.heads = bthd ? qs[r - 3] : 1;
  p.tq = qs[r - 2];
  p.d = qs[r - 1];
  p.tk = ks[r - 2];
  p.dv = vs[r - 1];
  p.scale = n.attrFloat("scale");
  p.causal = n.attrBool("causal");
  p.hasMask = n.attrBool("has_mask");
  p.pDrop = n.attrFloat("p_drop");
  if (p.hasMask) {
    // The mask operand follows q, k, v (forward) or q, k, v, out, lse, dout (backward).
    const size_t at = n.op() == OpKind::FusedAttention ? 3 : 6;
    const Shape& ms = n.operand(at)->type().shape;
    std::vector<int64_t> stride(r, 0);
    int64_t s = 1;
    for (size_t i = r; i-- > 0;) {
      stride[i] = ms[i] == 1 ? 0 : s;
      s *= ms[i];
    }
    p.maskStrideI = stride[r - 2];
    p.maskStrideJ = stride[r - 1];
    p.maskBase.assign(static_cast<size_t>(p.batch), 0);
    for (int64_t b = 0; b < p.batch; ++b) {
      int64_t rest = b, base = 0;
      for (size_t i = r - 2; i-- > 0;) {
        base += rest % qs[i] * stride[i];
        rest /= qs[i];
      }
      p.maskBase[static_cast<size_t>(b)] = base;
    }
  }
  return p;
}

AttentionIsa attentionIsa() { return currentIsa(); }

bool attentionHasAvx2() { return cpuHasAvx2(); }

void setAttentionIsa(AttentionIsa isa) {
  if (isa == AttentionIsa::Avx2 && !cpuHasAvx2())
    throw std::runtime_error("this CPU has no AVX2 and FMA");
  currentIsa() = isa;
}

}  // namespace tgc::codegen
