// What the CPU attention kernels (attention_cpu.cpp, attention_cpu_backward.cpp) share: block
// sizes, the inner loops' interface, masks and dropout per row, block copies, scratch, tasks.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>

#include "codegen/attention_cpu.h"
#include "support/thread_pool.h"

namespace tgc::codegen::attention_cpu {

constexpr int64_t kBlockQ = 64;  // queries per block
constexpr int64_t kBlockK = 64;  // keys per block
// Columns of every block product are padded to a multiple of this (two AVX2 vectors of
// f32, four of f64), so the vector kernels never need a column tail.
constexpr int64_t kPad = 16;

inline int64_t padded(int64_t n) { return (n + kPad - 1) / kPad * kPad; }

// ---- the inner loops (attention_cpu_loops.cpp) ------------------------------------------

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

// The inner loops of the ISA in use (attentionIsa()), T = float or double.
template <class T>
Prims<T> prims();

// ---- masks and dropout -------------------------------------------------------------------

// What decides whether (i, j) is allowed, and dropout's keep factor, for one batch item.
template <class T>
struct RowRules {
  const AttentionParams& p;
  const uint8_t* mask;  // at the batch item's base, or null
  const T* bias;        // likewise
  int64_t b;
  T keepScale;
  UniformFn uniforms;
  MaskFn<T> maskUnitStride;

  RowRules(const AttentionParams& params, const Prims<T>& pr, const uint8_t* m,
           int64_t batchItem)
      : p(params), mask(m && params.hasMask ? m + params.maskBase[batchItem] : nullptr),
        bias(params.hasBias ? static_cast<const T*>(params.bias) + params.biasBase[batchItem] : nullptr),
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

  // The scores of query i for keys j0 + c, c < cols, from its scaled products: adds the
  // bias, then sets s[c] to -inf for every disallowed key and for the padding columns up to
  // colsPadded.
  void maskRow(T* s, int64_t i, int64_t j0, int64_t cols, int64_t colsPadded) const {
    constexpr T ninf = -std::numeric_limits<T>::infinity();
    int64_t allowedEnd = cols;
    if (p.causal) allowedEnd = std::clamp<int64_t>(i - j0 + 1, 0, cols);
    if (bias) {
      const T* br = bias + i * p.biasStrideI + j0 * p.biasStrideJ;
      if (p.biasStrideJ == 1)
        for (int64_t c = 0; c < allowedEnd; ++c) s[c] += br[c];
      else
        for (int64_t c = 0; c < allowedEnd; ++c) s[c] += br[c * p.biasStrideJ];
    }
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

  // dbias(i, j0 + c) += ds[c] for c < cols (the score gradients before the scale).
  void addBiasGrad(const T* ds, int64_t i, int64_t j0, int64_t cols) const {
    T* dr = static_cast<T*>(p.dbias) + p.biasBase[b] + i * p.biasStrideI + j0 * p.biasStrideJ;
    for (int64_t c = 0; c < cols; ++c) dr[c * p.biasStrideJ] += ds[c];
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
inline bool unpadded(int64_t n) { return n % kPad == 0; }

// Batch item b's rows of an operand with rows of `width` and T rows per item: where they
// start and their stride. [batch, T, width] when heads = 1; layout bthd's
// [batch / heads, T, heads, width] (item b is head b % heads) otherwise.
inline int64_t rowStride(const AttentionParams& p, int64_t width) { return p.heads * width; }
inline int64_t itemBase(const AttentionParams& p, int64_t b, int64_t T, int64_t width) {
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
inline int64_t causalGroup(const AttentionParams& p, int64_t rows) { return p.causal ? kPad : rows; }
inline int64_t keysNeeded(const AttentionParams& p, int64_t queryEnd, int64_t j0, int64_t cols) {
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

inline void checkDtype(const AttentionParams& p) {
  if (p.dtype != DType::f32 && p.dtype != DType::f64)
    throw std::invalid_argument(
        fmt::format("fused attention runs in f32 and f64 only, not {}", dtypeName(p.dtype)));
}

}  // namespace tgc::codegen::attention_cpu
