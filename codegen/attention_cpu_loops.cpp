// The inner loops of the CPU attention kernels (block products, max, exp, softmax, masks,
// transposes, Philox uniforms), portable and AVX2+FMA, and the choice of one set at run time.
#include "codegen/attention_cpu_internal.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "ir/philox.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TGC_ATTENTION_X86 1
#endif

// AVX2+FMA variants of the inner loops, compiled next to the portable ones (the project
// builds without -march); prims() picks one set at run time.
#define TGC_AVX2 __attribute__((target("avx2,fma")))
#define TGC_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) inline

namespace tgc::codegen::attention_cpu {
namespace {

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

}  // namespace

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

template Prims<float> prims<float>();
template Prims<double> prims<double>();

}  // namespace tgc::codegen::attention_cpu

namespace tgc::codegen {

using namespace attention_cpu;

AttentionIsa attentionIsa() { return currentIsa(); }

bool attentionHasAvx2() { return cpuHasAvx2(); }

void setAttentionIsa(AttentionIsa isa) {
  if (isa == AttentionIsa::Avx2 && !cpuHasAvx2())
    throw std::runtime_error("this CPU has no AVX2 and FMA");
  currentIsa() = isa;
}

}  // namespace tgc::codegen
