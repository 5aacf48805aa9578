// Softmax-cross-entropy forward/backward and layer_norm_grad on the CPU (see loss_kernels.h).
#include "codegen/loss_kernels.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "ir/graph.h"
#include "support/thread_pool.h"

#define TGC_INLINE __attribute__((always_inline)) inline
#define TGC_AVX2 __attribute__((target("avx2,fma")))

// The helpers below pass 32-byte vectors by value; they are always inlined, so the warning
// that the portable build's calling convention for them differs from AVX's cannot apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tgc::codegen {
namespace {

// Lanes per step: two AVX2 registers. The loops below are written over these fixed arrays
// (or two HalfVecs) so that GCC vectorizes them in both builds, and so that the summation
// order (lane l takes elements l, l + L, l + 2L, ...; lanes are added pairwise at the end) is
// the same whatever the instruction set.
template <class T>
inline constexpr int kLanes = 64 / static_cast<int>(sizeof(T));

// Half of the kLanes lanes as one GCC vector of 32 bytes: an AVX2 register (two SSE ones in
// the portable build). A 64-byte vector would be split element by element on AVX2. `I` is
// the integer vector of the same lane width (exp's 2^n).
template <class T>
struct HalfVec;
template <>
struct HalfVec<float> {
  typedef float type __attribute__((vector_size(32)));
  typedef int32_t I __attribute__((vector_size(32)));
};
template <>
struct HalfVec<double> {
  typedef double type __attribute__((vector_size(32)));
  typedef int64_t I __attribute__((vector_size(32)));
};

template <class T>
struct Bits;
template <>
struct Bits<float> {
  using I = int32_t;
  static constexpr float kShift = 12582912.0f;  // 1.5 * 2^23: x + kShift rounds x to an integer
  static constexpr int kMantissa = 23, kBias = 127;
};
template <>
struct Bits<double> {
  using I = int64_t;
  static constexpr double kShift = 6755399441055744.0;  // 1.5 * 2^52
  static constexpr int kMantissa = 52, kBias = 1023;
};

// The exp below is written once over V, either the scalar T (tails) or HalfVec<T>::type
// (the vector loops, and whatever the build's instruction set makes of them); IntOf is V's
// integer counterpart.
template <class T, class V>
using IntOf =
    std::conditional_t<std::is_same_v<V, T>, typename Bits<T>::I, typename HalfVec<T>::I>;

template <class T, class V>
TGC_INLINE V splat(T c) {
  if constexpr (std::is_same_v<V, T>) return c;
  else return V{} + c;
}
// op(a, b) on the two 16-byte halves of 32-byte vectors, each as its own vector: the
// portable (SSE2) build has 16-byte vectors only, and GCC lowers a 32-byte vector `?:` there
// element by element (also when written as and/andnot/or, which it folds back into a `?:`).
template <class V, class Op>
TGC_INLINE V byHalves(V a, V b, Op op) {
  using E = std::remove_cvref_t<decltype(a[0])>;
  typedef E Half __attribute__((vector_size(16)));
  struct Pair {
    Half lo, hi;
  };
  const Pair pa = std::bit_cast<Pair>(a), pb = std::bit_cast<Pair>(b);
  return std::bit_cast<V>(Pair{op(pa.lo, pb.lo), op(pa.hi, pb.hi)});
}

// max(x, lo) and min(x, hi) that keep a NaN x (and ignore a NaN lo resp. hi). GCC makes a
// vector `?:` a compare and a blend, two instructions on the FMA ports, where the exp is bound;
// in the AVX2 build (kAvx2) one vmaxps/vminps does it (x as the second operand, which they
// return when either is NaN). Inline asm, because the intrinsics cannot be named in a template
// that the portable build instantiates too; kAvx2 code only runs inside target("avx2,fma")
// functions.
template <bool kAvx2, class V>
TGC_INLINE V atLeast(V x, V lo) {
  if constexpr (kAvx2 && sizeof(V) == 32) {
    V r;
    if constexpr (sizeof(x[0]) == 4) asm("vmaxps %2, %1, %0" : "=x"(r) : "x"(lo), "xm"(x));
    else asm("vmaxpd %2, %1, %0" : "=x"(r) : "x"(lo), "xm"(x));
    return r;
  } else if constexpr (sizeof(V) == 32) {
    return byHalves(x, lo, [](auto a, auto b) { return a < b ? b : a; });
  } else {
    return x < lo ? lo : x;
  }
}
template <bool kAvx2, class V>
TGC_INLINE V atMost(V x, V hi) {
  if constexpr (kAvx2 && sizeof(V) == 32) {
    V r;
    if constexpr (sizeof(x[0]) == 4) asm("vminps %2, %1, %0" : "=x"(r) : "x"(hi), "xm"(x));
    else asm("vminpd %2, %1, %0" : "=x"(r) : "x"(hi), "xm"(x));
    return r;
  } else if constexpr (sizeof(V) == 32) {
    return byHalves(x, hi, [](auto a, auto b) { return a > b ? b : a; });
  } else {
    return x > hi ? hi : x;
  }
}
template <class T, class V>
TGC_INLINE V load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T, class V>
TGC_INLINE void store(T* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

// An integer-valued n (|n| < 2^22) as an integer, through the bits of n + kShift.
template <class T, class V>
TGC_INLINE IntOf<T, V> toInt(V n) {
  using I = IntOf<T, V>;
  return std::bit_cast<I>(n + Bits<T>::kShift) - std::bit_cast<I>(splat<T, V>(Bits<T>::kShift));
}
// 2^e for an integer e in the normal range.
template <class T, class V>
TGC_INLINE V pow2(IntOf<T, V> e) {
  return std::bit_cast<V>((e + Bits<T>::kBias) << Bits<T>::kMantissa);
}
// 2^n from k = n + kShift (n integer, 2^n normal): the low bits of k hold n, so one add and a
// shift, the bias and the shift's bits folded into one constant.
template <class T, class V>
TGC_INLINE V pow2Shifted(V k) {
  using I = typename Bits<T>::I;
  constexpr I kRebias = Bits<T>::kBias - std::bit_cast<I>(Bits<T>::kShift);
  return std::bit_cast<V>((std::bit_cast<IntOf<T, V>>(k) + kRebias) << Bits<T>::kMantissa);
}

// e^r for x = n ln2 + r with n = round(x / ln 2) (returned in n, and as k = n + kShift) and r
// split in two parts (Cody-Waite; n * hi is exact), |r| <= ln2/2. The callers clamp x first
// and apply 2^n.
template <class T, class V>
TGC_INLINE V expReduced(V x, V& n, V& k) {
  constexpr bool f32 = sizeof(T) == 4;
  constexpr T ln2hi = f32 ? T(0.693359375) : T(0.693145751953125);
  constexpr T ln2lo = f32 ? T(-2.12194440e-4) : T(1.42860682030941723212e-6);
  constexpr T shift = Bits<T>::kShift;
  k = x * T(1.4426950408889634) + shift;
  n = k - shift;
  const V r = (x - n * ln2hi) - n * ln2lo;
  V p;
  if constexpr (f32) {
    // Cephes expf: e^r = 1 + r + r^2 P(r).
    p = splat<T, V>(T(1.9875691500E-4));
    p = p * r + T(1.3981999507E-3);
    p = p * r + T(8.3334519073E-3);
    p = p * r + T(4.1665795894E-2);
    p = p * r + T(1.6666665459E-1);
    p = p * r + T(5.0000001201E-1);
    p = p * (r * r) + r + T(1);
  } else {
    // Taylor to degree 13: the remainder |r|^14 / 14! < 5e-18 for |r| <= ln2/2.
    constexpr auto kInvFact = [] {
      std::array<double, 14> c{};
      c[0] = 1;
      for (int i = 1; i < 14; ++i) c[i] = c[i - 1] / i;
      return c;
    }();
    p = splat<T, V>(T(kInvFact[13]));
    for (int i = 12; i >= 0; --i) p = p * r + T(kInvFact[i]);
  }
  return p;
}

// exp(x) = 2^n e^r, with 2^n applied as 2^n1 * 2^n2 (n1 = round(n / 2)) so that results near
// overflow or in the subnormal range round once. x is clamped first (exp is 0 resp. inf
// beyond the clamp); NaN passes the clamps and gives NaN. Branch-free, so loops of it
// vectorize.
template <class T, class V = T, bool kAvx2 = false>
TGC_INLINE V expOne(V x) {
  constexpr bool f32 = sizeof(T) == 4;
  constexpr T lo = f32 ? T(-105) : T(-746), hi = f32 ? T(89) : T(710);
  constexpr T shift = Bits<T>::kShift;
  x = atMost<kAvx2>(atLeast<kAvx2>(x, splat<T, V>(lo)), splat<T, V>(hi));
  V n, k;
  const V p = expReduced<T, V>(x, n, k);
  const V n1 = ((n * T(0.5)) + shift) - shift;
  return p * pow2<T, V>(toInt<T, V>(n1)) * pow2<T, V>(toInt<T, V>(n - n1));
}

// exp(x) for the arguments the loss kernels take, x - max and x - lse, which are <= 0: one
// 2^n scaling instead of expOne's two, because x is first clamped to where e^x is still a
// normal number (e^-87 ~ 1.6e-38 in f32, e^-708 in f64). Below that the result is that
// smallest normal instead of a subnormal or 0: off by < 2e-38 (f32) absolutely, which no sum
// with exp(0) = 1 in it, nor a probability, can tell. Above 88 (f32; 709 f64: only with an lse
// that is not the forward's) it gives e^88. NaN passes the clamps and gives NaN. About a fifth
// fewer instructions than expOne in the loops that are bound by it. kBelowZero: the caller
// guarantees x <= 0 or NaN (x - m, m the max so far), so the upper clamp is left out.
template <class T, class V = T, bool kAvx2 = false, bool kBelowZero = false>
TGC_INLINE V expNonPositive(V x) {
  constexpr bool f32 = sizeof(T) == 4;
  constexpr T lo = f32 ? T(-87) : T(-708), hi = f32 ? T(88) : T(709);
  x = atLeast<kAvx2>(x, splat<T, V>(lo));
  if constexpr (!kBelowZero) x = atMost<kAvx2>(x, splat<T, V>(hi));
  V n, k;
  const V p = expReduced<T, V>(x, n, k);
  return p * pow2Shifted<T, V>(k);
}

template <class T>
TGC_INLINE T sumLanes(T (&a)[kLanes<T>]) {
  for (int w = kLanes<T> / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) a[l] += a[l + w];
  return a[0];
}
// The kLanes lanes of two HalfVecs as an array (lane l of v[h] is lane h * L/2 + l).
template <class T, class V>
TGC_INLINE void toLanes(const V (&v)[2], T (&a)[kLanes<T>]) {
  std::memcpy(a, v, sizeof a);
}
// The largest of the two vectors' lanes (the lanes are never NaN: maxima of non-NaN values).
template <class T, class V, bool kAvx2>
TGC_INLINE T maxOf(const V (&v)[2]) {
  constexpr int H = kLanes<T> / 2;
  const V both = atLeast<kAvx2>(v[0], v[1]);
  T m = both[0];
  for (int l = 1; l < H; ++l) m = both[l] > m ? both[l] : m;
  return m;
}

int64_t targetAt(const void* targets, DType t, int64_t r) {
  return t == DType::i32 ? static_cast<const int32_t*>(targets)[r]
                         : static_cast<const int64_t*>(targets)[r];
}

// ---- softmax_cross_entropy ----------------------------------------------------------------

// Elements per block of the forward's row sweep: 2 KB, which stays in L1 between the block's
// max sweep and its exp sweep.
template <class T>
inline constexpr int64_t kSceBlock = 2048 / static_cast<int64_t>(sizeof(T));

// One row of the forward. The row is read from memory once, in blocks: each block's max and
// logit sum (sweep 1), then its exp(x - m) summed (sweep 2, from L1), where m is the running
// max of the blocks so far; when a block raises m, the sums so far are scaled by exp(m_old -
// m_new) (online log-sum-exp). Computing exp while the next block streams in hides most of
// one behind the other, which two sweeps over the whole row did not.
// m starts at the lowest finite value, not -inf, so that x - m is never -inf - -inf.
template <class T, bool kAvx2>
TGC_INLINE void sceForwardRow(const CrossEntropyShape& s, const T* x, T& total, T& max,
                              T& logSum) {
  using V = typename HalfVec<T>::type;
  constexpr int L = kLanes<T>, H = L / 2;
  constexpr T inf = std::numeric_limits<T>::infinity();
  const int64_t v = s.v, full = v / L * L;
  V sx[2] = {}, se[2] = {};
  T m = std::numeric_limits<T>::lowest(), rowMax = -inf;
  // A block (or the tail) whose max is bm: raises m to it if higher, returning the factor
  // exp(m_old - m_new) for the sums so far (1 if m stays).
  auto raise = [&](T bm) {
    rowMax = bm > rowMax ? bm : rowMax;
    if (!(bm > m)) return T(1);
    const T f = expNonPositive<T>(m - bm);
    m = bm;
    return f;
  };
  for (int64_t b = 0; b < full; b += kSceBlock<T>) {
    const int64_t e = std::min(b + kSceBlock<T>, full);
    V mv[2] = {splat<T, V>(-inf), splat<T, V>(-inf)};
    for (int64_t i = b; i < e; i += L)
      for (int h = 0; h < 2; ++h) {
        const V xv = load<T, V>(x + i + h * H);
        mv[h] = atLeast<kAvx2>(mv[h], xv);  // a NaN x leaves the max as it was
        sx[h] += xv;
      }
    const T f = raise(maxOf<T, V, kAvx2>(mv));
    if (f != T(1))
      for (int h = 0; h < 2; ++h) se[h] *= f;
    // Scalars splatted once, outside the loop (the portable build otherwise broadcasts them
    // through the stack every step).
    const V mb = splat<T, V>(m);
    for (int64_t i = b; i < e; i += L) {
      // The block after next, one line per step, while this one is in exps.
      __builtin_prefetch(x + i + 2 * kSceBlock<T>);
      for (int h = 0; h < 2; ++h)
        se[h] += expNonPositive<T, V, kAvx2, true>(load<T, V>(x + i + h * H) - mb);
    }
  }
  T sxl[L], sel[L];
  toLanes<T, V>(sx, sxl);
  toLanes<T, V>(se, sel);
  if (full < v) {  // the tail, element full + l into lane l
    T tm = -inf;
    for (int64_t i = full; i < v; ++i) tm = x[i] > tm ? x[i] : tm;
    const T f = raise(tm);
    for (int l = 0; l < L; ++l) sel[l] *= f;
    for (int64_t i = full; i < v; ++i) {
      sxl[i - full] += x[i];
      sel[i - full] += expNonPositive<T>(x[i] - m);
    }
  }
  total = sumLanes<T>(sxl);
  // A row of -inf only has no finite max: lse = -inf (the reference's is NaN) and the loss
  // NaN, as the reference's.
  max = rowMax == -inf ? -inf : m;
  logSum = std::log(sumLanes<T>(sel));
}

template <class T, bool kAvx2>
TGC_INLINE void sceForwardRows(const CrossEntropyShape& s, const T* logits, const void* targets,
                               T* loss, T* lse, int64_t begin, int64_t end) {
  const int64_t v = s.v;
  const T eps = static_cast<T>(s.smoothing);
  for (int64_t r = begin; r < end; ++r) {
    const T* x = logits + r * v;
    T total, m, logSum;
    sceForwardRow<T, kAvx2>(s, x, total, m, logSum);
    const int64_t t = targetAt(targets, s.targetType, r);
    const int64_t tt = t < 0 || t >= v ? 0 : t;
    lse[r] = m + logSum;
    // (m - x) + logSum rather than lse - x: no cancellation when the logits are large.
    const T nll = (m - x[tt]) + logSum, smooth = (m - total / static_cast<T>(v)) + logSum;
    loss[r] = t < 0 || t >= v ? T(0) : (T(1) - eps) * nll + eps * smooth;
  }
}

// One streaming pass per row: dx = dloss * (exp(x - lse) - eps / V), as one FMA per element
// (p * g - g * eps / V), then the target element's -(1 - eps) * dloss.
template <class T, bool kAvx2>
TGC_INLINE void sceBackwardRows(const CrossEntropyShape& s, const T* logits, const void* targets,
                                const T* lse, const T* dloss, T* dlogits, int64_t begin,
                                int64_t end) {
  using V = typename HalfVec<T>::type;
  constexpr int L = kLanes<T>, H = L / 2;
  const int64_t v = s.v, full = v / L * L;
  const T eps = static_cast<T>(s.smoothing), uniform = eps / static_cast<T>(v);
  for (int64_t r = begin; r < end; ++r) {
    const T* x = logits + r * v;
    T* dx = dlogits + r * v;
    const int64_t t = targetAt(targets, s.targetType, r);
    const T g = dloss[r], l = lse[r], gu = g * uniform;
    // Zeros without the exps where the loss is constant (target out of range) or masked out
    // (dloss 0: the padding tokens of a training batch).
    if (t < 0 || t >= v || g == T(0)) {
      std::fill(dx, dx + v, T(0));
      continue;
    }
    const V lv = splat<T, V>(l), gv = splat<T, V>(g), guv = splat<T, V>(gu);  // as the forward's
    for (int64_t i = 0; i < full; i += L) {
      // 4 KB ahead in both streams, one line each per step (measured a few % faster than
      // leaving it to the hardware prefetcher).
      __builtin_prefetch(x + i + 2 * kSceBlock<T>);
      __builtin_prefetch(dx + i + 2 * kSceBlock<T>, 1);
      for (int h = 0; h < 2; ++h) {
        const V p = expNonPositive<T, V, kAvx2>(load<T, V>(x + i + h * H) - lv);
        store<T, V>(dx + i + h * H, p * gv - guv);
      }
    }
    for (int64_t i = full; i < v; ++i) dx[i] = expNonPositive<T>(x[i] - l) * g - gu;
    dx[t] = g * (expNonPositive<T>(x[t] - l) - (T(1) - eps) - uniform);
  }
}
// ---- layer_norm_grad ------------------------------------------------------------------------

// Rows of block b: dx, and the block's partial dgamma (pg) and dbeta (pb) sums.
template <class T>
TGC_INLINE void lnBackwardBlock(const LayerNormShape& s, const T* xs, const T* gamma,
                                const T* dys, T* dxs, T* pg, T* pb, int64_t b) {
  constexpr int L = kLanes<T>;
  const int64_t d = s.d, full = d / L * L;
  const T invD = T(1) / static_cast<T>(d);
  std::fill(pg, pg + d, T(0));
  std::fill(pb, pb + d, T(0));
  const int64_t end = std::min(s.rows, (b + 1) * kLnBlockRows);
  for (int64_t r = b * kLnBlockRows; r < end; ++r) {
    const T *x = xs + r * d, *dy = dys + r * d;
    T* dx = dxs + r * d;
    T a[L] = {};
    for (int64_t i = 0; i < full; i += L)
      for (int l = 0; l < L; ++l) a[l] += x[i + l];
    for (int64_t i = full; i < d; ++i) a[i - full] += x[i];
    const T mean = sumLanes<T>(a) * invD;
    T q[L] = {};
    for (int64_t i = 0; i < full; i += L)
      for (int l = 0; l < L; ++l) q[l] += (x[i + l] - mean) * (x[i + l] - mean);
    for (int64_t i = full; i < d; ++i) q[i - full] += (x[i] - mean) * (x[i] - mean);
    const T rstd = T(1) / std::sqrt(sumLanes<T>(q) * invD + static_cast<T>(s.eps));
    // Sums of g = dy * gamma and g * xhat; the block's dgamma and dbeta partials.
    T sg[L] = {}, sgx[L] = {};
    for (int64_t i = 0; i < full; i += L)
      for (int l = 0; l < L; ++l) {
        const T xh = (x[i + l] - mean) * rstd, g = dy[i + l] * gamma[i + l];
        sg[l] += g;
        sgx[l] += g * xh;
        pg[i + l] += dy[i + l] * xh;
        pb[i + l] += dy[i + l];
      }
    for (int64_t i = full; i < d; ++i) {
      const T xh = (x[i] - mean) * rstd, g = dy[i] * gamma[i];
      sg[i - full] += g;
      sgx[i - full] += g * xh;
      pg[i] += dy[i] * xh;
      pb[i] += dy[i];
    }
    const T meanG = sumLanes<T>(sg) * invD, meanGX = sumLanes<T>(sgx) * invD;
    for (int64_t i = 0; i < d; ++i)
      dx[i] = rstd * (dy[i] * gamma[i] - meanG - (x[i] - mean) * rstd * meanGX);
  }
}

// ---- the two builds -------------------------------------------------------------------------

template <class T>
struct Kernels {
  void (*sceForward)(const CrossEntropyShape&, const T*, const void*, T*, T*, int64_t, int64_t);
  void (*sceBackward)(const CrossEntropyShape&, const T*, const void*, const T*, const T*, T*,
                      int64_t, int64_t);
  void (*lnBlock)(const LayerNormShape&, const T*, const T*, const T*, T*, T*, T*, int64_t);
  void (*exp)(const T*, T*, int64_t);
  void (*expNonPositive)(const T*, T*, int64_t);
};

// exp over n values, on vectors then the scalar tail: the code paths the kernels run.
template <class T, bool kAvx2>
TGC_INLINE void expRange(const T* x, T* y, int64_t n) {
  using V = typename HalfVec<T>::type;
  constexpr int H = kLanes<T> / 2;
  int64_t i = 0;
  for (; i + H <= n; i += H) store<T, V>(y + i, expOne<T, V, kAvx2>(load<T, V>(x + i)));
  for (; i < n; ++i) y[i] = expOne<T>(x[i]);
}
template <class T, bool kAvx2>
TGC_INLINE void expNonPositiveRange(const T* x, T* y, int64_t n) {
  using V = typename HalfVec<T>::type;
  constexpr int H = kLanes<T> / 2;
  int64_t i = 0;
  for (; i + H <= n; i += H) store<T, V>(y + i, expNonPositive<T, V, kAvx2>(load<T, V>(x + i)));
  for (; i < n; ++i) y[i] = expNonPositive<T>(x[i]);
}

// One set of entry points per (instruction set, dtype); the always_inline bodies above are
// compiled into each with its target.
#define TGC_LOSS_KERNELS(ATTR, NAME, T, AVX2)                                                   \
  ATTR void NAME##Fwd(const CrossEntropyShape& s, const T* x, const void* t, T* loss, T* lse,   \
                      int64_t b, int64_t e) {                                                   \
    sceForwardRows<T, AVX2>(s, x, t, loss, lse, b, e);                                          \
  }                                                                                             \
  ATTR void NAME##Bwd(const CrossEntropyShape& s, const T* x, const void* t, const T* lse,      \
                      const T* dl, T* dx, int64_t b, int64_t e) {                               \
    sceBackwardRows<T, AVX2>(s, x, t, lse, dl, dx, b, e);                                       \
  }                                                                                             \
  ATTR void NAME##Ln(const LayerNormShape& s, const T* x, const T* gm, const T* dy, T* dx,      \
                     T* pg, T* pb, int64_t b) {                                                 \
    lnBackwardBlock<T>(s, x, gm, dy, dx, pg, pb, b);                                            \
  }                                                                                             \
  ATTR void NAME##Exp(const T* x, T* y, int64_t n) { expRange<T, AVX2>(x, y, n); }              \
  ATTR void NAME##ExpNp(const T* x, T* y, int64_t n) { expNonPositiveRange<T, AVX2>(x, y, n); } \
  const Kernels<T> NAME = {NAME##Fwd, NAME##Bwd, NAME##Ln, NAME##Exp, NAME##ExpNp};

TGC_LOSS_KERNELS(, portableF32, float, false)
TGC_LOSS_KERNELS(, portableF64, double, false)
TGC_LOSS_KERNELS(TGC_AVX2, avx2F32, float, true)
TGC_LOSS_KERNELS(TGC_AVX2, avx2F64, double, true)
#undef TGC_LOSS_KERNELS

bool cpuHasAvx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

LossIsa& currentIsa() {
  static LossIsa isa = cpuHasAvx2() ? LossIsa::Avx2 : LossIsa::Portable;
  return isa;
}

template <class T>
const Kernels<T>& kernels() {
  const bool avx2 = currentIsa() == LossIsa::Avx2;
  if constexpr (sizeof(T) == 4) return avx2 ? avx2F32 : portableF32;
  else return avx2 ? avx2F64 : portableF64;
}

void checkFloat(DType d, const char* what) {
  if (d != DType::f32 && d != DType::f64)
    throw std::invalid_argument(std::string(what) + ": only f32 and f64 are supported");
}

// Rows per chunk of the dynamic split: threads take chunks from a shared counter, so a thread
// that another job slows down takes fewer rows instead of holding up the launch (each row is
// independent: results do not depend on the split). At most 16 rows (8000 logits each), and
// at least 4 chunks per thread so that the work evens out.
int64_t rowChunk(int64_t rows, const ThreadPool& pool) {
  return std::clamp<int64_t>(rows / (4 * pool.numThreads()), 1, 16);
}

template <class T>
void sceForward(const CrossEntropyShape& s, const void* logits, const void* targets, void* loss,
                void* lse, ThreadPool& pool) {
  const auto& k = kernels<T>();
  pool.parallelForDynamic(s.rows, rowChunk(s.rows, pool), [&](int64_t b, int64_t e) {
    k.sceForward(s, static_cast<const T*>(logits), targets, static_cast<T*>(loss),
                 static_cast<T*>(lse), b, e);
  });
}

template <class T>
void sceBackward(const CrossEntropyShape& s, const void* logits, const void* targets,
                 const void* lse, const void* dloss, void* dlogits, ThreadPool& pool) {
  const auto& k = kernels<T>();
  pool.parallelForDynamic(s.rows, rowChunk(s.rows, pool), [&](int64_t b, int64_t e) {
    k.sceBackward(s, static_cast<const T*>(logits), targets, static_cast<const T*>(lse),
                  static_cast<const T*>(dloss), static_cast<T*>(dlogits), b, e);
  });
}

template <class T>
void lnBackward(const LayerNormShape& s, const void* x, const void* gamma, const void* dy,
                void* dx, void* dgamma, void* dbeta, ThreadPool& pool) {
  const auto& k = kernels<T>();
  const int64_t d = s.d, blocks = (s.rows + kLnBlockRows - 1) / kLnBlockRows;
  // partial[b] = the block's dgamma sums then its dbeta sums.
  std::vector<T> partial(static_cast<size_t>(blocks * 2 * d));
  pool.parallelForDynamic(blocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; ++blk) {
      T* p = partial.data() + blk * 2 * d;
      k.lnBlock(s, static_cast<const T*>(x), static_cast<const T*>(gamma),
                static_cast<const T*>(dy), static_cast<T*>(dx), p, p + d, blk);
    }
  });
  T* dg = static_cast<T*>(dgamma);
  T* db = static_cast<T*>(dbeta);
  // Blocks summed in order, in double: the same bits for any thread count.
  pool.parallelFor(d, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      double sg = 0, sb = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        sg += partial[static_cast<size_t>(blk * 2 * d + j)];
        sb += partial[static_cast<size_t>(blk * 2 * d + d + j)];
      }
      dg[j] = static_cast<T>(sg);
      db[j] = static_cast<T>(sb);
    }
  }, 64);
}

}  // namespace

void softmaxCrossEntropyForward(const CrossEntropyShape& s, const void* logits,
                                const void* targets, void* loss, void* lse, ThreadPool& pool) {
  checkFloat(s.dtype, "softmax_cross_entropy");
  if (s.dtype == DType::f32) sceForward<float>(s, logits, targets, loss, lse, pool);
  else sceForward<double>(s, logits, targets, loss, lse, pool);
}

void softmaxCrossEntropyBackward(const CrossEntropyShape& s, const void* logits,
                                 const void* targets, const void* lse, const void* dloss,
                                 void* dlogits, ThreadPool& pool) {
  checkFloat(s.dtype, "softmax_cross_entropy_grad");
  if (s.dtype == DType::f32) sceBackward<float>(s, logits, targets, lse, dloss, dlogits, pool);
  else sceBackward<double>(s, logits, targets, lse, dloss, dlogits, pool);
}

void layerNormBackward(const LayerNormShape& s, const void* x, const void* gamma, const void* dy,
                       void* dx, void* dgamma, void* dbeta, ThreadPool& pool) {
  checkFloat(s.dtype, "layer_norm_grad");
  if (s.d == 0) return;
  if (s.dtype == DType::f32) lnBackward<float>(s, x, gamma, dy, dx, dgamma, dbeta, pool);
  else lnBackward<double>(s, x, gamma, dy, dx, dgamma, dbeta, pool);
}

namespace {
CrossEntropyShape crossEntropyShapeOf(const Node& n) {
  const TensorType& logits = n.operand(0)->type();
  const int64_t v = logits.shape.back();
  return {libraryFloatType(n), n.operand(1)->type().dtype, v == 0 ? 0 : logits.numel() / v, v,
          n.attrFloat("smoothing")};
}
}  // namespace

// softmax_cross_entropy(logits, targets) -> loss, lse
LibraryKernel bindSoftmaxCrossEntropy(const Node& n) {
  const CrossEntropyShape s = crossEntropyShapeOf(n);
  return [s](const void* const* in, void* const* out, ThreadPool& pool) {
    softmaxCrossEntropyForward(s, in[0], in[1], out[0], out[1], pool);
  };
}

// softmax_cross_entropy_grad(logits, targets, lse, dloss) -> dlogits
LibraryKernel bindSoftmaxCrossEntropyGrad(const Node& n) {
  const CrossEntropyShape s = crossEntropyShapeOf(n);
  return [s](const void* const* in, void* const* out, ThreadPool& pool) {
    softmaxCrossEntropyBackward(s, in[0], in[1], in[2], in[3], out[0], pool);
  };
}

// layer_norm_grad(x, gamma, dy) -> dx, dgamma, dbeta
LibraryKernel bindLayerNormGrad(const Node& n) {
  const TensorType& x = n.operand(0)->type();
  const int64_t d = x.shape.back();
  const LayerNormShape s{libraryFloatType(n), d == 0 ? 0 : x.numel() / d, d, n.attrFloat("eps")};
  return [s](const void* const* in, void* const* out, ThreadPool& pool) {
    layerNormBackward(s, in[0], in[1], in[2], out[0], out[1], out[2], pool);
  };
}

LossIsa lossIsa() { return currentIsa(); }

void setLossIsa(LossIsa isa) {
  if (isa == LossIsa::Avx2 && !cpuHasAvx2())
    throw std::runtime_error("setLossIsa: this CPU has no AVX2+FMA");
  currentIsa() = isa;
}

void lossExp(DType dtype, const void* x, void* y, int64_t n, bool nonPositive) {
  checkFloat(dtype, "lossExp");
  if (dtype == DType::f32) {
    const auto& k = kernels<float>();
    (nonPositive ? k.expNonPositive : k.exp)(static_cast<const float*>(x), static_cast<float*>(y), n);
  } else {
    const auto& k = kernels<double>();
    (nonPositive ? k.expNonPositive : k.exp)(static_cast<const double*>(x), static_cast<double*>(y), n);
  }
}

}  // namespace tgc::codegen
