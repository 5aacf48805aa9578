// Reference kernels of fused_attention and its gradient (ir/fused_ops.h): for each batch
// entry and query row, the scores over the allowed keys, computed in double and rounded to
// the result dtype on store. Slow and plain on purpose: it is the oracle of the CPU kernels.
//
// The dropout keep test and factor copy the unfused graph's roundings so that fused and
// unfused agree on every kept element: the frontend's dropout is
//   where(ge(philox_uniform(seed, offset), p), x * (1 / (1 - p)), 0)
// with p and 1 / (1 - p) constants of x's dtype, so the interpreter compares the uniform value
// (rounded to the dtype) with p rounded to the dtype, and multiplies by the factor rounded to
// the dtype. Under promote_to_f64 that dtype is f64 and nothing is rounded.
//
// Layout bthd is read and written through its index map (Attention::at): the loops below
// see [batch, T, D] rows of a batch entry b = (outer, h) either way.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "ir/fused_ops.h"
#include "ir/interp_fused.h"
#include "ir/philox.h"

namespace tgc {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

[[noreturn]] void fail(const Node& n, const std::string& msg) {
  throw IRError(fmt::format("{}: {}", describeNode(n), msg));
}

// Rounds doubles as a tensor of `dtype` stores them.
class Rounder {
 public:
  explicit Rounder(DType dt) : scratch_(TensorType{dt, {}}) {}
  double operator()(double v) {
    if (scratch_.dtype() == DType::f64) return v;
    scratch_.setF(0, v);
    return scratch_.getF(0);
  }

 private:
  Tensor scratch_;
};

// The attributes, sizes and optional operands both kernels share. `extra` is the index of the
// first optional operand (3 for the forward, 6 for the gradient).
struct Attention {
  double scale = 1;
  bool causal = false;
  int64_t batch = 1, tq = 0, tk = 0, d = 0, dv = 0;
  // Layout bthd: the heads H of [..., T, H, D] (batch entry b is head b % H), else 1.
  int64_t heads = 1;
  // An operand broadcast to the scores [batch, tq, tk] (the mask, the bias): per-batch base
  // offset and the strides of i and j (0 where broadcast).
  struct ScoresOperand {
    const Tensor* t = nullptr;
    std::vector<int64_t> base;
    int64_t strideI = 0, strideJ = 0;
    int64_t at(int64_t b, int64_t i, int64_t j) const {
      return base[static_cast<size_t>(b)] + i * strideI + j * strideJ;
    }
  };
  ScoresOperand mask, bias;
  size_t biasOperand = 0;
  // Dropout.
  double pDrop = 0;
  uint64_t seed = 0, offset = 0;
  double keepThreshold = 0, keepFactor = 1;
  Rounder round{DType::f64};

  Attention(const Node& n, const RefOperands& in, size_t extra, DType dtype) : round(dtype) {
    scale = n.attrFloat("scale");
    causal = n.attrBool("causal");
    pDrop = n.attrFloat("p_drop");
    const bool hasMask = n.attrBool("has_mask"), hasBias = n.attrBool("has_bias");
    const size_t want = extra + (hasMask ? 1 : 0) + (hasBias ? 1 : 0) + (pDrop > 0 ? 2 : 0);
    if (in.size() != want)
      fail(n, fmt::format("has {} operands; has_mask={}, has_bias={} and p_drop={} need {}",
                          in.size(), hasMask, hasBias, pDrop, want));
    const bool bthd = attentionLayoutOf(n.attrString("layout")) == AttentionLayout::Bthd;
    const size_t minRank = bthd ? 3 : 2;
    const size_t r = in[0]->shape().size();
    if (r < minRank || in[1]->shape().size() != r || in[2]->shape().size() != r)
      fail(n, fmt::format("q, k and v must have one rank >= {}", minRank));
    if (bthd) heads = in[0]->shape()[r - 2];
    // The shapes as the loops read them, [..., H, T, D].
    const Shape qs = bthd ? bthdAsBhtd(in[0]->shape()) : in[0]->shape();
    const Shape ks = bthd ? bthdAsBhtd(in[1]->shape()) : in[1]->shape();
    const Shape vs = bthd ? bthdAsBhtd(in[2]->shape()) : in[2]->shape();
    for (size_t i = 0; i + 2 < r; ++i) {
      if (ks[i] != qs[i] || vs[i] != qs[i]) fail(n, "q, k and v must have equal batch dims");
      batch *= qs[i];
    }
    tq = qs[r - 2];
    tk = ks[r - 2];
    d = qs[r - 1];
    dv = vs[r - 1];
    if (ks[r - 1] != d || vs[r - 2] != tk) fail(n, "k must be [..., Tk, D] and v [..., Tk, Dv]");
    if (causal && tq != tk) fail(n, "causal attention needs as many queries as keys");
    if (!(pDrop >= 0 && pDrop < 1)) fail(n, fmt::format("p_drop {} must be in [0, 1)", pDrop));
    if (hasMask) mask = scoresOperand(n, *in[extra], qs, "mask", DType::boolean);
    if (hasBias) {
      biasOperand = extra + (hasMask ? 1 : 0);
      bias = scoresOperand(n, *in[biasOperand], qs, "bias", in[0]->dtype());
    }
    if (pDrop > 0) {
      seed = static_cast<uint64_t>(in[in.size() - 2]->getI(0));
      offset = static_cast<uint64_t>(in[in.size() - 1]->getI(0));
      keepThreshold = round(pDrop);
      keepFactor = round(1.0 / (1.0 - pDrop));
    }
  }

  ScoresOperand scoresOperand(const Node& n, const Tensor& m, const Shape& qs, const char* what,
                              DType dtype) const {
    const Shape& ms = m.shape();
    const size_t r = qs.size();
    Shape full(qs.begin(), qs.end() - 1);
    full.push_back(tk);
    if (m.dtype() != dtype || ms.size() != r)
      fail(n, fmt::format("{} {} must be {} of rank {}", what, m.type().str(), dtypeName(dtype), r));
    for (size_t i = 0; i < r; ++i)
      if (ms[i] != 1 && ms[i] != full[i])
        fail(n, fmt::format("{} {} does not broadcast to {}", what, m.type().str(), shapeStr(full)));
    ScoresOperand o;
    o.t = &m;
    std::vector<int64_t> strides = stridesOf(ms);
    o.strideI = ms[r - 2] == 1 ? 0 : strides[r - 2];
    o.strideJ = ms[r - 1] == 1 ? 0 : strides[r - 1];
    o.base.assign(static_cast<size_t>(batch), 0);
    for (int64_t b = 0; b < batch; ++b) {
      int64_t rest = b, base = 0;
      for (size_t dim = r - 2; dim-- > 0;) {
        const int64_t idx = rest % full[dim];
        rest /= full[dim];
        if (ms[dim] != 1) base += idx * strides[dim];
      }
      o.base[static_cast<size_t>(b)] = base;
    }
    return o;
  }

  // Where row t of batch entry b, column c, of an operand with rows of `width` lies: b * T + t
  // in [batch, T, width], ((b / H) * T + t) * H + b % H in bthd's [outer, T, H, width].
  int64_t at(int64_t b, int64_t t, int64_t T, int64_t c, int64_t width) const {
    return (((b / heads) * T + t) * heads + b % heads) * width + c;
  }

  // x's elements in [batch, T, width] order.
  std::vector<double> rows(const Tensor& x, int64_t T, int64_t width) const {
    std::vector<double> phys = x.toDoubles();
    if (heads == 1) return phys;
    std::vector<double> out(phys.size());
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < width; ++c)
          out[static_cast<size_t>((b * T + t) * width + c)] =
              phys[static_cast<size_t>(at(b, t, T, c, width))];
    return out;
  }

  // Stores x in [batch, T, width] order into tensor y of the layout.
  void store(Tensor& y, const std::vector<double>& x, int64_t T, int64_t width) const {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < width; ++c)
          y.setF(at(b, t, T, c, width), x[static_cast<size_t>((b * T + t) * width + c)]);
  }

  bool allowed(int64_t b, int64_t i, int64_t j) const {
    if (causal && j > i) return false;
    if (!mask.t) return true;
    return mask.t->getI(mask.at(b, i, j)) != 0;
  }

  // The dropout factor of element (b, i, j): 0 (dropped), keepFactor, or 1 without dropout.
  double dropFactor(int64_t b, int64_t i, int64_t j) {
    if (pDrop <= 0) return 1;
    const auto e = static_cast<uint64_t>((b * tq + i) * tk + j);
    return round(philoxUniformAt(seed, offset, e)) >= keepThreshold ? keepFactor : 0;
  }

  double score(const std::vector<double>& q, const std::vector<double>& k, int64_t b, int64_t i,
               int64_t j) const {
    double dot = 0;
    const double* qi = &q[static_cast<size_t>((b * tq + i) * d)];
    const double* kj = &k[static_cast<size_t>((b * tk + j) * d)];
    for (int64_t c = 0; c < d; ++c) dot += qi[c] * kj[c];
    return bias.t ? scale * dot + bias.t->getF(bias.at(b, i, j)) : scale * dot;
  }
};

}  // namespace

void referenceFusedAttention(const Node& n, const RefOperands& in, std::vector<Tensor>& outs) {
  Attention a(n, in, 3, outs.at(0).dtype());
  const std::vector<double> q = a.rows(*in[0], a.tq, a.d), k = a.rows(*in[1], a.tk, a.d),
                            v = a.rows(*in[2], a.tk, a.dv);
  std::vector<double> s(static_cast<size_t>(a.tk)), acc(static_cast<size_t>(a.dv));
  std::vector<bool> ok(static_cast<size_t>(a.tk));
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t i = 0; i < a.tq; ++i) {
      const int64_t row = b * a.tq + i;
      double m = kNegInf;
      for (int64_t j = 0; j < a.tk; ++j) {
        const auto ju = static_cast<size_t>(j);
        ok[ju] = a.allowed(b, i, j);
        if (!ok[ju]) continue;
        s[ju] = a.score(q, k, b, i, j);
        if (std::isnan(s[ju]) || s[ju] > m) m = s[ju];  // NaN sticks
      }
      if (m == kNegInf) {  // no key allowed (or all scores -inf): zeros, lse -inf
        outs[1].setF(row, kNegInf);
        continue;  // outs arrive zeroed
      }
      double sum = 0;
      for (int64_t j = 0; j < a.tk; ++j)
        if (ok[static_cast<size_t>(j)]) sum += std::exp(s[static_cast<size_t>(j)] - m);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < a.tk; ++j) {
        if (!ok[static_cast<size_t>(j)]) continue;
        const double p = std::exp(s[static_cast<size_t>(j)] - m) / sum * a.dropFactor(b, i, j);
        if (p == 0) continue;
        const double* vj = &v[static_cast<size_t>((b * a.tk + j) * a.dv)];
        for (int64_t c = 0; c < a.dv; ++c) acc[static_cast<size_t>(c)] += p * vj[c];
      }
      for (int64_t c = 0; c < a.dv; ++c)
        outs[0].setF(a.at(b, i, a.tq, c, a.dv), acc[static_cast<size_t>(c)]);
      outs[1].setF(row, m + std::log(sum));
    }
}

void referenceFusedAttentionGrad(const Node& n, const RefOperands& in, std::vector<Tensor>& outs) {
  Attention a(n, in, 6, outs.at(0).dtype());
  const Tensor &outT = *in[3], &lseT = *in[4], &doutT = *in[5];
  if (outT.shape() != doutT.shape() || outT.numel() != a.batch * a.tq * a.dv ||
      lseT.numel() != a.batch * a.tq)
    fail(n, fmt::format("out {}, lse {} and dout {} do not fit q {} and v {}", outT.type().str(),
                        lseT.type().str(), doutT.type().str(), in[0]->type().str(),
                        in[2]->type().str()));
  const std::vector<double> q = a.rows(*in[0], a.tq, a.d), k = a.rows(*in[1], a.tk, a.d),
                            v = a.rows(*in[2], a.tk, a.dv);
  const std::vector<double> out = a.rows(outT, a.tq, a.dv), lse = lseT.toDoubles(),
                            dout = a.rows(doutT, a.tq, a.dv);
  std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
  // dbias, when asked for: the score gradients summed over the bias's broadcast dims.
  const bool biasGrad = n.attrBool("bias_grad");
  std::vector<double> dbias(biasGrad ? static_cast<size_t>(in[a.biasOperand]->numel()) : 0, 0.0);
  std::vector<double> p(static_cast<size_t>(a.tk)), dp(static_cast<size_t>(a.tk));
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t i = 0; i < a.tq; ++i) {
      const int64_t row = b * a.tq + i;
      const double l = lse[static_cast<size_t>(row)];
      if (l == kNegInf) continue;  // fully masked row: contributes nothing
      const double* doi = &dout[static_cast<size_t>(row * a.dv)];
      double delta = 0;
      for (int64_t c = 0; c < a.dv; ++c) delta += doi[c] * out[static_cast<size_t>(row * a.dv + c)];
      for (int64_t j = 0; j < a.tk; ++j) {
        const auto ju = static_cast<size_t>(j);
        p[ju] = 0;
        if (!a.allowed(b, i, j)) continue;
        p[ju] = std::exp(a.score(q, k, b, i, j) - l);
        const double z = a.dropFactor(b, i, j);
        const double* vj = &v[static_cast<size_t>((b * a.tk + j) * a.dv)];
        double* dvj = &dv[static_cast<size_t>((b * a.tk + j) * a.dv)];
        double dpz = 0;
        for (int64_t c = 0; c < a.dv; ++c) {
          dvj[c] += p[ju] * z * doi[c];
          dpz += doi[c] * vj[c];
        }
        dp[ju] = dpz * z;
      }
      double* dqi = &dq[static_cast<size_t>(row * a.d)];
      const double* qi = &q[static_cast<size_t>(row * a.d)];
      for (int64_t j = 0; j < a.tk; ++j) {
        const auto ju = static_cast<size_t>(j);
        if (!a.allowed(b, i, j)) continue;
        const double dsUnscaled = p[ju] * (dp[ju] - delta);
        if (biasGrad) dbias[static_cast<size_t>(a.bias.at(b, i, j))] += dsUnscaled;
        const double ds = a.scale * dsUnscaled;
        const double* kj = &k[static_cast<size_t>((b * a.tk + j) * a.d)];
        double* dkj = &dk[static_cast<size_t>((b * a.tk + j) * a.d)];
        for (int64_t c = 0; c < a.d; ++c) {
          dqi[c] += ds * kj[c];
          dkj[c] += ds * qi[c];
        }
      }
    }
  a.store(outs[0], dq, a.tq, a.d);
  a.store(outs[1], dk, a.tk, a.d);
  a.store(outs[2], dv, a.tk, a.dv);
  if (biasGrad)
    for (size_t e = 0; e < dbias.size(); ++e) outs.at(3).setF(static_cast<int64_t>(e), dbias[e]);
}

}  // namespace tgc
