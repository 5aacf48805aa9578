#include "codegen/gemm_int8.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "ir/quantize.h"
#include "support/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define TGC_INT8_X86 1
// GCC 12 sees the _mm512_undefined_* pass-through operands of the masked builtins behind the
// AVX-512 intrinsics (unused under an all-ones mask) as uninitialized once inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace tgc::codegen {

#define TGC_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define TGC_AVXVNNI __attribute__((target("avx2,avxvnni")))
#define TGC_AVX2 __attribute__((target("avx2")))

namespace {

constexpr int64_t kRows = 8;    // rows of A per micro-kernel call
constexpr int64_t kCols = 32;   // columns per packed block (two zmm of 16 lanes)

int8_t quantize(float x, float inv) { return quantizeInt8(x, inv); }

// The row's scale: max |x| / 127 (1 for an all-zero row, whose quantized values are 0).
float rowScale(const float* x, int64_t n, int64_t stride) {
  float mx = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::fabs(x[i * stride]);
    if (!(v <= std::numeric_limits<float>::max()))  // inf and NaN
      throw std::invalid_argument("int8 quantization: the values hold an inf or a NaN");
    mx = std::max(mx, v);
  }
  return int8Scale(mx);
}

#if TGC_INT8_X86
// 8 rows of unsigned A (a_q + 128, [8][4 * kq] bytes, row stride lda) times one packed block
// of 32 columns: the raw unsigned sums into acc[8][32].
TGC_VNNI void vnniBlock(const uint8_t* a, int64_t lda, const int8_t* bp, int64_t kq,
                        int32_t* acc) {
  __m512i c[kRows][2];
  for (auto& r : c) r[0] = r[1] = _mm512_setzero_si512();
  for (int64_t q = 0; q < kq; ++q) {
    const __m512i b0 = _mm512_loadu_si512(bp + q * 128);
    const __m512i b1 = _mm512_loadu_si512(bp + q * 128 + 64);
    for (int64_t r = 0; r < kRows; ++r) {
      int32_t four;
      __builtin_memcpy(&four, a + r * lda + q * 4, 4);
      const __m512i av = _mm512_set1_epi32(four);
      c[r][0] = _mm512_dpbusd_epi32(c[r][0], av, b0);
      c[r][1] = _mm512_dpbusd_epi32(c[r][1], av, b1);
    }
  }
  for (int64_t r = 0; r < kRows; ++r) {
    _mm512_storeu_si512(acc + r * kCols, c[r][0]);
    _mm512_storeu_si512(acc + r * kCols + 16, c[r][1]);
  }
}

#endif

#if TGC_INT8_X86
// The same sums with 256-bit VPDPBUSD (AVX-VNNI: 16 registers, so 4 rows x 16 columns at a
// time, 8 accumulators).
TGC_AVXVNNI void avxVnniBlock(const uint8_t* a, int64_t lda, const int8_t* bp, int64_t kq,
                              int32_t* acc) {
  for (int64_t r0 = 0; r0 < kRows; r0 += 4)
    for (int64_t half = 0; half < 2; ++half) {
      __m256i c[4][2];
      for (auto& r : c) r[0] = r[1] = _mm256_setzero_si256();
      for (int64_t q = 0; q < kq; ++q) {
        const int8_t* b = bp + q * 128 + half * 64;
        const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
        const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32));
        for (int64_t r = 0; r < 4; ++r) {
          int32_t four;
          __builtin_memcpy(&four, a + (r0 + r) * lda + q * 4, 4);
          const __m256i av = _mm256_set1_epi32(four);
          c[r][0] = _mm256_dpbusd_avx_epi32(c[r][0], av, b0);
          c[r][1] = _mm256_dpbusd_avx_epi32(c[r][1], av, b1);
        }
      }
      for (int64_t r = 0; r < 4; ++r) {
        int32_t* dst = acc + (r0 + r) * kCols + half * 16;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), c[r][0]);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 8), c[r][1]);
      }
    }
}
#endif

#if TGC_INT8_X86
// AVX2 without VNNI: VPMADDWD on 16-bit operands, A as a_q (s16, no offset) and each
// column's four k sign-extended from the packed bytes. A 32-bit lane sums two products, so
// a column spreads over two lanes, added pairwise at the end; R rows x 8 columns at a time
// (2R accumulators). The sums are exact (each lane below K * 127^2 < 2^31); the caller adds
// the unsigned kernels' 128 * colSum, so that one store serves every kernel.
template <int R>
TGC_AVX2 void avx2Rows(const int16_t* a, int64_t lda, const int8_t* bp, int64_t kq, int32_t* acc) {
  {
    for (int64_t c0 = 0; c0 < kCols; c0 += 8) {
      __m256i s[R][2];
      for (auto& r : s) r[0] = r[1] = _mm256_setzero_si256();
      for (int64_t q = 0; q < kq; ++q) {
        const int8_t* b = bp + q * 128 + c0 * 4;  // columns c0..c0+7, four k each
        const __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
        const __m256i b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16)));
        for (int64_t r = 0; r < R; ++r) {
          int64_t four;
          __builtin_memcpy(&four, a + r * lda + q * 4, 8);
          const __m256i av = _mm256_set1_epi64x(four);
          s[r][0] = _mm256_add_epi32(s[r][0], _mm256_madd_epi16(av, b0));
          s[r][1] = _mm256_add_epi32(s[r][1], _mm256_madd_epi16(av, b1));
        }
      }
      for (int64_t r = 0; r < R; ++r) {
        // Lanes (c0 c0 c1 c1 | c2 c2 c3 c3) and (c4 ..): pairwise sums give (c0 c1 c4 c5 |
        // c2 c3 c6 c7), and the 64-bit permute puts them in order.
        const __m256i sums = _mm256_permute4x64_epi64(_mm256_hadd_epi32(s[r][0], s[r][1]), 0xD8);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * kCols + c0), sums);
      }
    }
  }
}

// The first `rows` (at most 8) rows of a tile: 4 at a time, the last 1 or 2 alone, so that
// a decoding step's few rows are not padded to 8 (acc's other rows are left unwritten).
TGC_AVX2 void avx2Block(const int16_t* a, int64_t lda, const int8_t* bp, int64_t kq, int32_t* acc,
                        int64_t rows) {
  for (int64_t r0 = 0; r0 < rows;) {
    const int64_t left = rows - r0;
    const int64_t r = left >= 3 ? 4 : left;
    if (r == 4) avx2Rows<4>(a + r0 * lda, lda, bp, kq, acc + r0 * kCols);
    else if (r == 2) avx2Rows<2>(a + r0 * lda, lda, bp, kq, acc + r0 * kCols);
    else avx2Rows<1>(a + r0 * lda, lda, bp, kq, acc + r0 * kCols);
    r0 += r;
  }
}
#endif

// The same sums with plain integer loops.
void portableBlock(const uint8_t* a, int64_t lda, const int8_t* bp, int64_t kq, int32_t* acc) {
  std::fill(acc, acc + kRows * kCols, 0);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t q = 0; q < kq; ++q)
      for (int64_t j = 0; j < kCols; ++j)
        for (int64_t t = 0; t < 4; ++t)
          acc[r * kCols + j] += static_cast<int32_t>(a[r * lda + q * 4 + t]) *
                                static_cast<int32_t>(bp[q * 128 + j * 4 + t]);
}

// Runs fn(row0, block) over every (8-row group, column block), split over the pool by blocks
// of rows.
template <class Fn>
void forTiles(int64_t m, const Int8Weights& w, ThreadPool* pool, const Fn& fn) {
  const int64_t groups = (m + kRows - 1) / kRows, tiles = groups * w.blocks();
  auto range = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) fn(t / w.blocks() * kRows, t % w.blocks());
  };
  if (pool && tiles > 1) pool->parallelFor(tiles, range);
  else range(0, tiles);
}

// The unsigned A, a_q + 128, with rows padded to a multiple of 8 and K to the packed K. The
// padding is 0 (not 128), so it adds nothing, and the offset's 128 * colSum covers the real
// entries exactly.
std::vector<uint8_t> unsignedRows(const int8_t* aq, int64_t m, int64_t lda, const Int8Weights& w,
                                  int64_t& ld) {
  ld = w.kQuads() * 4;
  const int64_t rows = (m + kRows - 1) / kRows * kRows;
  std::vector<uint8_t> u(static_cast<size_t>(rows * ld), 0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < w.k; ++kk)
      u[static_cast<size_t>(i * ld + kk)] = static_cast<uint8_t>(aq[i * lda + kk] + 128);
  return u;
}

#if TGC_INT8_X86
// One row of x quantized into u (a_q + 128) with scale s (rowScale's rule), 16 values at a
// time: the multiply, round-to-nearest-even conversion and clamp of quantize(), vectorized.
TGC_VNNI float quantizeRowVnni(const float* x, int64_t k, uint8_t* u) {
  __m512 mx = _mm512_setzero_ps();
  __mmask16 finite = 0xffff;
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    const __m512 v = _mm512_abs_ps(_mm512_loadu_ps(x + i));
    finite &= _mm512_cmp_ps_mask(v, _mm512_set1_ps(std::numeric_limits<float>::max()), _CMP_LE_OQ);
    mx = _mm512_max_ps(mx, v);
  }
  float m = _mm512_reduce_max_ps(mx);
  for (; i < k; ++i) {
    const float v = std::fabs(x[i]);
    if (!(v <= std::numeric_limits<float>::max())) finite = 0;
    m = std::max(m, v);
  }
  if (finite != 0xffff) throw std::invalid_argument("int8 quantization: the values hold an inf or a NaN");
  const float s = int8Scale(m), inv = 1 / s;
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127), off = _mm512_set1_epi32(128);
  for (i = 0; i + 16 <= k; i += 16) {
    __m512i q = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), vinv),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(q, lo), hi), off);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(u + i), _mm512_cvtepi32_epi8(q));
  }
  for (; i < k; ++i) u[i] = static_cast<uint8_t>(quantize(x[i], inv) + 128);
  return s;
}


// Eight values quantized and offset to unsigned, as 32-bit lanes.
__attribute__((target("avx2"), always_inline)) inline __m256i eightUnsigned(
    const float* x, __m256 inv, __m256i lo, __m256i hi, __m256i off) {
  const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), inv));
  return _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(q, lo), hi), off);
}

// The same on AVX2 (AVX-VNNI and plain AVX2 hosts), 32 values a pass: the conversion rounds as the MXCSR
// says, round-to-nearest-even as nearbyint does, and the unsigned saturating packs keep
// [1, 255] as they are (a permute undoes their lane interleaving).
TGC_AVX2 float quantizeRowAvx2(const float* x, int64_t k, uint8_t* u) {
  const __m256 absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 big = _mm256_set1_ps(std::numeric_limits<float>::max());
  __m256 mx = _mm256_setzero_ps();
  int finite = 0xff;
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m256 v = _mm256_and_ps(_mm256_loadu_ps(x + i), absMask);
    finite &= _mm256_movemask_ps(_mm256_cmp_ps(v, big, _CMP_LE_OQ));
    mx = _mm256_max_ps(mx, v);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mx);
  float m = 0;
  for (float l : lanes) m = std::max(m, l);
  for (; i < k; ++i) {
    const float v = std::fabs(x[i]);
    if (!(v <= std::numeric_limits<float>::max())) finite = 0;
    m = std::max(m, v);
  }
  if (finite != 0xff) throw std::invalid_argument("int8 quantization: the values hold an inf or a NaN");
  const float s = int8Scale(m), inv = 1 / s;
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127), off = _mm256_set1_epi32(128);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (i = 0; i + 32 <= k; i += 32) {
    const __m256i p01 = _mm256_packus_epi32(eightUnsigned(x + i, vinv, lo, hi, off),
                                            eightUnsigned(x + i + 8, vinv, lo, hi, off));
    const __m256i p23 = _mm256_packus_epi32(eightUnsigned(x + i + 16, vinv, lo, hi, off),
                                            eightUnsigned(x + i + 24, vinv, lo, hi, off));
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p01, p23), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + i), bytes);
  }
  for (; i < k; ++i) u[i] = static_cast<uint8_t>(quantize(x[i], inv) + 128);
  return s;
}
#endif

}  // namespace

bool hostHasAvxVnni() {
#if TGC_INT8_X86
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avxvnni");
  return has;
#else
  return false;
#endif
}

bool hostHasAvx2() {
#if TGC_INT8_X86
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

Int8Kernel hostInt8Kernel() {
  return hostHasVnni()      ? Int8Kernel::avx512vnni
         : hostHasAvxVnni() ? Int8Kernel::avxvnni
         : hostHasAvx2()    ? Int8Kernel::avx2
                            : Int8Kernel::portable;
}

namespace {
// What `k` runs as on this host.
Int8Kernel resolve(Int8Kernel k) {
  if (k == Int8Kernel::best) return hostInt8Kernel();
  if (k == Int8Kernel::avx512vnni && !hostHasVnni()) return Int8Kernel::portable;
  if (k == Int8Kernel::avxvnni && !hostHasAvxVnni()) return Int8Kernel::portable;
  if (k == Int8Kernel::avx2 && !hostHasAvx2()) return Int8Kernel::portable;
  return k;
}
}  // namespace

bool hostHasVnni() {
#if TGC_INT8_X86
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
#else
  return false;
#endif
}

Int8Weights packWeights(const int8_t* wq, int64_t k, int64_t n, int64_t ldw, std::vector<float> scale) {
  if (k < 0 || n < 0 || static_cast<int64_t>(scale.size()) != n)
    throw std::invalid_argument("int8 weights: bad shape or scales");
  if (k >= (int64_t{1} << 16))
    throw std::invalid_argument("int8 weights: K must be below 65536 (32-bit sums)");
  Int8Weights w;
  w.k = k;
  w.n = n;
  w.scale = std::move(scale);
  w.packed.assign(static_cast<size_t>(w.blocks() * w.kQuads() * 128), 0);
  w.colSum.assign(static_cast<size_t>(n), 0);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) {
      const int8_t v = wq[kk * ldw + j];
      w.packed[static_cast<size_t>(((j / 32) * w.kQuads() + kk / 4) * 128 + (j % 32) * 4 + kk % 4)] = v;
      w.colSum[static_cast<size_t>(j)] += v;
    }
  return w;
}

Int8Weights quantizeWeights(const float* w, int64_t k, int64_t n, int64_t ldw) {
  std::vector<float> scale(static_cast<size_t>(n));
  std::vector<int8_t> q(static_cast<size_t>(k * n));
  for (int64_t j = 0; j < n; ++j) {
    const float s = rowScale(w + j, k, ldw);
    scale[static_cast<size_t>(j)] = s;
    for (int64_t kk = 0; kk < k; ++kk) q[static_cast<size_t>(kk * n + j)] = quantize(w[kk * ldw + j], 1 / s);
  }
  return packWeights(q.data(), k, n, n, std::move(scale));
}

void quantizeRows(const float* a, int64_t m, int64_t k, int64_t lda, int8_t* q, float* scale) {
  for (int64_t i = 0; i < m; ++i) {
    const float s = rowScale(a + i * lda, k, 1);
    scale[i] = s;
    for (int64_t kk = 0; kk < k; ++kk) q[i * k + kk] = quantize(a[i * lda + kk], 1 / s);
  }
}

namespace {

// Every tile's unsigned sums, handed with the tile's place to store(row0, col0, rows, cols,
// acc), which takes the offset back and writes C.
template <class Store>
void tiles(const uint8_t* u, int64_t ld, int64_t m, const Int8Weights& w, ThreadPool* pool,
           Int8Kernel kernel, const Store& store) {
  // The 16-bit kernel reads a_q itself: u - 128 on the real entries, 0 in the padding.
  std::vector<int16_t> a16;
  if (kernel == Int8Kernel::avx2) {
    a16.assign(static_cast<size_t>((m + kRows - 1) / kRows * kRows * ld), 0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t kk = 0; kk < w.k; ++kk)
        a16[static_cast<size_t>(i * ld + kk)] = static_cast<int16_t>(u[i * ld + kk] - 128);
  }
  forTiles(m, w, pool, [&](int64_t row0, int64_t block) {
    alignas(64) int32_t acc[kRows * kCols];
    const int8_t* bp = w.packed.data() + block * w.kQuads() * 128;
    const int64_t col0 = block * kCols, rows = std::min(kRows, m - row0), cols = std::min(kCols, w.n - col0);
    switch (kernel) {
#if TGC_INT8_X86
      case Int8Kernel::avx512vnni: vnniBlock(u + row0 * ld, ld, bp, w.kQuads(), acc); break;
      case Int8Kernel::avxvnni: avxVnniBlock(u + row0 * ld, ld, bp, w.kQuads(), acc); break;
      case Int8Kernel::avx2:
        avx2Block(a16.data() + row0 * ld, ld, bp, w.kQuads(), acc, rows);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < cols; ++j) acc[r * kCols + j] += 128 * w.colSum[static_cast<size_t>(col0 + j)];
        break;
#endif
      default: portableBlock(u + row0 * ld, ld, bp, w.kQuads(), acc); break;
    }
    store(row0, col0, rows, cols, acc);
  });
}

}  // namespace

void int8GemmS32(const int8_t* aq, int64_t m, int64_t lda, const Int8Weights& w, int32_t* c,
                 int64_t ldc, ThreadPool* pool, Int8Kernel kernel) {
  if (m <= 0 || w.n == 0) return;
  int64_t ld = 0;
  const std::vector<uint8_t> u = unsignedRows(aq, m, lda, w, ld);
  tiles(u.data(), ld, m, w, pool, resolve(kernel),
        [&](int64_t row0, int64_t col0, int64_t rows, int64_t cols, const int32_t* acc) {
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < cols; ++j)
              c[(row0 + r) * ldc + col0 + j] =
                  acc[r * kCols + j] - 128 * w.colSum[static_cast<size_t>(col0 + j)];
        });
}

void int8Gemm(const float* a, int64_t m, int64_t lda, const Int8Weights& w, const float* bias,
              float* c, int64_t ldc, ThreadPool* pool, Int8Kernel kernel) {
  if (m <= 0 || w.n == 0) return;
  // Each row quantized straight into the unsigned layout, rows split over the pool.
  const int64_t ld = w.kQuads() * 4, padded = (m + kRows - 1) / kRows * kRows;
  std::vector<uint8_t> u(static_cast<size_t>(padded * ld), 0);
  std::vector<float> sa(static_cast<size_t>(m));
  kernel = resolve(kernel);
  const bool fast = kernel == Int8Kernel::avx512vnni;  // (the AVX-512 quantizer)
  const bool avx2 = kernel == Int8Kernel::avxvnni || kernel == Int8Kernel::avx2;
  (void)fast;
  (void)avx2;
  auto quantizeRange = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
#if TGC_INT8_X86
      if (fast || avx2) {
        sa[static_cast<size_t>(i)] = fast ? quantizeRowVnni(a + i * lda, w.k, u.data() + i * ld)
                                          : quantizeRowAvx2(a + i * lda, w.k, u.data() + i * ld);
        continue;
      }
#endif
      const float s = rowScale(a + i * lda, w.k, 1);
      sa[static_cast<size_t>(i)] = s;
      for (int64_t kk = 0; kk < w.k; ++kk)
        u[static_cast<size_t>(i * ld + kk)] = static_cast<uint8_t>(quantize(a[i * lda + kk], 1 / s) + 128);
    }
  };
  if (pool && m > 1) pool->parallelFor(m, quantizeRange);
  else quantizeRange(0, m);
  tiles(u.data(), ld, m, w, pool, kernel,
        [&](int64_t row0, int64_t col0, int64_t rows, int64_t cols, const int32_t* acc) {
          for (int64_t r = 0; r < rows; ++r) {
            const float sr = sa[static_cast<size_t>(row0 + r)];
            float* crow = c + (row0 + r) * ldc + col0;
            for (int64_t j = 0; j < cols; ++j) {
              const auto n = static_cast<size_t>(col0 + j);
              const float v = sr * w.scale[n] * static_cast<float>(acc[r * kCols + j] - 128 * w.colSum[n]);
              crow[j] = bias ? v + bias[col0 + j] : v;
            }
          }
        });
}

}  // namespace tgc::codegen
