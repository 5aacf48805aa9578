// bf16 GEMM on AVX512-BF16 (see gemm_bf16_native.h).
#include "codegen/gemm_bf16_native.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "codegen/gemm.h"
#include "codegen/gemm_scratch.h"
#include "ir/dtype.h"
#include "support/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define TGC_BF16_X86 1
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 reports the AVX-512 intrinsics' own _mm512_undefined_* pass-through operands
// (unused under an all-ones mask) as maybe-uninitialized once they are inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace tgc::codegen {

#ifdef TGC_BF16_X86

// The functions that use the instructions are compiled for them (the project builds without
// -march); gemm_bf16.cpp calls them only where cpuHasAvx512Bf16().
#define TGC_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))
#define TGC_BF16_INLINE __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma"), always_inline)) inline

bool cpuHasAvx512Bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}

namespace {

// The register tile: 12 rows x 32 columns, 24 accumulators of the 32 registers (as the f32
// AVX-512 tile, codegen/gemm_kernel.h). One k-pair step is 2 loads of B, 12 broadcasts of
// A pairs and 24 VDPBF16PS.
constexpr int64_t kMR = 12, kNR = 32;

// out[c] = column c of the 16 x 16 words in r (row i = r[i]): unpacks of 32- and 64-bit
// pairs inside the 128-bit lanes, then a 4 x 4 transpose of the lanes.
TGC_BF16_INLINE void transpose16(const __m512i r[16], __m512i out[16]) {
  __m512i a[16], b[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // b[4j + k], lane L: column 4L + k of rows 4j .. 4j + 3.
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    b[4 * j] = _mm512_unpacklo_epi64(a[4 * j], a[4 * j + 2]);
    b[4 * j + 1] = _mm512_unpackhi_epi64(a[4 * j], a[4 * j + 2]);
    b[4 * j + 2] = _mm512_unpacklo_epi64(a[4 * j + 1], a[4 * j + 3]);
    b[4 * j + 3] = _mm512_unpackhi_epi64(a[4 * j + 1], a[4 * j + 3]);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512i c0 = _mm512_shuffle_i32x4(b[k], b[4 + k], 0x44);
    const __m512i c1 = _mm512_shuffle_i32x4(b[k], b[4 + k], 0xEE);
    const __m512i c2 = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0x44);
    const __m512i c3 = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0xEE);
    out[k] = _mm512_shuffle_i32x4(c0, c2, 0x88);
    out[4 + k] = _mm512_shuffle_i32x4(c0, c2, 0xDD);
    out[8 + k] = _mm512_shuffle_i32x4(c1, c3, 0x88);
    out[12 + k] = _mm512_shuffle_i32x4(c1, c3, 0xDD);
  }
}

// The first n (up to 32; the rest 0) of the 32 halves at p as bf16: as stored, or an f32
// operand (GemmDesc::bF32) rounded as a cast rounds it.
TGC_BF16_INLINE __m512i loadHalves(const uint16_t* p, int64_t n) {
  return _mm512_maskz_loadu_epi16(n >= 32 ? ~__mmask32{0} : (__mmask32{1} << n) - 1, p);
}
// The mask of the first c of 16 lanes (none for c <= 0).
inline __mmask16 firstLanes(int64_t c) {
  return static_cast<__mmask16>(c >= 16 ? 0xFFFFu : c <= 0 ? 0u : (1u << c) - 1);
}
TGC_BF16_INLINE __m512i loadHalves(const float* p, int64_t n) {
  // VCVTNE2PS2BF16 rounds to nearest even as floatToBF16 does; it flushes denormals to
  // zero, which VDPBF16PS does to a denormal bf16 anyway, and any NaN stays a NaN.
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(firstLanes(n - 16), p + 16),
                                                       _mm512_maskz_loadu_ps(firstLanes(n), p)));
}
// Halves 16h .. 16h + 15 of x (h 0 or 1) widened to f32 (exact).
TGC_BF16_INLINE __m512 widenHalf(__m512i x, int h) {
  const __m256i half = h == 0 ? _mm512_castsi512_si256(x) : _mm512_extracti64x4_epi64(x, 1);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}
inline uint32_t halfAt(const uint16_t* p) { return *p; }
inline uint32_t halfAt(const float* p) { return floatToBF16(*p); }

// t[c] = the words p0 + c (c < cnt; the rest 0) of rows i < rows (the rest 0) of a matrix
// of words whose row i starts at base + i * ld elements (bf16, or f32 rounded): 16 pairs of
// up to 16 rows, as 16 vectors of up to 16 rows each.
template <class Src>
TGC_BF16_INLINE void wordsTransposed(const Src* base, int64_t ld, int64_t rows, int64_t p0,
                                     int64_t cnt, __m512i t[16]) {
  __m512i r[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    r[i] = i < rows ? loadHalves(base + i * ld + 2 * p0, 2 * cnt) : _mm512_setzero_si512();
  transpose16(r, t);
}

// Packed A: sliver s (rows s*MR ..) is kp * MR words; word p * MR + r holds the pair
// A(row, 2p) | A(row, 2p + 1) << 16. Rows past m and the k past K are zeros.
TGC_BF16 void packASlivers(const GemmDesc& d, const uint16_t* a, int64_t kp, int64_t s0,
                           int64_t s1, uint32_t* ap) {
  const int64_t pairs = d.k / 2;  // whole pairs; an odd K leaves one last half pair
  constexpr __mmask16 kTile = (1u << kMR) - 1;
  for (int64_t s = s0; s < s1; ++s) {
    uint32_t* out = ap + s * kp * kMR;
    const int64_t rows = std::min(kMR, d.m - s * kMR);
    if (!d.transA) {
      // A(i, k) = a[i * lda + k]: a row's pairs are consecutive words (little-endian: A(i, 2p)
      // in the low half). 16 pairs of the sliver's rows at a time, transposed.
      const uint16_t* src = a + s * kMR * d.lda;
      for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
        const int64_t cnt = std::min<int64_t>(16, pairs - p0);
        __m512i t[16];
        wordsTransposed(src, d.lda, rows, p0, cnt, t);
        for (int64_t c = 0; c < cnt; ++c) _mm512_mask_storeu_epi32(out + (p0 + c) * kMR, kTile, t[c]);
      }
      if (d.k % 2) {
        for (int64_t r = 0; r < kMR; ++r)
          out[pairs * kMR + r] = r < rows ? src[r * d.lda + d.k - 1] : 0u;
      }
    } else {
      // A(i, k) = a[k * lda + i]: one k's rows are consecutive halves, widened to words and
      // merged with the next k's.
      const __mmask16 m = static_cast<__mmask16>((1u << rows) - 1);
      for (int64_t p = 0; p < kp; ++p) {
        const uint16_t* lo = a + 2 * p * d.lda + s * kMR;
        const __m512i x = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, lo));
        const __m512i y = 2 * p + 1 < d.k
                              ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, lo + d.lda))
                              : _mm512_setzero_si512();
        _mm512_mask_storeu_epi32(out + p * kMR, kTile, _mm512_or_si512(x, _mm512_slli_epi32(y, 16)));
      }
    }
  }
}

// Packed B: sliver s (columns s*NR ..) is kp * 2NR halves; half p * 2NR + 2j + h holds
// B(2p + h, s*NR + j), so one 64-byte load is the pairs of 16 columns. Columns past n and
// the k past K are zeros. Src is uint16_t (bf16) or float (GemmDesc::bF32: rounded here).
// With sums (B not transposed), also the sliver's column sums over k, in order.
template <class Src>
TGC_BF16 void packBSlivers(const GemmDesc& d, const Src* b, int64_t kp, int64_t s0, int64_t s1,
                           uint16_t* bp, float* sums) {
  // Interleaves two rows of 32 halves: lo gets columns 0-15, hi 16-31.
  alignas(64) static constexpr uint16_t kLo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                   37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                   11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                                   53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                                   27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i lo = _mm512_load_si512(kLo), hi = _mm512_load_si512(kHi);
  for (int64_t s = s0; s < s1; ++s) {
    uint16_t* out = bp + s * kp * 2 * kNR;
    const int64_t j0 = s * kNR, cols = std::min(kNR, d.n - j0);
    if (!d.transB) {  // B(k, j) = b[k * ldb + j]: rows 2p and 2p + 1, interleaved
      __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();  // columns 0-15, 16-31
      for (int64_t p = 0; p < kp; ++p) {
        const Src* r0 = b + 2 * p * d.ldb + j0;
        const bool second = 2 * p + 1 < d.k;
        const __m512i x = loadHalves(r0, cols);
        const __m512i y = second ? loadHalves(r0 + d.ldb, cols) : _mm512_setzero_si512();
        _mm512_storeu_si512(out + p * 2 * kNR, _mm512_permutex2var_epi16(x, lo, y));
        _mm512_storeu_si512(out + p * 2 * kNR + kNR, _mm512_permutex2var_epi16(x, hi, y));
        if (sums) {
          sum0 = _mm512_add_ps(sum0, widenHalf(x, 0));
          sum1 = _mm512_add_ps(sum1, widenHalf(x, 1));
          if (second) {
            sum0 = _mm512_add_ps(sum0, widenHalf(y, 0));
            sum1 = _mm512_add_ps(sum1, widenHalf(y, 1));
          }
        }
      }
      if (sums) {
        _mm512_mask_storeu_ps(sums + j0, firstLanes(cols), sum0);
        _mm512_mask_storeu_ps(sums + j0 + 16, firstLanes(cols - 16), sum1);
      }
    } else {
      // B(k, j) = b[j * ldb + k]: a column's pairs are consecutive words; 16 pairs of 16
      // columns at a time, transposed.
      const int64_t pairs = d.k / 2;
      uint32_t* w = reinterpret_cast<uint32_t*>(out);  // word p * NR + j
      for (int64_t h = 0; h < kNR; h += 16) {
        const int64_t hc = std::clamp<int64_t>(cols - h, 0, 16);
        for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
          const int64_t cnt = std::min<int64_t>(16, pairs - p0);
          __m512i t[16];
          wordsTransposed(b + (j0 + h) * d.ldb, d.ldb, hc, p0, cnt, t);
          for (int64_t c = 0; c < cnt; ++c) _mm512_storeu_si512(w + (p0 + c) * kNR + h, t[c]);
        }
        if (d.k % 2)
          for (int64_t j = 0; j < 16; ++j)
            w[pairs * kNR + h + j] = j < hc ? halfAt(b + (j0 + h + j) * d.ldb + d.k - 1) : 0u;
      }
    }
  }
}

// f32 -> bf16, round to nearest even, NaN kept quiet (gemm_bf16.cpp's Narrow, 16 lanes).
TGC_BF16_INLINE __m256i narrow16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                _mm512_set1_epi32(0x7F800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

// C (rows x cols of the tile, at c) = alpha * Ap Bp + beta * C over kp pairs.
TGC_BF16 void tile(int64_t kp, const uint32_t* ap, const uint16_t* bp, uint16_t* c, int64_t ldc,
                   int64_t rows, int64_t cols, float alpha, float beta) {
  __m512 acc[kMR][2];
#pragma GCC unroll 12
  for (int r = 0; r < kMR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p) {
    const __m512i b0 = _mm512_loadu_si512(bp + p * 2 * kNR);
    const __m512i b1 = _mm512_loadu_si512(bp + p * 2 * kNR + kNR);
    const uint32_t* ar = ap + p * kMR;
#pragma GCC unroll 12
    for (int r = 0; r < kMR; ++r) {
      const __m512i x = _mm512_set1_epi32(static_cast<int>(ar[r]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], reinterpret_cast<__m512bh>(x),
                                   reinterpret_cast<__m512bh>(b0));
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], reinterpret_cast<__m512bh>(x),
                                   reinterpret_cast<__m512bh>(b1));
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
  for (int r = 0; r < kMR; ++r) {
    if (r >= rows) break;
#pragma GCC unroll 2
    for (int v = 0; v < 2; ++v) {
      const int64_t n = std::clamp<int64_t>(cols - 16 * v, 0, 16);
      if (n == 0) break;
      const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
      uint16_t* cp = c + r * ldc + 16 * v;
      __m512 x = _mm512_mul_ps(acc[r][v], va);
      if (beta != 0) {
        const __m512i old = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, cp)), 16);
        x = _mm512_fmadd_ps(vb, _mm512_castsi512_ps(old), x);
      }
      _mm256_mask_storeu_epi16(cp, m, narrow16(x));
    }
  }
}

// The calling thread's packing buffers, grown to the largest call and kept (outside the
// executable's arena, as the f32 GEMM's, on 2 MiB pages from 1 MiB up): the largest
// product's A and B in bf16, padded to whole slivers (12 rows, 32 columns: up to 32x B when
// n is 1).
Scratch& packBuffer(int which) {
  thread_local Scratch bufs[2];
  return bufs[which];
}

}  // namespace

void gemmBf16NativeItem(const GemmDesc& d, const uint16_t* a, const void* b, uint16_t* c,
                        float* sumB, ThreadPool& pool) {
  const int64_t kp = (d.k + 1) / 2;
  const int64_t slA = (d.m + kMR - 1) / kMR, slB = (d.n + kNR - 1) / kNR;
  uint32_t* ap = packBuffer(0).get<uint32_t>(slA * kp * kMR);
  uint16_t* bp = packBuffer(1).get<uint16_t>(slB * kp * 2 * kNR);
  // Both operands packed in one parallel pass: A's slivers, then B's.
  pool.parallelForDynamic(slA + slB, 4, [&](int64_t s0, int64_t s1) {
    if (s0 < slA) packASlivers(d, a, kp, s0, std::min(s1, slA), ap);
    if (s1 <= slA) return;
    if (d.bF32)
      packBSlivers(d, static_cast<const float*>(b), kp, std::max(s0, slA) - slA, s1 - slA, bp,
                   nullptr);
    else
      packBSlivers(d, static_cast<const uint16_t*>(b), kp, std::max(s0, slA) - slA, s1 - slA, bp,
                   sumB);
  });
  // Blocks of up to 8 x 8 slivers (96 rows x 256 columns: one B sliver serves 8 A slivers
  // while it is in L1 or, past K = 512, in L2), halved while there are fewer than 16 blocks per thread: with 4, 1024 x 256 x
  // 8000 was 11 blocks, 6 on one thread and 5 on the other (300-313 GFLOP/s against 336-342
  // on 2 threads).
  int64_t bA = 8, bB = 8;
  auto blocks = [&] { return ((slA + bA - 1) / bA) * ((slB + bB - 1) / bB); };
  const int64_t want = 16 * pool.numThreads();
  while (blocks() < want && (bA > 1 || bB > 1)) {
    if (bA >= bB && bA > 1) bA /= 2;
    else bB /= 2;
  }
  const int64_t colBlocks = (slB + bB - 1) / bB;
  const float alpha = static_cast<float>(d.alpha), beta = static_cast<float>(d.beta);
  pool.parallelForDynamic(blocks(), 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t a0 = t / colBlocks * bA, b0 = t % colBlocks * bB;
      for (int64_t sb = b0; sb < std::min(slB, b0 + bB); ++sb)
        for (int64_t sa = a0; sa < std::min(slA, a0 + bA); ++sa)
          tile(kp, ap + sa * kp * kMR, bp + sb * kp * 2 * kNR, c + sa * kMR * d.ldc + sb * kNR,
               d.ldc, std::min(kMR, d.m - sa * kMR), std::min(kNR, d.n - sb * kNR), alpha, beta);
    }
  });
}

#else  // not x86-64: no native kernel

bool cpuHasAvx512Bf16() { return false; }

void gemmBf16NativeItem(const GemmDesc&, const uint16_t*, const void*, uint16_t*, float*,
                        ThreadPool&) {
  throw std::logic_error("the AVX512-BF16 GEMM runs on x86-64 only");
}

#endif

}  // namespace tgc::codegen
