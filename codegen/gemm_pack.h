// Packing of GEMM operands into the micro-kernel's sliver layout (see gemm_kernel.h).
//
// A sliver of width W (MR rows of op(A), or NR columns of op(B)) over kc steps of k is
// stored k-major: dst[k*W + i], zero past the operand's edge. Depending on how the operand
// is stored, a sliver is either a strided copy of W contiguous elements per k ("copy", of
// all slivers of a panel together) or a transposition of W contiguous rows of length kc
// ("transpose").
//
// The common widths are compile-time constants, so that the copies become vector moves
// and the transposition fully unrolls; reads run ahead with software prefetches because
// packing streams the operands from memory, where it is latency bound.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace tgc::codegen::pack {

// Elements per 64-byte cache line; the prefetch distance is a few lines.
template <class T>
inline constexpr int64_t kLine = 64 / sizeof(T);
template <class T>
inline constexpr int64_t kPrefetchAhead = 4 * kLine<T>;

#if defined(__SSE2__)
// transposeSliver for six full rows of floats (the AVX2 kernel's A slivers), four k at a
// time: rows 0-3 by a 4x4 SSE transpose, rows 4-5 interleaved in pairs, so that each k
// takes one 16-byte and one 8-byte store instead of six scalar ones. Returns the number of
// k done (a multiple of 4); the caller does the rest.
inline int64_t transposeSix(const float* src, int64_t ld, int64_t kc, float* dst) {
  const float* r[6];
  for (int i = 0; i < 6; ++i) r[i] = src + i * ld;
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    if (k % kLine<float> == 0)
      for (int i = 0; i < 6; ++i) __builtin_prefetch(r[i] + k + kPrefetchAhead<float>);
    __m128 t0 = _mm_loadu_ps(r[0] + k), t1 = _mm_loadu_ps(r[1] + k);
    __m128 t2 = _mm_loadu_ps(r[2] + k), t3 = _mm_loadu_ps(r[3] + k);
    _MM_TRANSPOSE4_PS(t0, t1, t2, t3);  // t_j = (r0[k+j], r1[k+j], r2[k+j], r3[k+j])
    const __m128 r4 = _mm_loadu_ps(r[4] + k), r5 = _mm_loadu_ps(r[5] + k);
    const __m128 lo = _mm_unpacklo_ps(r4, r5), hi = _mm_unpackhi_ps(r4, r5);
    float* d = dst + k * 6;
    _mm_storeu_ps(d, t0);
    _mm_storel_pi(reinterpret_cast<__m64*>(d + 4), lo);
    _mm_storeu_ps(d + 6, t1);
    _mm_storeh_pi(reinterpret_cast<__m64*>(d + 10), lo);
    _mm_storeu_ps(d + 12, t2);
    _mm_storel_pi(reinterpret_cast<__m64*>(d + 16), hi);
    _mm_storeu_ps(d + 18, t3);
    _mm_storeh_pi(reinterpret_cast<__m64*>(d + 22), hi);
  }
  return k;
}
#endif

// dst[k*W + i] = src[i*ld + k] for i < w, 0 for w <= i < W, k < kc.
// kW is W when known at compile time, else 0 and W is given at run time.
template <class T, int kW>
void transposeSliver(const T* src, int64_t ld, int64_t w, int64_t kc, int runtimeW, T* dst) {
  const int64_t W = kW > 0 ? kW : runtimeW;
#if defined(__SSE2__)
  if constexpr (kW == 6 && std::is_same_v<T, float>) {
    if (w == 6) {
      const int64_t done = transposeSix(src, ld, kc, dst);
      for (int64_t k = done; k < kc; ++k)
        for (int64_t i = 0; i < 6; ++i) dst[k * 6 + i] = src[i * ld + k];
      return;
    }
  }
#endif
  if (w == W) {
    // A cache line of each row at a time, row by row: rows ld apart often share cache
    // sets (ld a power of two), so touching all W rows per k would thrash L1.
    for (int64_t k0 = 0; k0 < kc; k0 += kLine<T>) {
      const int64_t k1 = std::min(kc, k0 + kLine<T>);
      for (int64_t i = 0; i < W; ++i) {
        const T* row = src + i * ld;
        __builtin_prefetch(row + k0 + kPrefetchAhead<T>);
        for (int64_t k = k0; k < k1; ++k) dst[k * W + i] = row[k];
      }
    }
    return;
  }
  for (int64_t k = 0; k < kc; ++k) {
    T* d = dst + k * W;
    for (int64_t i = 0; i < w; ++i) d[i] = src[i * ld + k];
    for (int64_t i = w; i < W; ++i) d[i] = T(0);
  }
}

// All slivers of width W of a row-major panel of kc rows and `cols` columns whose columns
// are contiguous (A transposed): dst[s*kc*W + k*W + j] = src[k*ld + s*W + j], zero past
// `cols`. Eight k at a time across the slivers, so that each sliver's destination lines
// are finished before the next sliver's (sliver by sliver, kc rows ld apart alias in L1
// when ld is a multiple of 256 floats; row by row, the W-wide pieces of every sliver,
// kc*W apart, do: either way lines are evicted half written). Packing A^T of 1024 x 1024
// (ld 1024): 0.68 -> 0.2-0.3 ns an element; ld 256: 0.33 -> 0.22-0.32.
template <class T, int kW>
void copySlivers(const T* src, int64_t ld, int64_t cols, int64_t kc, int runtimeW, T* dst) {
  const int64_t W = kW > 0 ? kW : runtimeW;
  constexpr int64_t kStep = 8;
  const int64_t slivers = (cols + W - 1) / W;
  for (int64_t k0 = 0; k0 < kc; k0 += kStep) {
    const int64_t k1 = std::min(kc, k0 + kStep);
    for (int64_t k = k0; k < k1; ++k) __builtin_prefetch(src + (k + 2 * kStep) * ld);
    for (int64_t s = 0; s < slivers; ++s) {
      const int64_t w = std::min(W, cols - s * W);
      T* d = dst + s * kc * W;
      if (w == W) {  // a constant-size copy when kW is known
        for (int64_t k = k0; k < k1; ++k) std::memcpy(d + k * W, src + k * ld + s * W, sizeof(T) * W);
        continue;
      }
      for (int64_t k = k0; k < k1; ++k) {
        std::memcpy(d + k * W, src + k * ld + s * W, sizeof(T) * w);
        std::fill(d + k * W + w, d + (k + 1) * W, T(0));
      }
    }
  }
}

// Slivers [s0, s1) of width W of a row-major panel, k rows of `cols` columns, whose
// columns are contiguous (B not transposed): row by row, so that reads stream through
// memory; each row segment goes to its sliver.
template <class T, int kW>
void copyPanelRows(const T* src, int64_t ld, int64_t cols, int64_t kc, int runtimeW, int64_t s0,
                   int64_t s1, T* dst) {
  const int64_t W = kW > 0 ? kW : runtimeW;
  const int64_t fullEnd = std::min(s1, cols / W);  // slivers with all W columns
  for (int64_t k = 0; k < kc; ++k) {
    const T* row = src + k * ld;
    __builtin_prefetch(row + 2 * ld + s0 * W);
    for (int64_t s = s0; s < fullEnd; ++s) std::memcpy(dst + (s * kc + k) * W, row + s * W, sizeof(T) * W);
    for (int64_t s = std::max(s0, fullEnd); s < s1; ++s) {
      const int64_t w = std::max<int64_t>(0, std::min(W, cols - s * W));
      T* d = dst + (s * kc + k) * W;
      std::memcpy(d, row + s * W, sizeof(T) * w);
      std::fill(d + w, d + W, T(0));
    }
  }
}

// Calls fn.template operator()<kW>() with kW = w if it is one of the widths the kernels
// use, else with kW = 0 (run-time width).
template <class Fn>
void withWidth(int w, Fn&& fn) {
  switch (w) {
    case 4: return fn.template operator()<4>();
    case 6: return fn.template operator()<6>();
    case 8: return fn.template operator()<8>();
    case 12: return fn.template operator()<12>();
    case 16: return fn.template operator()<16>();
    case 32: return fn.template operator()<32>();
    default: return fn.template operator()<0>();
  }
}

// sums[j] = the sum over k < kc of sliver[k*W + j], k ascending, for a packed kc x W
// sliver (GemmDesc::sumB). The W partial sums stay in registers when W is known, instead
// of a load-add-store chain through memory per k.
template <class T>
void sumColumns(const T* sliver, int64_t kc, int W, T* sums) {
  withWidth(W, [&]<int kW>() {
    if constexpr (kW > 0) {
      T acc[kW] = {};
      for (int64_t k = 0; k < kc; ++k)
        for (int j = 0; j < kW; ++j) acc[j] += sliver[k * kW + j];
      std::copy(acc, acc + kW, sums);
    } else {
      std::fill(sums, sums + W, T(0));
      for (int64_t k = 0; k < kc; ++k)
        for (int j = 0; j < W; ++j) sums[j] += sliver[k * W + j];
    }
  });
}

// The cache lines of A, as stored, that packA(a, lda, trans, i0, rows, p0, kc, ...) reads:
// `count` segments of contiguous elements, `stride` bytes apart (kc rows of `rows` elements
// for A^T, else `rows` rows of kc), each from the line of its first element to the line of
// its last. The product prefetches the next block's lines into L2 while the micro-kernel
// runs on the current one, spread over its calls, so that packA reads from L2 rather than
// waiting on L3 or DRAM. Empty (count 0) by default.
struct SourceLines {
  const char* first = nullptr;  // the first element of segment 0
  int64_t count = 0, stride = 0, bytes = 0;  // bytes: a segment's length

  SourceLines() = default;
  template <class T>
  SourceLines(const T* a, int64_t lda, bool trans, int64_t i0, int64_t rows, int64_t p0, int64_t kc)
      : first(reinterpret_cast<const char*>(trans ? a + p0 * lda + i0 : a + i0 * lda + p0)),
        count(trans ? kc : rows),
        stride(lda * static_cast<int64_t>(sizeof(T))),
        bytes((trans ? rows : kc) * static_cast<int64_t>(sizeof(T))) {}

  // Calls fn(line address) for each line of segments [part*count/parts, (part+1)*count/parts).
  template <class Fn>
  void forEachLine(int64_t part, int64_t parts, Fn&& fn) const {
    if (bytes <= 0) return;
    for (int64_t s = part * count / parts, end = (part + 1) * count / parts; s < end; ++s) {
      const uintptr_t begin = reinterpret_cast<uintptr_t>(first + s * stride);
      for (uintptr_t line = begin & ~uintptr_t{63}; line < begin + bytes; line += 64)
        fn(reinterpret_cast<const char*>(line));
    }
  }
  // Prefetches part `part` of `parts` into L2.
  void prefetch(int64_t part, int64_t parts) const {
    forEachLine(part, parts, [](const char* line) { __builtin_prefetch(line, 0, 2); });
  }
};

// Rows [i0, i0 + rows) x columns [p0, p0 + kc) of op(A) into slivers of MR rows:
// dst[s*kc*MR + k*MR + i] = op(A)(i0 + s*MR + i, p0 + k).
template <class T>
void packA(const T* a, int64_t lda, bool trans, int64_t i0, int64_t rows, int64_t p0, int64_t kc,
           int mr, T* dst) {
  withWidth(mr, [&]<int kW>() {
    if (trans) {
      copySlivers<T, kW>(a + p0 * lda + i0, lda, rows, kc, mr, dst);
      return;
    }
    for (int64_t s = 0; s * mr < rows; ++s) {
      const int64_t r0 = i0 + s * mr;
      const int64_t w = std::min<int64_t>(mr, i0 + rows - r0);
      transposeSliver<T, kW>(a + r0 * lda + p0, lda, w, kc, mr, dst + s * kc * mr);
    }
  });
}

// Slivers [s0, s1) of NR columns of op(B) rows [p0, p0 + kc), columns from j0 (cols in
// all): dst[s*kc*NR + k*NR + j] = op(B)(p0 + k, j0 + s*NR + j).
template <class T>
void packB(const T* b, int64_t ldb, bool trans, int64_t j0, int64_t cols, int64_t p0, int64_t kc,
           int nr, int64_t s0, int64_t s1, T* dst) {
  withWidth(nr, [&]<int kW>() {
    if (!trans) {
      copyPanelRows<T, kW>(b + p0 * ldb + j0, ldb, cols, kc, nr, s0, s1, dst);
      return;
    }
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t c0 = j0 + s * nr;
      const int64_t w = std::min<int64_t>(nr, j0 + cols - c0);
      transposeSliver<T, kW>(b + c0 * ldb + p0, ldb, w, kc, nr, dst + s * kc * nr);
    }
  });
}

}  // namespace tgc::codegen::pack
