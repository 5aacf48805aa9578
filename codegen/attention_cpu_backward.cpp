// FlashAttention backward on the CPU (attention_cpu.h): per head, key blocks outer and query
// blocks inner (FlashAttention-2's loop order).
#include "codegen/attention_cpu.h"

#include <algorithm>
#include <limits>
#include <map>
#include <vector>

#include "codegen/attention_cpu_internal.h"
#include "support/thread_pool.h"

namespace tgc::codegen {

using namespace attention_cpu;

namespace {

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
          if (p.biasGrad) rules.addBiasGrad(dr, i0 + r, j0, gCols);
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
  if (!p.biasGrad) {
    forEachTask<BackwardScratch<T>>(pool, p, p.batch, [&](int64_t b, BackwardScratch<T>& w) {
      backwardHead(p, pr, q, k, v, out, lse, dout, mask, dq, dk, dv, b, w);
    });
    return;
  }
  // dbias: zeroed, then the batch items that add to the same part of it (one bias base)
  // run in one task, in order.
  std::fill_n(static_cast<T*>(p.dbias), p.biasElements, T(0));
  std::map<int64_t, std::vector<int64_t>> byBase;
  for (int64_t b = 0; b < p.batch; ++b) byBase[p.biasBase[static_cast<size_t>(b)]].push_back(b);
  std::vector<std::vector<int64_t>> groups;
  for (auto& [base, items] : byBase) groups.push_back(std::move(items));
  forEachTask<BackwardScratch<T>>(pool, p, static_cast<int64_t>(groups.size()),
                                  [&](int64_t g, BackwardScratch<T>& w) {
    for (int64_t b : groups[static_cast<size_t>(g)])
      backwardHead(p, pr, q, k, v, out, lse, dout, mask, dq, dk, dv, b, w);
  });
}

}  // namespace

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

}  // namespace tgc::codegen
