// FlashAttention forward on the CPU and the parameters of an attention node (attention_cpu.h);
// the backward is in attention_cpu_backward.cpp, the inner loops in attention_cpu_loops.cpp.
#include "codegen/attention_cpu.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "codegen/attention_cpu_internal.h"
#include "ir/env_flag.h"
#include "ir/fused_ops.h"
#include "ir/graph.h"
#include "support/thread_pool.h"

namespace tgc::codegen {

using namespace attention_cpu;

namespace {

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
// output row and lse; kt the keys transposed [d, padded(tk)], or null with krows the keys
// as stored (row stride ldq): a single query's scores are then dot products with them, so
// that a decoding step does not transpose keys it reads once; s the scratch for p.
template <class T>
void forwardOneBlock(const AttentionParams& p, const Prims<T>& pr, const RowRules<T>& rules,
                     const T* qb, int64_t ldq, const T* kt, const T* krows, const T* vrows,
                     int64_t ldv, T* ob, T* lb, int64_t i0, int64_t rows, int64_t tk, T* s) {
  constexpr T ninf = -std::numeric_limits<T>::infinity();
  const int64_t colsP = padded(tk);
  for (int64_t r0 = 0; r0 < rows; r0 += causalGroup(p, rows)) {
    const int64_t r1 = std::min(rows, r0 + causalGroup(p, rows));
    const int64_t gCols = keysNeeded(p, i0 + r1, 0, tk), gColsP = padded(gCols);
    if (gCols > 0 && kt)
      pr.gemm(r1 - r0, gColsP, p.d, qb + r0 * ldq, ldq, 1, kt, colsP, s + r0 * colsP, colsP,
              static_cast<T>(p.scale), false);
    else if (gCols > 0)  // rows == 1
      for (int64_t j = 0; j < gCols; ++j) s[j] = static_cast<T>(p.scale) * pr.dot(qb, krows + j * ldq, p.d);
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
  // One query (a decoding step): scores from the keys as stored (see forwardOneBlock).
  // (Decided by the shapes, as below.)
  if (p.tq == 1 && p.tk <= kBlockK && unpadded(p.dv) && oneBlockForward()) {
    forwardOneBlock(p, pr, rules, qb, ldq, static_cast<const T*>(nullptr), kb, vb, ldv,
                    out + itemBase(p, b, p.tq, p.dv) + i0 * ldv, lse + b * p.tq + i0, i0, rows, tk,
                    w.s.data());
    return;
  }
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
    forwardOneBlock(p, pr, rules, qb, ldq, w.kt.data(), static_cast<const T*>(nullptr), vrows, ldvRows,
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
  p.hasBias = n.attrBool("has_bias");
  p.biasGrad = n.op() == OpKind::FusedAttentionGrad && n.attrBool("bias_grad");
  p.pDrop = n.attrFloat("p_drop");
  // The mask and the bias follow q, k, v (forward) or q, k, v, out, lse, dout (backward):
  // each element's offset is base[b] + i * strideI + j * strideJ.
  auto layout = [&](size_t at, std::vector<int64_t>& base, int64_t& strideI, int64_t& strideJ) {
    const Shape& ms = n.operand(at)->type().shape;
    std::vector<int64_t> stride(r, 0);
    int64_t s = 1;
    for (size_t i = r; i-- > 0;) {
      stride[i] = ms[i] == 1 ? 0 : s;
      s *= ms[i];
    }
    strideI = stride[r - 2];
    strideJ = stride[r - 1];
    base.assign(static_cast<size_t>(p.batch), 0);
    for (int64_t b = 0; b < p.batch; ++b) {
      int64_t rest = b, offset = 0;
      for (size_t i = r - 2; i-- > 0;) {
        offset += rest % qs[i] * stride[i];
        rest /= qs[i];
      }
      base[static_cast<size_t>(b)] = offset;
    }
  };
  const size_t first = n.op() == OpKind::FusedAttention ? 3 : 6;
  if (p.hasMask) layout(first, p.maskBase, p.maskStrideI, p.maskStrideJ);
  if (p.hasBias) {
    const size_t at = first + (p.hasMask ? 1 : 0);
    layout(at, p.biasBase, p.biasStrideI, p.biasStrideJ);
    p.biasElements = n.operand(at)->type().numel();
  }
  return p;
}

}  // namespace tgc::codegen
