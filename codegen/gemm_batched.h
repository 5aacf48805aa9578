// The batched GEMM's small-item path: a thread's run of consecutive batch items whose
// operands are small (64 x (128x128x64), attention's per-head products), each item done
// whole by that thread with no synchronisation, in one pass over C.
//
// Per item, with K in one block (k <= kc) and A and B small enough to prefetch:
//   - B is packed once into kc x NR slivers (a thread-local buffer reused by every item);
//     a transposed B of floats is packed with 4x4 SSE transposes (packBTransposedF32),
//     three times faster than the generic per-element transposition.
//   - A is read in place by the direct-A micro-kernel when it is not transposed and n is
//     small (codegen/gemm_kernel.h), else packed once for the whole item.
//   - The tiles are walked B sliver by B sliver (the sliver stays in L1), one micro-kernel
//     call per column of tiles (at least kMinCalls calls an item); after each call a slice
//     of the NEXT item's A and B is prefetched, so that when its turn comes its operands
//     are in L2. (Slices spread over calls of 24 rows, ~40 an item instead of 8, were
//     0.5-2.5 points slower than whole columns on 64 x (128x128x64) and its B^T variant,
//     timed batch call by batch call, alternating: bench/README.md, "Tried and not kept".)
//   - The epilogue runs on each call's tiles right after the micro-kernel, still in L1.
//
// It is a template over the GEMM driver's epilogue type (codegen/gemm.cpp's Epilogue<T>:
// fn, apply(c, ldc, row, col, rows, cols)), so the two paths share one epilogue.
#pragma once

#include <algorithm>
#include <cstdint>

#include "codegen/gemm.h"
#include "codegen/gemm_kernel.h"
#include "codegen/gemm_pack.h"

namespace tgc::codegen::batched {

// Items with fewer B slivers than this split their columns of tiles into row blocks, so
// that every item makes at least this many micro-kernel calls to spread the next item's
// prefetches over (8: one call per sliver at n = 128).
inline constexpr int64_t kMinCalls = 8;
// Items whose A and B together take at most this many bytes are prefetched into L2 (512
// KiB per core on Zen 3) during the previous item, next to the current item's A, B, packed
// B and C; with K in one block they take this path, else codegen/gemm.cpp's per-item one.
inline constexpr int64_t kItemOperandBytes = 192 << 10;

// Memory regions to pull into L2 while a product runs: the operands of the batch item a
// thread runs next. Small batch items are latency bound on their operands (packing B and
// reading A in place both wait on L3 or DRAM); fetched during the previous item, they
// are in L2 when their turn comes. Both batched paths use it (this one, and the general
// per-item products of codegen/gemm.cpp).
struct PrefetchPlan {
  const char* begin[2] = {nullptr, nullptr};
  int64_t bytes[2] = {0, 0};

  // Issues the prefetches of part `part` of `parts` (every cache line exactly once over
  // the parts 0..parts-1).
  void issue(int64_t part, int64_t parts) const {
    for (int r = 0; r < 2; ++r) {
      const int64_t lines = (bytes[r] + 63) / 64;
      for (int64_t l = part * lines / parts, end = (part + 1) * lines / parts; l < end; ++l)
        __builtin_prefetch(begin[r] + l * 64, 0, 2);
    }
  }
  bool empty() const { return bytes[0] == 0 && bytes[1] == 0; }
};

// Whether the items of `d` take the small-item path with kernel configuration `cfg`.
bool smallItems(const GemmKernelConfig& cfg, const GemmDesc& d);

// A thread-local 64-byte aligned buffer of at least `bytes` bytes, kept between calls
// (codegen/gemm_scratch.h); slot 0 holds packed B, slot 1 packed A.
void* scratch(int slot, int64_t bytes);

// The slivers of NR = 16 columns of op(B) = B^T for a float B stored n x k (ldb apart):
// dst[s*kc*16 + p*16 + j] = B(s*16 + j, p), zero for columns >= n.
void packBTransposedF32(const float* b, int64_t ldb, int64_t n, int64_t kc, float* dst);

// One batch item: its operands and its epilogue.
template <class T, class Epi>
struct Item {
  const T* a;
  const T* b;
  T* c;
  Epi epi;
};

// Runs items [i0, i1) of `d` on the calling thread; item(i) gives item i's Item.
template <class T, class ItemFn>
void runItems(const GemmKernelConfig& cfg, GemmMicroKernel<T>* packed, GemmMicroKernelDirectA<T>* direct,
              const GemmDesc& d, int64_t i0, int64_t i1, const ItemFn& item) {
  const T alpha = static_cast<T>(d.alpha), beta = static_cast<T>(d.beta);
  const int64_t MR = cfg.mr, NR = cfg.nr;
  const int64_t nSlivers = (d.n + NR - 1) / NR, mSlivers = (d.m + MR - 1) / MR;
  const bool directA = !d.transA && d.n <= cfg.directAMaxN;
  T* bp = static_cast<T*>(scratch(0, nSlivers * NR * d.k * static_cast<int64_t>(sizeof(T))));
  T* ap = directA ? nullptr : static_cast<T*>(scratch(1, mSlivers * MR * d.k * static_cast<int64_t>(sizeof(T))));
  // Bytes of A and B as stored, from an item's first element (what the next item prefetches).
  const int64_t bytesA = ((d.transA ? d.k : d.m) - 1) * d.lda * static_cast<int64_t>(sizeof(T)) +
                         (d.transA ? d.m : d.k) * static_cast<int64_t>(sizeof(T));
  const int64_t bytesB = ((d.transB ? d.n : d.k) - 1) * d.ldb * static_cast<int64_t>(sizeof(T)) +
                         (d.transB ? d.k : d.n) * static_cast<int64_t>(sizeof(T));
  // Rows per micro-kernel call: whole columns of tiles, or at least kMinCalls calls per item
  // for narrow items, so that the next item's prefetches stay spread out; a whole number of
  // slivers, so that packed A's slivers start at a call's row.
  const int64_t splits = (kMinCalls + nSlivers - 1) / nSlivers;
  const int64_t R = (mSlivers + splits - 1) / splits * MR;
  const int64_t calls = nSlivers * ((d.m + R - 1) / R);

  for (int64_t i = i0; i < i1; ++i) {
    const auto it = item(i);
    if constexpr (sizeof(T) == 4) {
      if (d.transB && NR == 16)
        packBTransposedF32(it.b, d.ldb, d.n, d.k, bp);
      else
        pack::packB(it.b, d.ldb, d.transB, 0, d.n, 0, d.k, cfg.nr, 0, nSlivers, bp);
    } else {
      pack::packB(it.b, d.ldb, d.transB, 0, d.n, 0, d.k, cfg.nr, 0, nSlivers, bp);
    }
    if (!directA) pack::packA(it.a, d.lda, d.transA, 0, d.m, 0, d.k, cfg.mr, ap);

    // The next item's operands, a slice after each kernel call (none after the last item).
    PrefetchPlan next;
    if (i + 1 < i1) {
      const auto n = item(i + 1);
      next.begin[0] = reinterpret_cast<const char*>(n.a);
      next.bytes[0] = bytesA;
      next.begin[1] = reinterpret_cast<const char*>(n.b);
      next.bytes[1] = bytesB;
    }
    int64_t call = 0;
    for (int64_t js = 0; js < nSlivers; ++js) {
      const int64_t col = js * NR, nr = std::min(NR, d.n - col);
      const T* bs = bp + js * d.k * NR;
      for (int64_t row = 0; row < d.m; row += R, ++call) {
        const int64_t rows = std::min(R, d.m - row);
        T* ct = it.c + row * d.ldc + col;
        if (directA)
          direct(d.k, it.a + row * d.lda, d.lda, bs, ct, d.ldc, rows, nr, alpha, beta);
        else
          packed(d.k, ap + row * d.k, bs, ct, d.ldc, rows, nr, alpha, beta);
        if (it.epi.fn) it.epi.apply(it.c, d.ldc, row, col, rows, nr);
        if (!next.empty()) next.issue(call, calls);
      }
    }
  }
}

}  // namespace tgc::codegen::batched
