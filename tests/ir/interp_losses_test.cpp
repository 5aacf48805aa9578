// Interpreter: the reference kernels of softmax_cross_entropy, its gradient and layer_norm_grad
// (ir/fused_ops.h): hand-computed rows, the bad-target error, and the gradients against central
// differences of the forward ops.
#include <cmath>
#include <functional>

#include "tests/ir/interp_test_util.h"

namespace tgc {
namespace {

using namespace interp_test;

// Central difference of f at every element of t (f64), returned as a tensor like t.
Tensor numericGrad(Tensor t, const std::function<double(const Tensor&)>& f) {
  Tensor d(t.type());
  const double h = 1e-6;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = t.getF(i);
    t.setF(i, v + h);
    const double up = f(t);
    t.setF(i, v - h);
    const double down = f(t);
    t.setF(i, v);
    d.setF(i, (up - down) / (2 * h));
  }
  return d;
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.getF(i) * b.getF(i);
  return s;
}

Tensor wave(DType d, Shape s, double scale, double phase) {
  Tensor t(ty(d, std::move(s)));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.setF(i, scale * std::sin(1.7 * static_cast<double>(i) + phase));
  return t;
}

AttrMap smoothing(double eps) { return {{"smoothing", eps}}; }

INTERP_OP_TEST(SoftmaxCrossEntropy, HandComputedRows) {
  // Row 0: logits 0, 0, 0 at target 1: lse = ln 3 = nll = smooth.
  // Row 1: logits 0, ln 2, ln 5 at target 2: lse = ln 8, nll = ln 8 - ln 5,
  //        smooth = ln 8 - (ln 2 + ln 5) / 3.
  Tensor x = T(DType::f64, {2, 3}, {0, 0, 0, 0, std::log(2.0), std::log(5.0)});
  Tensor t = TI(DType::i64, {2}, {1, 2});
  const double l3 = std::log(3.0), l8 = std::log(8.0);
  const double nll1 = l8 - std::log(5.0), smooth1 = l8 - (std::log(2.0) + std::log(5.0)) / 3;
  auto plain = runOpResults(OpKind::SoftmaxCrossEntropy, {x, t}, {});
  expectNear(plain.at(0), ty(DType::f64, {2}), {l3, nll1}, 1e-15);
  expectNear(plain.at(1), ty(DType::f64, {2}), {l3, l8}, 1e-15);
  auto smoothed = runOpResults(OpKind::SoftmaxCrossEntropy, {x, t}, smoothing(0.1));
  expectNear(smoothed.at(0), ty(DType::f64, {2}), {l3, 0.9 * nll1 + 0.1 * smooth1}, 1e-15);
}

INTERP_OP_TEST(SoftmaxCrossEntropy, LargeLogitsAndF32Rounding) {
  // exp(1000) overflows a naive sum; the max shift keeps lse = 1000 + ln 2.
  Tensor x = T(DType::f32, {1, 1, 2}, {1000, 1000});
  auto r = runOpResults(OpKind::SoftmaxCrossEntropy, {x, TI(DType::i32, {1, 1}, {0})}, {});
  expectExact(r.at(0), ty(DType::f32, {1, 1}), {roundTo(DType::f32, std::log(2.0))});
  expectExact(r.at(1), ty(DType::f32, {1, 1}), {roundTo(DType::f32, 1000 + std::log(2.0))});
}

INTERP_OP_TEST(SoftmaxCrossEntropy, TargetOutOfRangeNamesTheNode) {
  Tensor x = T(DType::f32, {2, 3}, {0, 1, 2, 3, 4, 5});
  for (int64_t bad : {int64_t{3}, int64_t{-1}}) {
    std::string msg = errorOf([&] {
      runOpResults(OpKind::SoftmaxCrossEntropy, {x, TI(DType::i64, {2}, {0, bad})}, {});
    });
    EXPECT_NE(msg.find("softmax_cross_entropy %out"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fmt::format("target {} of row 1", bad)), std::string::npos) << msg;
  }
}

INTERP_OP_TEST(SoftmaxCrossEntropyGrad, MatchesCentralDifferences) {
  Tensor x = wave(DType::f64, {3, 5}, 3, 0.3);
  Tensor t = TI(DType::i32, {3}, {0, 4, 2});
  Tensor dloss = T(DType::f64, {3}, {0.5, -2, 1.25});
  for (double eps : {0.0, 0.1}) {
    Tensor lse = runOpResults(OpKind::SoftmaxCrossEntropy, {x, t}, smoothing(eps)).at(1);
    Tensor d =
        runOpResults(OpKind::SoftmaxCrossEntropyGrad, {x, t, lse, dloss}, smoothing(eps)).at(0);
    Tensor want = numericGrad(x, [&](const Tensor& xx) {
      return dot(runOpResults(OpKind::SoftmaxCrossEntropy, {xx, t}, smoothing(eps)).at(0), dloss);
    });
    expectNear(d, ty(DType::f64, {3, 5}), want.toDoubles(), 1e-8);
  }
  // Each row of dlogits sums to zero: softmax sums to 1, as do (1 - eps) one-hot + eps / V.
  Tensor lse = runOpResults(OpKind::SoftmaxCrossEntropy, {x, t}, smoothing(0.2)).at(1);
  Tensor d =
      runOpResults(OpKind::SoftmaxCrossEntropyGrad, {x, t, lse, dloss}, smoothing(0.2)).at(0);
  for (int64_t r = 0; r < 3; ++r) {
    double s = 0;
    for (int64_t c = 0; c < 5; ++c) s += d.getF(r * 5 + c);
    EXPECT_NEAR(s, 0, 1e-14);
  }
}

INTERP_OP_TEST(SoftmaxCrossEntropyGrad, TargetOutOfRangeIsAnError) {
  Tensor x = T(DType::f32, {1, 2}, {0, 1});
  Tensor row = T(DType::f32, {1}, {1});
  std::string msg = errorOf([&] {
    runOpResults(OpKind::SoftmaxCrossEntropyGrad, {x, TI(DType::i64, {1}, {2}), row, row}, {});
  });
  EXPECT_NE(msg.find("outside [0, 2)"), std::string::npos) << msg;
}

INTERP_OP_TEST(LayerNormGrad, MatchesCentralDifferencesOfLayerNorm) {
  Tensor x = wave(DType::f64, {2, 3, 7}, 2, 0.1);
  Tensor gamma = wave(DType::f64, {7}, 1.5, 1.0);
  Tensor beta = wave(DType::f64, {7}, 0.5, 2.0);
  Tensor dy = wave(DType::f64, {2, 3, 7}, 1, 0.7);
  const double eps = 1e-3;
  AttrMap a{{"eps", eps}};
  auto objective = [&](const Tensor& xx, const Tensor& gg, const Tensor& bb) {
    return dot(runOpResults(OpKind::LayerNorm, {xx, gg, bb}, a).at(0), dy);
  };
  auto r = runOpResults(OpKind::LayerNormGrad, {x, gamma, dy}, a);
  ASSERT_EQ(r.size(), 3u);
  Tensor dx = numericGrad(x, [&](const Tensor& v) { return objective(v, gamma, beta); });
  Tensor dg = numericGrad(gamma, [&](const Tensor& v) { return objective(x, v, beta); });
  Tensor db = numericGrad(beta, [&](const Tensor& v) { return objective(x, gamma, v); });
  expectNear(r[0], ty(DType::f64, {2, 3, 7}), dx.toDoubles(), 1e-7);
  expectNear(r[1], ty(DType::f64, {7}), dg.toDoubles(), 1e-7);
  expectNear(r[2], ty(DType::f64, {7}), db.toDoubles(), 1e-7);
}

INTERP_OP_TEST(LayerNormGrad, ConstantRowAndF32) {
  // A constant row has xhat = 0: dgamma gets nothing from it and dx = rstd (g - mean g).
  Tensor x = T(DType::f32, {1, 4}, {3, 3, 3, 3});
  Tensor gamma = T(DType::f32, {4}, {1, 2, 3, 4});
  Tensor dy = T(DType::f32, {1, 4}, {1, 1, 1, 1});
  auto r = runOpResults(OpKind::LayerNormGrad, {x, gamma, dy}, {{"eps", 0.25}});
  // rstd = 1 / sqrt(0.25) = 2; g = gamma, mean 2.5.
  expectExact(r[0], ty(DType::f32, {1, 4}), {-3, -1, 1, 3});
  expectExact(r[1], ty(DType::f32, {4}), {0, 0, 0, 0});
  expectExact(r[2], ty(DType::f32, {4}), {1, 1, 1, 1});
}

INTERP_OP_TEST(QuantizedMatmul, RoundsToEvenAndSumsExactly) {
  // x's row: scale 1/127, q = 127, -64 (-63.5 to even), 32 (31.75). w's columns: scale 1/127
  // each, q = 127, 64, -127 and 0, 127, 32. Sums 7969 and -7104.
  Tensor x = T(DType::f32, {1, 3}, {1, -0.5, 0.25});
  Tensor w = T(DType::f32, {3, 2}, {1, 0, 0.5, 1, -1, 0.25});
  auto r = runOpResults(OpKind::QuantizedMatmul, {x, w}, {});
  const float s = 1.0f / 127;
  expectExact(r[0], ty(DType::f32, {1, 2}), {s * s * 7969.0f, s * s * -7104.0f});
  // Within the quantization error of the f32 product (0.5, -0.4375).
  EXPECT_NEAR(r[0].getF(0), 0.5, 0.01);
  EXPECT_NEAR(r[0].getF(1), -0.4375, 0.01);
  // Leading dims are rows; an inf is refused.
  Tensor x3 = T(DType::f32, {2, 1, 3}, {1, -0.5, 0.25, 0, 0, 0});
  expectExact(runOpResults(OpKind::QuantizedMatmul, {x3, w}, {})[0], ty(DType::f32, {2, 1, 2}),
              {s * s * 7969.0f, s * s * -7104.0f, 0, 0});
  Tensor bad = T(DType::f32, {1, 3}, {1, std::numeric_limits<double>::infinity(), 0});
  EXPECT_NE(errorOf([&] { runOpResults(OpKind::QuantizedMatmul, {bad, w}, {}); }).find("inf or a NaN"),
            std::string::npos);
}

}  // namespace
}  // namespace tgc
