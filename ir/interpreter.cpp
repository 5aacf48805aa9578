// The reference interpreter. Every kernel is a plain loop over row-major indices; speed is
// not a goal, being obviously right is. Conventions shared by all kernels:
//
// - Floats: each op computes in double and rounds its result once to the result dtype
//   (Tensor::setF: f32, bf16 and f16 round to nearest even; bf16/f16 go through f32). With
//   promote_to_f64 every float value is an f64 tensor and nothing is rounded.
// - Integers (i32, i64): computed exactly in int64 with two's-complement wrapping, so i64
//   values beyond 2^53 survive and i32 results wrap modulo 2^32 (as in numpy).
// - Broadcasting is numpy's: shapes align from the right and a size-1 dim reads index 0.
// - Data movement (reshape, transpose, slice, ...) copies element bytes, exact for every dtype.
// - Bad data (integer division by zero, an index out of range, a missing input) throws IRError
//   whose message starts with the node's description ("div %q (i32[4], i32[4]): ...").
#include "ir/interpreter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <unordered_map>

#include "ir/interp_fused.h"
#include "ir/philox.h"

namespace tgc {
namespace {

// ---- helpers ---------------------------------------------------------------------------------

[[noreturn]] void fail(const Node& n, const std::string& msg) {
  throw IRError(fmt::format("{}: {}", describeNode(n), msg));
}

// Row-major multi-index of flat index `flat` in `shape`.
std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

// The flat index in a tensor of shape `in` that numpy broadcasting reads for the output
// multi-index `out` (in.size() <= out.size()): dims align from the right, size-1 dims of
// `in` always read index 0, and missing leading dims are ignored.
int64_t broadcastSource(const std::vector<int64_t>& out, const Shape& in) {
  size_t lead = out.size() - in.size();
  int64_t flat = 0;
  for (size_t d = 0; d < in.size(); ++d) flat = flat * in[d] + (in[d] == 1 ? 0 : out[lead + d]);
  return flat;
}

// dst[di] = src[si], bytes copied; both tensors have the same dtype.
void copyElem(Tensor& dst, int64_t di, const Tensor& src, int64_t si) {
  size_t sz = dtypeSize(dst.dtype());
  std::memcpy(static_cast<char*>(dst.data()) + di * sz,
              static_cast<const char*>(src.data()) + si * sz, sz);
}

// Two's-complement wrapping integer arithmetic (signed overflow is undefined in C++).
int64_t wrapAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wrapSub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
int64_t wrapMul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
int64_t wrapNeg(int64_t a) { return wrapSub(0, a); }

// NaN-propagating max and min (std::max would return whichever operand comes first).
double nanMax(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a < b ? b : a;
}
double nanMin(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return b < a ? b : a;
}

double product(const Shape& s, size_t from, size_t to) {
  double p = 1;
  for (size_t i = from; i < to; ++i) p *= static_cast<double>(s[i]);
  return p;
}

// The dtype a value has at run time: every float becomes f64 under promote_to_f64.
TensorType runtimeType(const TensorType& t, bool promote) {
  if (promote && isFloat(t.dtype)) return TensorType{DType::f64, t.shape};
  return t;
}

Tensor widenToF64(const Tensor& t) {
  Tensor r(TensorType{DType::f64, t.shape()});
  for (int64_t i = 0; i < t.numel(); ++i) r.setF(i, t.getF(i));
  return r;
}

using Operands = std::vector<const Tensor*>;

// ---- sources ---------------------------------------------------------------------------------

void constantKernel(const Node& n, Tensor& out) {
  const auto& v = n.attrFloats("value");
  if (v.size() != 1 && static_cast<int64_t>(v.size()) != out.numel())
    fail(n, fmt::format("value has {} elements for {} results", v.size(), out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) out.setF(i, v.size() == 1 ? v[0] : v[i]);
}

void iotaKernel(const Node& n, Tensor& out) {
  int64_t axis = normalizeAxis(n.attrInt("axis"), static_cast<int64_t>(out.shape().size()));
  for (int64_t i = 0; i < out.numel(); ++i) out.setI(i, unravel(i, out.shape())[axis]);
}

void philoxKernel(const Operands& in, Tensor& out) {
  // The i64 seed and offset are used as their 64-bit patterns. The f32 value is in [0, 1);
  // rounded to bf16 or f16 the values just below 1 become 1.0, as on every backend that
  // converts the f32 value.
  auto seed = static_cast<uint64_t>(in[0]->getI(0));
  auto offset = static_cast<uint64_t>(in[1]->getI(0));
  for (int64_t q = 0; 4 * q < out.numel(); ++q) {  // one Philox call for four elements
    std::array<float, 4> u = philoxUniformQuad(seed, offset, static_cast<uint64_t>(q));
    for (int64_t w = 0; w < 4 && 4 * q + w < out.numel(); ++w) out.setF(4 * q + w, u[w]);
  }
}

// ---- elementwise -----------------------------------------------------------------------------

template <class F>
void unaryFloat(const Tensor& x, Tensor& out, F f) {
  for (int64_t i = 0; i < out.numel(); ++i) out.setF(i, f(x.getF(i)));
}

double gelu(const Node& n, double x) {
  const std::string& mode = n.attrString("approximate");
  if (mode == "none") return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2));
  if (mode == "tanh") {
    constexpr double k = 0.7978845608028654;  // sqrt(2/pi)
    return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
  }
  fail(n, fmt::format("approximate must be \"none\" or \"tanh\", got \"{}\"", mode));
}

void castKernel(const Tensor& x, Tensor& out) {
  DType from = x.dtype(), to = out.dtype();
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (isFloat(from)) {
      // Float to int truncates toward zero and saturates (NaN gives 0); to bool is x != 0
      // (so NaN is true); float to float rounds to nearest even. All of that is setF.
      out.setF(i, x.getF(i));
    } else if (to == DType::f32) {
      out.setF(i, static_cast<float>(x.getI(i)));  // round the exact integer once
    } else if (isFloat(to)) {
      out.setF(i, static_cast<double>(x.getI(i)));
    } else {
      out.setI(i, x.getI(i));  // int to int wraps (i64 -> i32 keeps the low 32 bits)
    }
  }
}

// out[idx] = f(a[broadcast idx], b[broadcast idx]), with f given the two flat indices.
template <class F>
void broadcastLoop(const Shape& outShape, const Shape& a, const Shape& b, F f) {
  int64_t total = static_cast<int64_t>(product(outShape, 0, outShape.size()));
  for (int64_t i = 0; i < total; ++i) {
    auto idx = unravel(i, outShape);
    f(i, broadcastSource(idx, a), broadcastSource(idx, b));
  }
}

void arithKernel(const Node& n, const Operands& in, Tensor& out) {
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  OpKind op = n.op();
  if (isFloat(out.dtype())) {
    broadcastLoop(out.shape(), a.shape(), b.shape(), [&](int64_t o, int64_t i, int64_t j) {
      double x = a.getF(i), y = b.getF(j), r = 0;
      switch (op) {
        case OpKind::Add: r = x + y; break;
        case OpKind::Sub: r = x - y; break;
        case OpKind::Mul: r = x * y; break;
        case OpKind::Div: r = x / y; break;  // IEEE: x/0 is +-inf, 0/0 is NaN
        case OpKind::Pow: r = std::pow(x, y); break;
        case OpKind::Maximum: r = nanMax(x, y); break;
        case OpKind::Minimum: r = nanMin(x, y); break;
        default: fail(n, "not an arithmetic op");
      }
      out.setF(o, r);
    });
    return;
  }
  broadcastLoop(out.shape(), a.shape(), b.shape(), [&](int64_t o, int64_t i, int64_t j) {
    int64_t x = a.getI(i), y = b.getI(j), r = 0;
    switch (op) {
      case OpKind::Add: r = wrapAdd(x, y); break;
      case OpKind::Sub: r = wrapSub(x, y); break;
      case OpKind::Mul: r = wrapMul(x, y); break;
      case OpKind::Div:
        if (y == 0) fail(n, fmt::format("integer division by zero: element {} is {} / 0", o, x));
        // C++ division truncates toward zero; MIN / -1 overflows, so it wraps to MIN.
        r = y == -1 ? wrapNeg(x) : x / y;
        break;
      case OpKind::Maximum: r = std::max(x, y); break;
      case OpKind::Minimum: r = std::min(x, y); break;
      default: fail(n, fmt::format("{} needs float operands", opName(op)));
    }
    out.setI(o, r);
  });
}

void compareKernel(const Node& n, const Operands& in, Tensor& out) {
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  bool fl = isFloat(a.dtype());
  OpKind op = n.op();
  // Floats compare as IEEE doubles (any comparison with NaN is false, except ne);
  // integers and bools compare exactly.
  auto cmp = [op](auto x, auto y) {
    switch (op) {
      case OpKind::Eq: return x == y;
      case OpKind::Ne: return x != y;
      case OpKind::Lt: return x < y;
      case OpKind::Le: return x <= y;
      case OpKind::Gt: return x > y;
      case OpKind::Ge: return x >= y;
      default: return false;
    }
  };
  broadcastLoop(out.shape(), a.shape(), b.shape(), [&](int64_t o, int64_t i, int64_t j) {
    out.setI(o, fl ? cmp(a.getF(i), b.getF(j)) : cmp(a.getI(i), b.getI(j)));
  });
}

void logicalKernel(OpKind op, const Operands& in, Tensor& out) {
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  broadcastLoop(out.shape(), a.shape(), b.shape(), [&](int64_t o, int64_t i, int64_t j) {
    bool x = a.getI(i) != 0, y = b.getI(j) != 0;
    out.setI(o, op == OpKind::LogicalAnd ? (x && y) : (x || y));
  });
}

void whereKernel(const Operands& in, Tensor& out) {
  for (int64_t o = 0; o < out.numel(); ++o) {
    auto idx = unravel(o, out.shape());
    bool c = in[0]->getI(broadcastSource(idx, in[0]->shape())) != 0;
    const Tensor& src = c ? *in[1] : *in[2];
    copyElem(out, o, src, broadcastSource(idx, src.shape()));
  }
}

// ---- reductions ------------------------------------------------------------------------------

// For reduce_*: which input dims are reduced (axes may be negative).
std::vector<bool> reducedDims(const Node& n, int64_t rank) {
  std::vector<bool> r(rank, false);
  for (int64_t a : n.attrInts("axes")) r[normalizeAxis(a, rank)] = true;
  return r;
}

// The output flat index an input element contributes to: its index over the kept dims.
// keepdims only inserts size-1 dims, which never change a row-major flat index.
int64_t reducedIndex(const std::vector<int64_t>& idx, const Shape& in,
                     const std::vector<bool>& reduced) {
  int64_t flat = 0;
  for (size_t d = 0; d < in.size(); ++d)
    if (!reduced[d]) flat = flat * in[d] + idx[d];
  return flat;
}

void reduceKernel(const Node& n, const Tensor& x, Tensor& out) {
  OpKind op = n.op();
  auto reduced = reducedDims(n, static_cast<int64_t>(x.shape().size()));
  int64_t count = 1;  // elements per output
  for (size_t d = 0; d < reduced.size(); ++d)
    if (reduced[d]) count *= x.shape()[d];
  if (count == 0 && out.numel() > 0) {
    // Max has no value over nothing; an integer mean would divide by zero. A float mean
    // over nothing is 0/0 = NaN, as in numpy.
    if (op == OpKind::ReduceMax || (op == OpKind::ReduceMean && !isFloat(x.dtype())))
      fail(n, fmt::format("reduces over zero elements of {}", x.type().str()));
  }
  if (isFloat(x.dtype())) {
    double init = op == OpKind::ReduceMax ? -std::numeric_limits<double>::infinity() : 0.0;
    std::vector<double> acc(out.numel(), init);
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t o = reducedIndex(unravel(i, x.shape()), x.shape(), reduced);
      acc[o] = op == OpKind::ReduceMax ? nanMax(acc[o], x.getF(i)) : acc[o] + x.getF(i);
    }
    for (int64_t o = 0; o < out.numel(); ++o)
      out.setF(o, op == OpKind::ReduceMean ? acc[o] / static_cast<double>(count) : acc[o]);
    return;
  }
  int64_t init = op == OpKind::ReduceMax ? std::numeric_limits<int64_t>::min() : 0;
  std::vector<int64_t> acc(out.numel(), init);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t o = reducedIndex(unravel(i, x.shape()), x.shape(), reduced);
    acc[o] = op == OpKind::ReduceMax ? std::max(acc[o], x.getI(i)) : wrapAdd(acc[o], x.getI(i));
  }
  // The integer mean truncates toward zero (C++ integer division): mean([1, 2]) is 1 and
  // mean([-1, -2]) is -1.
  for (int64_t o = 0; o < out.numel(); ++o)
    out.setI(o, op == OpKind::ReduceMean ? acc[o] / count : acc[o]);
}

// Calls f(base, stride, len) for every row along `axis`: the row's elements are at flat
// indices base + j * stride for j < len.
template <class F>
void forEachRow(const Shape& s, int64_t axis, F f) {
  int64_t len = s[axis];
  auto stride = static_cast<int64_t>(product(s, axis + 1, s.size()));
  auto outer = static_cast<int64_t>(product(s, 0, axis));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < stride; ++in) f(o * len * stride + in, stride, len);
}

// softmax = exp(x - max) / sum(exp(x - max)); log_softmax = x - max - log(sum(exp(x - max))).
// Subtracting the row max keeps exp from overflowing. A row that is all -inf has max -inf,
// so x - max would be NaN: its softmax is defined as zeros (no mass anywhere, which is what
// a fully masked attention row should contribute) and its log_softmax as -inf. In a row with
// some -inf entries those entries get exactly 0 (softmax) and -inf (log_softmax). A NaN in a
// row makes the whole row NaN.
void softmaxKernel(const Node& n, const Tensor& x, Tensor& out) {
  bool logMode = n.op() == OpKind::LogSoftmax;
  int64_t axis = normalizeAxis(n.attrInt("axis"), static_cast<int64_t>(x.shape().size()));
  forEachRow(x.shape(), axis, [&](int64_t base, int64_t stride, int64_t len) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < len; ++j) m = nanMax(m, x.getF(base + j * stride));
    if (m == -std::numeric_limits<double>::infinity()) {
      for (int64_t j = 0; j < len; ++j)
        out.setF(base + j * stride, logMode ? -std::numeric_limits<double>::infinity() : 0.0);
      return;
    }
    double sum = 0;
    for (int64_t j = 0; j < len; ++j) sum += std::exp(x.getF(base + j * stride) - m);
    for (int64_t j = 0; j < len; ++j) {
      double v = x.getF(base + j * stride) - m;
      out.setF(base + j * stride, logMode ? v - std::log(sum) : std::exp(v) / sum);
    }
  });
}

// Over the last axis: mean, biased variance (divide by D, as in PyTorch's LayerNorm), then
// (x - mean) / sqrt(var + eps) * gamma + beta.
void layerNormKernel(const Node& n, const Operands& in, Tensor& out) {
  const Tensor& x = *in[0];
  const Tensor& gamma = *in[1];
  const Tensor& beta = *in[2];
  double eps = n.attrFloat("eps");
  int64_t d = x.shape().back();
  if (d == 0) return;
  for (int64_t row = 0; row < x.numel() / d; ++row) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mean += x.getF(row * d + j);
    mean /= static_cast<double>(d);
    for (int64_t j = 0; j < d; ++j)
      var += (x.getF(row * d + j) - mean) * (x.getF(row * d + j) - mean);
    var /= static_cast<double>(d);
    double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < d; ++j)
      out.setF(row * d + j, (x.getF(row * d + j) - mean) * inv * gamma.getF(j) + beta.getF(j));
  }
}

void rmsNormKernel(const Node& n, const Operands& in, Tensor& out) {
  const Tensor& x = *in[0];
  const Tensor& gamma = *in[1];
  const double eps = n.attrFloat("eps");
  const int64_t d = x.shape().back();
  if (d == 0) return;
  for (int64_t row = 0; row < x.numel() / d; ++row) {
    double sq = 0;
    for (int64_t j = 0; j < d; ++j) sq += x.getF(row * d + j) * x.getF(row * d + j);
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(d) + eps);
    for (int64_t j = 0; j < d; ++j) out.setF(row * d + j, x.getF(row * d + j) * inv * gamma.getF(j));
  }
}

// ---- matmul ----------------------------------------------------------------------------------

// out[b..., m, n] = sum_k A[b..., m, k] * B[b..., k, n], where A is a or a with its last two
// dims swapped (transpose_a), likewise B. The batch dims broadcast like numpy's, so an
// operand with fewer (or size-1) batch dims is reused across the others.
void matmulKernel(const Node& n, const Operands& in, Tensor& out) {
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  bool ta = n.attrBool("transpose_a"), tb = n.attrBool("transpose_b");
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  const Shape& os = out.shape();
  int64_t aRows = as[as.size() - 2], aCols = as.back();
  int64_t bRows = bs[bs.size() - 2], bCols = bs.back();
  int64_t m = os[os.size() - 2], nn = os.back(), k = ta ? aRows : aCols;
  Shape aBatch(as.begin(), as.end() - 2), bBatch(bs.begin(), bs.end() - 2);
  Shape oBatch(os.begin(), os.end() - 2);
  bool fl = isFloat(out.dtype());
  auto batches = static_cast<int64_t>(product(oBatch, 0, oBatch.size()));
  for (int64_t bi = 0; bi < batches; ++bi) {
    auto idx = unravel(bi, oBatch);
    int64_t aBase = broadcastSource(idx, aBatch) * aRows * aCols;
    int64_t bBase = broadcastSource(idx, bBatch) * bRows * bCols;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < nn; ++j) {
        double accF = 0;
        int64_t accI = 0;
        for (int64_t p = 0; p < k; ++p) {
          int64_t ai = aBase + (ta ? p * aCols + i : i * aCols + p);
          int64_t bj = bBase + (tb ? j * bCols + p : p * bCols + j);
          if (fl)
            accF += a.getF(ai) * b.getF(bj);
          else
            accI = wrapAdd(accI, wrapMul(a.getI(ai), b.getI(bj)));
        }
        int64_t o = (bi * m + i) * nn + j;
        if (fl)
          out.setF(o, accF);
        else
          out.setI(o, accI);
      }
    }
  }
}

// ---- data movement ---------------------------------------------------------------------------

void reshapeKernel(const Tensor& x, Tensor& out) {
  for (int64_t i = 0; i < out.numel(); ++i) copyElem(out, i, x, i);
}

// Result dim i is operand dim perm[i], so result index idx reads operand index with
// in[perm[i]] = idx[i].
void transposeKernel(const Node& n, const Tensor& x, Tensor& out) {
  const auto& perm = n.attrInts("perm");
  std::vector<int64_t> src(perm.size());
  for (int64_t o = 0; o < out.numel(); ++o) {
    auto idx = unravel(o, out.shape());
    for (size_t i = 0; i < perm.size(); ++i) src[perm[i]] = idx[i];
    copyElem(out, o, x, ravel(src, x.shape()));
  }
}

void broadcastKernel(const Tensor& x, Tensor& out) {
  for (int64_t o = 0; o < out.numel(); ++o)
    copyElem(out, o, x, broadcastSource(unravel(o, out.shape()), x.shape()));
}

void sliceKernel(const Node& n, const Tensor& x, Tensor& out) {
  int64_t axis = normalizeAxis(n.attrInt("axis"), static_cast<int64_t>(x.shape().size()));
  int64_t start = n.attrInt("start"), step = n.attrInt("step");
  for (int64_t o = 0; o < out.numel(); ++o) {
    auto idx = unravel(o, out.shape());
    idx[axis] = start + idx[axis] * step;
    copyElem(out, o, x, ravel(idx, x.shape()));
  }
}

void concatKernel(const Node& n, const Operands& in, Tensor& out) {
  int64_t axis = normalizeAxis(n.attrInt("axis"), static_cast<int64_t>(out.shape().size()));
  int64_t offset = 0;  // where the current operand starts along axis
  for (const Tensor* t : in) {
    for (int64_t i = 0; i < t->numel(); ++i) {
      auto idx = unravel(i, t->shape());
      idx[axis] += offset;
      copyElem(out, ravel(idx, out.shape()), *t, i);
    }
    offset += t->shape()[axis];
  }
}

// Row index `r` read from indices[j], checked against a table of `rows` rows.
int64_t checkedRow(const Node& n, const Tensor& indices, int64_t j, int64_t rows) {
  int64_t r = indices.getI(j);
  if (r < 0 || r >= rows)
    fail(n, fmt::format("index {} (at position {} of the indices) is out of range for a table "
                        "of {} rows",
                        r, j, rows));
  return r;
}

// out[j..., rest...] = table[indices[j...], rest...].
void gatherKernel(const Node& n, const Operands& in, Tensor& out) {
  const Tensor& table = *in[0];
  const Tensor& indices = *in[1];
  const Shape& ts = table.shape();
  auto rowSize = static_cast<int64_t>(product(ts, 1, ts.size()));
  for (int64_t j = 0; j < indices.numel(); ++j) {
    int64_t r = checkedRow(n, indices, j, ts[0]);
    for (int64_t e = 0; e < rowSize; ++e) copyElem(out, j * rowSize + e, table, r * rowSize + e);
  }
}

// The starts of a dynamic_update_slice, each checked: 0 <= start <= dim - update's dim.
std::vector<int64_t> checkedStarts(const Node& n, const Shape& x, const Shape& update, const Tensor& starts) {
  std::vector<int64_t> s(x.size());
  for (size_t d = 0; d < x.size(); ++d) s[d] = starts.getI(static_cast<int64_t>(d));
  if (std::string why = updateStartsError(x, update, s.data()); !why.empty()) fail(n, why);
  return s;
}

// out = x; out[starts + i] = update[i] for every index i of update.
void dynamicUpdateSliceKernel(const Node& n, const Operands& in, Tensor& out) {
  const Tensor &x = *in[0], &update = *in[1];
  const std::vector<int64_t> s = checkedStarts(n, x.shape(), update.shape(), *in[2]);
  for (int64_t i = 0; i < x.numel(); ++i) copyElem(out, i, x, i);
  const Shape& us = update.shape();
  std::vector<int64_t> idx(us.size(), 0);
  for (int64_t u = 0; u < update.numel(); ++u) {
    int64_t o = 0;
    for (size_t d = 0; d < us.size(); ++d) o = o * x.shape()[d] + s[d] + idx[d];
    copyElem(out, o, update, u);
    for (size_t d = us.size(); d-- > 0;)
      if (++idx[d] < us[d]) break;
      else idx[d] = 0;
  }
}

// out = zeros[rows, rest...]; out[indices[j...], rest...] += updates[j..., rest...]. Rows
// named several times accumulate all their updates (in double, rounded once at the end).
void scatterAddKernel(const Node& n, const Operands& in, Tensor& out) {
  const Tensor& indices = *in[0];
  const Tensor& updates = *in[1];
  const Shape& os = out.shape();
  auto rowSize = static_cast<int64_t>(product(os, 1, os.size()));
  bool fl = isFloat(out.dtype());
  std::vector<double> accF(fl ? out.numel() : 0, 0.0);
  std::vector<int64_t> accI(fl ? 0 : out.numel(), 0);
  for (int64_t j = 0; j < indices.numel(); ++j) {
    int64_t r = checkedRow(n, indices, j, os[0]);
    for (int64_t e = 0; e < rowSize; ++e) {
      int64_t o = r * rowSize + e, u = j * rowSize + e;
      if (fl)
        accF[o] += updates.getF(u);
      else
        accI[o] = wrapAdd(accI[o], updates.getI(u));
    }
  }
  for (int64_t o = 0; o < out.numel(); ++o) {
    if (fl)
      out.setF(o, accF[o]);
    else
      out.setI(o, accI[o]);
  }
}

// ---- dispatch --------------------------------------------------------------------------------

// Fills `out` (already typed and zeroed) for node n. One case per op and no default, so
// -Werror=switch stops the build until a new op in ops.def has a kernel here.
void compute(const Node& n, const Operands& in, std::vector<Tensor>& outs) {
  Tensor& out = outs.at(0);
  switch (n.op()) {
    case OpKind::Input: fail(n, "an input has no kernel; its value comes from run()'s inputs");
    case OpKind::Constant: return constantKernel(n, out);
    case OpKind::Iota: return iotaKernel(n, out);
    case OpKind::PhiloxUniform: return philoxKernel(in, out);

    case OpKind::Neg:
      if (isFloat(out.dtype())) return unaryFloat(*in[0], out, [](double x) { return -x; });
      for (int64_t i = 0; i < out.numel(); ++i) out.setI(i, wrapNeg(in[0]->getI(i)));
      return;
    case OpKind::Abs:
      if (isFloat(out.dtype()))
        return unaryFloat(*in[0], out, [](double x) { return std::fabs(x); });
      for (int64_t i = 0; i < out.numel(); ++i) {
        int64_t v = in[0]->getI(i);
        out.setI(i, v < 0 ? wrapNeg(v) : v);  // abs(MIN) wraps to MIN
      }
      return;
    case OpKind::Exp: return unaryFloat(*in[0], out, [](double x) { return std::exp(x); });
    case OpKind::Log: return unaryFloat(*in[0], out, [](double x) { return std::log(x); });
    case OpKind::Sqrt: return unaryFloat(*in[0], out, [](double x) { return std::sqrt(x); });
    case OpKind::Rsqrt: return unaryFloat(*in[0], out, [](double x) { return 1.0 / std::sqrt(x); });
    case OpKind::Tanh: return unaryFloat(*in[0], out, [](double x) { return std::tanh(x); });
    case OpKind::Erf: return unaryFloat(*in[0], out, [](double x) { return std::erf(x); });
    case OpKind::Sigmoid:
      return unaryFloat(*in[0], out, [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
    case OpKind::Silu:
      return unaryFloat(*in[0], out, [](double x) { return x / (1.0 + std::exp(-x)); });
    case OpKind::Relu:
      // NaN stays NaN; -0 becomes +0.
      return unaryFloat(*in[0], out, [](double x) { return std::isnan(x) || x > 0 ? x : 0.0; });
    case OpKind::Gelu: return unaryFloat(*in[0], out, [&](double x) { return gelu(n, x); });
    case OpKind::LogicalNot:
      for (int64_t i = 0; i < out.numel(); ++i) out.setI(i, in[0]->getI(i) == 0);
      return;
    case OpKind::Cast: return castKernel(*in[0], out);

    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul:
    case OpKind::Div:
    case OpKind::Pow:
    case OpKind::Maximum:
    case OpKind::Minimum: return arithKernel(n, in, out);
    case OpKind::Eq:
    case OpKind::Ne:
    case OpKind::Lt:
    case OpKind::Le:
    case OpKind::Gt:
    case OpKind::Ge: return compareKernel(n, in, out);
    case OpKind::LogicalAnd:
    case OpKind::LogicalOr: return logicalKernel(n.op(), in, out);
    case OpKind::Where: return whereKernel(in, out);

    case OpKind::ReduceSum:
    case OpKind::ReduceMax:
    case OpKind::ReduceMean: return reduceKernel(n, *in[0], out);
    case OpKind::Softmax:
    case OpKind::LogSoftmax: return softmaxKernel(n, *in[0], out);
    case OpKind::LayerNorm: return layerNormKernel(n, in, out);
    case OpKind::RmsNorm: return rmsNormKernel(n, in, out);

    case OpKind::MatMul: return matmulKernel(n, in, out);

    case OpKind::Reshape: return reshapeKernel(*in[0], out);
    case OpKind::Transpose: return transposeKernel(n, *in[0], out);
    case OpKind::Broadcast: return broadcastKernel(*in[0], out);
    case OpKind::Slice: return sliceKernel(n, *in[0], out);
    case OpKind::Concat: return concatKernel(n, in, out);
    case OpKind::Gather: return gatherKernel(n, in, out);
    case OpKind::ScatterAdd: return scatterAddKernel(n, in, out);
    case OpKind::DynamicUpdateSlice: return dynamicUpdateSliceKernel(n, in, out);

    case OpKind::FusedAttention: return referenceFusedAttention(n, in, outs);
    case OpKind::FusedAttentionGrad: return referenceFusedAttentionGrad(n, in, outs);
    case OpKind::SoftmaxCrossEntropy: return referenceSoftmaxCrossEntropy(n, in, outs);
    case OpKind::SoftmaxCrossEntropyGrad: return referenceSoftmaxCrossEntropyGrad(n, in, outs);
    case OpKind::LayerNormGrad: return referenceLayerNormGrad(n, in, outs);
    case OpKind::QuantizedMatmul: return referenceQuantizedMatmul(n, in, outs);
  }
  fail(n, "unknown op");
}

}  // namespace

std::vector<Tensor> Interpreter::evalNode(const Node& n,
                                          const std::vector<const Tensor*>& operands) const {
  if (operands.size() != n.operands().size())
    fail(n, fmt::format("given {} operands, needs {}", operands.size(), n.operands().size()));
  // Check each operand against the node's operand type; under promote_to_f64 a float operand
  // of any float dtype is accepted and widened.
  std::vector<Tensor> widened(operands.size());
  Operands in(operands.size());
  for (size_t i = 0; i < operands.size(); ++i) {
    const Tensor* t = operands[i];
    if (!t) fail(n, fmt::format("operand {} is missing", i));
    TensorType want = runtimeType(n.operand(i)->type(), opts_.promote_to_f64);
    bool widen = opts_.promote_to_f64 && isFloat(want.dtype) && isFloat(t->dtype()) &&
                 t->dtype() != DType::f64 && t->shape() == want.shape;
    if (!widen && t->type() != want)
      fail(n, fmt::format("operand {} is {}, expected {}", i, t->type().str(), want.str()));
    if (widen) widened[i] = widenToF64(*t);
    in[i] = widen ? &widened[i] : t;
  }
  std::vector<Tensor> results;
  for (size_t r = 0; r < n.numResults(); ++r)
    results.emplace_back(runtimeType(n.result(r)->type(), opts_.promote_to_f64));
  compute(n, in, results);
  return results;
}

std::vector<Tensor> Interpreter::run(const Graph& g,
                                     const std::map<std::string, Tensor>& inputs) const {
  std::vector<Node*> graphInputs = g.inputs();
  for (const auto& [name, t] : inputs) {
    bool known = std::any_of(graphInputs.begin(), graphInputs.end(),
                             [&](Node* in) { return in->result()->name() == name; });
    if (!known) {
      std::string names;
      for (Node* in : graphInputs) names += (names.empty() ? "%" : ", %") + in->result()->name();
      throw IRError(fmt::format("unknown input '{}' given to graph @{} (its inputs: {})", name,
                                g.name(), names.empty() ? "none" : names));
    }
  }
  std::unordered_map<const Value*, Tensor> values;
  // Uses left per value, so intermediates are dropped after their last use (outputs never).
  std::unordered_map<const Value*, size_t> usesLeft;
  for (const auto& node : g.nodes())
    for (const Value* o : node->operands()) ++usesLeft[o];
  for (const Value* o : g.outputs()) ++usesLeft[o];
  for (const auto& node : g.nodes()) {
    const Node& n = *node;
    if (n.op() == OpKind::Input) {
      const Value* v = n.result();
      auto it = inputs.find(v->name());
      if (it == inputs.end())
        throw IRError(fmt::format("missing input %{} ({}) of graph @{}", v->name(), v->type().str(),
                                  g.name()));
      const Tensor& t = it->second;
      bool floatOk = opts_.promote_to_f64 && isFloat(v->type().dtype) && isFloat(t.dtype()) &&
                     t.shape() == v->type().shape;
      if (t.type() != v->type() && !floatOk)
        throw IRError(fmt::format("input %{} has type {}, but the graph declares {}", v->name(),
                                  t.type().str(), v->type().str()));
      values[v] = floatOk ? widenToF64(t) : t;
      continue;
    }
    std::vector<const Tensor*> ops;
    for (const Value* o : n.operands()) {
      auto it = values.find(o);
      if (it == values.end())
        fail(n, fmt::format("operand %{} has no value (graph is not in topological order)",
                            o->name()));
      ops.push_back(&it->second);
    }
    std::vector<Tensor> rs = evalNode(n, ops);
    for (const Value* o : n.operands())
      if (--usesLeft[o] == 0) values.erase(o);
    for (size_t r = 0; r < rs.size(); ++r) values[n.result(r)] = std::move(rs[r]);
  }
  std::vector<Tensor> outs;
  for (const Value* v : g.outputs()) {
    auto it = values.find(v);
    if (it == values.end())
      throw IRError(fmt::format("output %{} is not computed by graph @{}", v->name(), g.name()));
    outs.push_back(it->second);
  }
  return outs;
}

}  // namespace tgc
