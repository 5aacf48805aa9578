// Reference kernels of softmax_cross_entropy, its gradient and layer_norm_grad
// (ir/fused_ops.h): plain row loops in double, rounded to the dtype on store.
#include <cmath>

#include <fmt/format.h>

#include "ir/interp_fused.h"

namespace tgc {

namespace {

int64_t lastDim(const Tensor& t) { return t.shape().empty() ? 1 : t.shape().back(); }

// Target of row r, checked against the vocabulary size V.
int64_t targetAt(const Node& n, const Tensor& targets, int64_t r, int64_t v) {
  int64_t t = targets.getI(r);
  if (t < 0 || t >= v)
    throw IRError(fmt::format("{}: target {} of row {} is outside [0, {})", describeNode(n), t, r, v));
  return t;
}

}  // namespace

void referenceSoftmaxCrossEntropy(const Node& n, const RefOperands& in, std::vector<Tensor>& outs) {
  const Tensor &x = *in[0], &targets = *in[1];
  const double eps = n.attrFloat("smoothing");
  const int64_t v = lastDim(x), rows = targets.numel();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = targetAt(n, targets, r, v);
    const int64_t base = r * v;
    double m = -INFINITY, sum = 0, total = 0;
    for (int64_t c = 0; c < v; ++c) m = std::max(m, x.getF(base + c));
    for (int64_t c = 0; c < v; ++c) {
      sum += std::exp(x.getF(base + c) - m);
      total += x.getF(base + c);
    }
    const double lse = m + std::log(sum);
    const double nll = lse - x.getF(base + t);
    const double smooth = lse - total / static_cast<double>(v);
    outs[0].setF(r, (1 - eps) * nll + eps * smooth);
    outs[1].setF(r, lse);
  }
}

void referenceSoftmaxCrossEntropyGrad(const Node& n, const RefOperands& in,
                                      std::vector<Tensor>& outs) {
  const Tensor &x = *in[0], &targets = *in[1], &lse = *in[2], &dloss = *in[3];
  const double eps = n.attrFloat("smoothing");
  const int64_t v = lastDim(x), rows = targets.numel();
  const double uniform = eps / static_cast<double>(v);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = targetAt(n, targets, r, v);
    const double g = dloss.getF(r), l = lse.getF(r);
    for (int64_t c = 0; c < v; ++c) {
      const double p = std::exp(x.getF(r * v + c) - l);
      outs[0].setF(r * v + c, g * (p - (c == t ? 1 - eps : 0) - uniform));
    }
  }
}

void referenceLayerNormGrad(const Node& n, const RefOperands& in, std::vector<Tensor>& outs) {
  const Tensor &x = *in[0], &gamma = *in[1], &dy = *in[2];
  const double eps = n.attrFloat("eps");
  const int64_t d = lastDim(x);
  if (d == 0) return;
  const int64_t rows = x.numel() / d;
  const double invD = 1.0 / static_cast<double>(d);
  std::vector<double> dgamma(static_cast<size_t>(d), 0.0), dbeta(static_cast<size_t>(d), 0.0);
  std::vector<double> xhat(static_cast<size_t>(d)), g(static_cast<size_t>(d));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * d;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mean += x.getF(base + j);
    mean *= invD;
    for (int64_t j = 0; j < d; ++j) var += (x.getF(base + j) - mean) * (x.getF(base + j) - mean);
    var *= invD;
    const double rstd = 1.0 / std::sqrt(var + eps);
    double meanG = 0, meanGX = 0;
    for (int64_t j = 0; j < d; ++j) {
      const auto k = static_cast<size_t>(j);
      const double dyj = dy.getF(base + j);
      xhat[k] = (x.getF(base + j) - mean) * rstd;
      g[k] = dyj * gamma.getF(j);
      meanG += g[k];
      meanGX += g[k] * xhat[k];
      dbeta[k] += dyj;
      dgamma[k] += dyj * xhat[k];
    }
    meanG *= invD;
    meanGX *= invD;
    for (int64_t j = 0; j < d; ++j) {
      const auto k = static_cast<size_t>(j);
      outs[0].setF(base + j, rstd * (g[k] - meanG - xhat[k] * meanGX));
    }
  }
  for (int64_t j = 0; j < d; ++j) {
    outs[1].setF(j, dgamma[static_cast<size_t>(j)]);
    outs[2].setF(j, dbeta[static_cast<size_t>(j)]);
  }
}

}  // namespace tgc
