// Shape rules of the fused ops (semantics in ir/fused_ops.h).
#include "ir/fused_ops.h"

#include <fmt/format.h>

namespace tgc {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw ShapeError(msg); }

// Shape rules see attributes with their defaults dropped.
template <class T>
T attrOr(const InferContext& c, const char* name, T fallback) {
  auto it = c.attrs.find(name);
  return it == c.attrs.end() ? fallback : std::get<T>(it->second);
}

Shape dropLast(const Shape& s, size_t n) { return Shape(s.begin(), s.end() - static_cast<long>(n)); }

// Checks q, k, v and the optional mask / seed / offset operands starting at `extra`; returns
// q's batch dims.
Shape checkAttention(const InferContext& c, size_t extra) {
  const TensorType &q = c.operands[0], &k = c.operands[1], &v = c.operands[2];
  if (!isFloat(q.dtype)) fail(fmt::format("q {} must be a float type", q.str()));
  if (k.dtype != q.dtype || v.dtype != q.dtype)
    fail(fmt::format("q {}, k {} and v {} must share a dtype", q.str(), k.str(), v.str()));
  if (q.rank() < 2 || k.rank() != q.rank() || v.rank() != q.rank())
    fail(fmt::format("q {}, k {} and v {} must have one rank >= 2", q.str(), k.str(), v.str()));
  const size_t r = q.shape.size();
  Shape batch = dropLast(q.shape, 2);
  if (dropLast(k.shape, 2) != batch || dropLast(v.shape, 2) != batch)
    fail(fmt::format("q {}, k {} and v {} must have equal batch dims", q.str(), k.str(), v.str()));
  if (k.shape[r - 1] != q.shape[r - 1])
    fail(fmt::format("q {} and k {} must have the same head dim", q.str(), k.str()));
  if (v.shape[r - 2] != k.shape[r - 2])
    fail(fmt::format("k {} and v {} must have the same number of keys", k.str(), v.str()));
  const int64_t tq = q.shape[r - 2], tk = k.shape[r - 2];
  if (attrOr(c, "causal", false) && tq != tk)
    fail(fmt::format("causal attention needs as many queries as keys: q {}, k {}", q.str(), k.str()));
  const bool hasMask = attrOr(c, "has_mask", false), hasBias = attrOr(c, "has_bias", false);
  const double p = attrOr(c, "p_drop", 0.0);
  if (!(p >= 0 && p < 1)) fail(fmt::format("p_drop {} must be in [0, 1)", p));
  const size_t want = extra + (hasMask ? 1 : 0) + (hasBias ? 1 : 0) + (p > 0 ? 2 : 0);
  if (c.operands.size() != want)
    fail(fmt::format("has {} operands; has_mask={}, has_bias={} and p_drop={} need {}",
                     c.operands.size(), hasMask, hasBias, p, want));
  Shape full = batch;
  full.push_back(tq);
  full.push_back(tk);
  // The mask and the bias broadcast to the scores [..., Tq, Tk].
  auto checkScoresOperand = [&](const TensorType& m, const char* what, DType dtype) {
    if (m.dtype != dtype || m.rank() != q.rank())
      fail(fmt::format("{} {} must be {} of rank {}", what, m.str(), dtypeName(dtype), q.rank()));
    for (size_t d = 0; d < r; ++d)
      if (m.shape[d] != 1 && m.shape[d] != full[d])
        fail(fmt::format("{} {} does not broadcast to {}", what, m.str(), shapeStr(full)));
  };
  if (hasMask) checkScoresOperand(c.operands[extra], "mask", DType::boolean);
  if (hasBias) checkScoresOperand(c.operands[extra + (hasMask ? 1 : 0)], "bias", q.dtype);
  if (p > 0)
    for (size_t i = c.operands.size() - 2; i < c.operands.size(); ++i)
      if (c.operands[i] != TensorType{DType::i64, {}})
        fail(fmt::format("dropout {} {} must be i64[]", i + 2 == c.operands.size() ? "seed" : "offset",
                         c.operands[i].str()));
  return batch;
}

std::vector<TensorType> inferAttentionBhtd(const InferContext& c) {
  Shape batch = checkAttention(c, 3);
  const TensorType &q = c.operands[0], &v = c.operands[2];
  Shape out = batch;
  out.push_back(q.shape[q.rank() - 2]);
  Shape lse = out;
  out.push_back(v.shape.back());
  return {TensorType{q.dtype, out}, TensorType{q.dtype, lse}};
}

std::vector<TensorType> inferAttentionGradBhtd(const InferContext& c) {
  checkAttention(c, 6);
  const TensorType &q = c.operands[0], &k = c.operands[1], &v = c.operands[2];
  const TensorType &out = c.operands[3], &lse = c.operands[4], &dout = c.operands[5];
  Shape outShape = dropLast(q.shape, 1);
  TensorType wantLse{q.dtype, outShape};
  outShape.push_back(v.shape.back());
  TensorType wantOut{q.dtype, outShape};
  if (out != wantOut) fail(fmt::format("out {} must be {}", out.str(), wantOut.str()));
  if (dout != wantOut) fail(fmt::format("dout {} must be {}", dout.str(), wantOut.str()));
  if (lse != wantLse) fail(fmt::format("lse {} must be {}", lse.str(), wantLse.str()));
  return {q, k, v};
}

// Layout bthd: the rule of bhtd on the operands read as [..., H, T, D] (`headOperands` lists
// q, k, v, and out, dout for the gradient), its errors naming the shapes both ways.
std::vector<TensorType> inferWithLayout(const InferContext& c, std::vector<size_t> headOperands,
                                        InferFn bhtd) {
  if (attentionLayoutOf(attrOr<std::string>(c, "layout", "bhtd")) == AttentionLayout::Bhtd)
    return bhtd(c);
  std::vector<TensorType> logical(c.operands.begin(), c.operands.end());
  std::string both;
  for (size_t i : headOperands) {
    if (i >= logical.size()) continue;  // too few operands: the bhtd rule says so
    if (logical[i].rank() < 3)
      fail(fmt::format("layout bthd needs operands of rank >= 3 ([..., T, H, D]), not {}",
                       logical[i].str()));
    logical[i].shape = bthdAsBhtd(logical[i].shape);
    both += fmt::format("{}{} as {}", both.empty() ? "" : ", ", c.operands[i].str(),
                        logical[i].str());
  }
  try {
    return bhtd(InferContext{logical, c.attrs, c.declared});
  } catch (const ShapeError& e) {
    throw ShapeError(fmt::format("layout bthd ({}): {}", both, e.what()));
  }
}

}  // namespace

AttentionLayout attentionLayoutOf(const std::string& name) {
  if (name == "bhtd") return AttentionLayout::Bhtd;
  if (name == "bthd") return AttentionLayout::Bthd;
  fail(fmt::format("layout must be \"bhtd\" or \"bthd\", not \"{}\"", name));
}

Shape bthdAsBhtd(Shape s) {
  const size_t r = s.size();
  std::swap(s[r - 3], s[r - 2]);
  return s;
}

std::vector<TensorType> inferFusedAttention(const InferContext& c) {
  std::vector<TensorType> r = inferWithLayout(c, {0, 1, 2}, inferAttentionBhtd);
  if (attentionLayoutOf(attrOr<std::string>(c, "layout", "bhtd")) == AttentionLayout::Bthd)
    r[0].shape = bthdAsBhtd(r[0].shape);  // out [..., Tq, H, Dv]; lse stays [..., H, Tq]
  return r;
}

std::vector<TensorType> inferFusedAttentionGrad(const InferContext& c) {
  inferWithLayout(c, {0, 1, 2, 3, 5}, inferAttentionGradBhtd);
  std::vector<TensorType> r{c.operands[0], c.operands[1], c.operands[2]};
  if (attrOr(c, "bias_grad", false)) {
    if (!attrOr(c, "has_bias", false)) fail("bias_grad needs has_bias");
    r.push_back(c.operands[6 + (attrOr(c, "has_mask", false) ? 1 : 0)]);  // dbias: the bias's type
  }
  return r;
}

std::vector<TensorType> inferSoftmaxCrossEntropy(const InferContext& c) {
  const TensorType &x = c.operands[0], &t = c.operands[1];
  if (!isFloat(x.dtype) || x.rank() < 1)
    fail(fmt::format("logits {} must be a float tensor of rank >= 1", x.str()));
  if (!isInteger(t.dtype) || t.shape != dropLast(x.shape, 1))
    fail(fmt::format("targets {} must be integers of logits {} without its last dim", t.str(),
                     x.str()));
  const double eps = attrOr(c, "smoothing", 0.0);
  if (!(eps >= 0 && eps <= 1)) fail(fmt::format("smoothing {} must be in [0, 1]", eps));
  TensorType row{x.dtype, t.shape};
  return {row, row};
}

std::vector<TensorType> inferSoftmaxCrossEntropyGrad(const InferContext& c) {
  std::vector<TensorType> fwd = inferSoftmaxCrossEntropy(c);
  for (size_t i = 2; i < 4; ++i)
    if (c.operands[i] != fwd[0])
      fail(fmt::format("{} {} must be {}", i == 2 ? "lse" : "dloss", c.operands[i].str(),
                       fwd[0].str()));
  return {c.operands[0]};
}

std::vector<TensorType> inferQuantizedMatmul(const InferContext& c) {
  const TensorType &x = c.operands[0], &w = c.operands[1];
  if (x.dtype != DType::f32 || w.dtype != DType::f32)
    fail(fmt::format("operands {} and {} must be f32", x.str(), w.str()));
  if (x.rank() < 1 || w.rank() != 2 || x.shape.back() != w.shape[0])
    fail(fmt::format("x {} [..., K] and w {} [K, N] do not multiply", x.str(), w.str()));
  if (w.shape[0] >= (int64_t{1} << 16))
    fail(fmt::format("K = {} must be below 65536 (32-bit integer sums)", w.shape[0]));
  TensorType y = x;
  y.shape.back() = w.shape[1];
  return {y};
}

std::vector<TensorType> inferLayerNormGrad(const InferContext& c) {
  const TensorType &x = c.operands[0], &gamma = c.operands[1], &dy = c.operands[2];
  if (!isFloat(x.dtype) || x.rank() < 1)
    fail(fmt::format("input {} must be a float tensor of rank >= 1", x.str()));
  TensorType p{x.dtype, {x.shape.back()}};
  if (gamma != p) fail(fmt::format("gamma is {} but input {} needs {}", gamma.str(), x.str(), p.str()));
  if (dy != x) fail(fmt::format("dy {} must match input {}", dy.str(), x.str()));
  return {x, p, p};
}

}  // namespace tgc
