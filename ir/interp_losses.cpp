// Reference kernels of softmax_cross_entropy, its gradient and layer_norm_grad
// (ir/fused_ops.h): plain row loops in double, rounded to the dtype on store.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "ir/interp_fused.h"
#include "ir/quantize.h"

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

// The int8 product as the kernels compute it (ir/quantize.h), in f32 for the scales and
// exact integers for the sums, so the compiled op matches it bit for bit.
void referenceQuantizedMatmul(const Node&, const RefOperands& in, std::vector<Tensor>& outs) {
  const Tensor &x = *in[0], &w = *in[1];
  const int64_t k = w.shape()[0], n = w.shape()[1], rows = k == 0 ? 0 : x.numel() / k;
  std::vector<float> ws(static_cast<size_t>(n));
  std::vector<int8_t> wq(static_cast<size_t>(k * n));
  for (int64_t j = 0; j < n; ++j) {
    float mx = 0;
    for (int64_t kk = 0; kk < k; ++kk) mx = std::max(mx, std::fabs(static_cast<float>(w.getF(kk * n + j))));
    ws[static_cast<size_t>(j)] = int8Scale(mx);
    for (int64_t kk = 0; kk < k; ++kk)
      wq[static_cast<size_t>(kk * n + j)] = quantizeInt8(static_cast<float>(w.getF(kk * n + j)), 1 / ws[static_cast<size_t>(j)]);
  }
  std::vector<int8_t> xq(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    float mx = 0;
    for (int64_t kk = 0; kk < k; ++kk) {
      const float v = std::fabs(static_cast<float>(x.getF(r * k + kk)));
      if (!(v <= std::numeric_limits<float>::max()))
        throw IRError("quantized_matmul: the activations hold an inf or a NaN");
      mx = std::max(mx, v);
    }
    const float s = int8Scale(mx);
    for (int64_t kk = 0; kk < k; ++kk) xq[static_cast<size_t>(kk)] = quantizeInt8(static_cast<float>(x.getF(r * k + kk)), 1 / s);
    for (int64_t j = 0; j < n; ++j) {
      int64_t acc = 0;
      for (int64_t kk = 0; kk < k; ++kk) acc += xq[static_cast<size_t>(kk)] * wq[static_cast<size_t>(kk * n + j)];
      outs[0].setF(r * n + j, s * ws[static_cast<size_t>(j)] * static_cast<float>(acc));
    }
  }
}

}  // namespace tgc
