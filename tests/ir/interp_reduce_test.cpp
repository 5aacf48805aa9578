// Interpreter: reductions (negative axes, keepdims, NaN, integer means), softmax and
// log_softmax (-inf rows, large values), layer_norm (biased variance).
#include <cstdint>

#include "tests/ir/interp_test_util.h"

namespace tgc {
namespace {

using namespace interp_test;

constexpr int64_t k2p53 = int64_t{1} << 53;

// x[i, j, k] = 12 i + 4 j + k, shape [2, 3, 4].
Tensor iota234(DType d = DType::f32) {
  std::vector<double> v;
  for (int i = 0; i < 24; ++i) v.push_back(i);
  return T(d, {2, 3, 4}, v);
}

Tensor reduce(OpKind op, const Tensor& x, std::vector<int64_t> axes, bool keepdims = false) {
  return runOp(op, {x}, {{"axes", std::move(axes)}, {"keepdims", keepdims}});
}

// ---- reduce_sum
// ----------------------------------------------------------------------------------

INTERP_OP_TEST(ReduceSum, AxesAndKeepdims) {
  // Over j: 3 (12 i + k) + 4 (0 + 1 + 2) = 36 i + 3 k + 12.
  expectExact(reduce(OpKind::ReduceSum, iota234(), {1}), ty(DType::f32, {2, 4}),
              {12, 15, 18, 21, 48, 51, 54, 57});
  // Over k (as -1), kept: 4 (12 i + 4 j) + 6.
  expectExact(reduce(OpKind::ReduceSum, iota234(), {-1}, true), ty(DType::f32, {2, 3, 1}),
              {6, 22, 38, 54, 70, 86});
  // Over i and k: 4 * 12 + 8 * 4 j + 2 * 6 = 60 + 32 j, listed in either order and sign.
  expectExact(reduce(OpKind::ReduceSum, iota234(), {0, 2}), ty(DType::f32, {3}), {60, 92, 124});
  expectExact(reduce(OpKind::ReduceSum, iota234(), {-1, -3}, true), ty(DType::f32, {1, 3, 1}),
              {60, 92, 124});
  // Everything: 0 + 1 + ... + 23.
  expectExact(reduce(OpKind::ReduceSum, iota234(), {0, 1, 2}), ty(DType::f32, {}), {276});
  expectExact(reduce(OpKind::ReduceSum, iota234(), {0, 1, 2}, true), ty(DType::f32, {1, 1, 1}),
              {276});
  // No axes: nothing is reduced.
  expectExact(reduce(OpKind::ReduceSum, T(DType::f32, {2}, {1, 2}), {}), ty(DType::f32, {2}),
              {1, 2});
}

INTERP_OP_TEST(ReduceSum, IntegersAndOddSizes) {
  std::vector<int64_t> v;
  std::vector<int64_t> want(7, 0);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) {
      v.push_back((i + 1) * (j - 3));
      want[j] += (i + 1) * (j - 3);  // 15 (j - 3)
    }
  expectInts(reduce(OpKind::ReduceSum, TI(DType::i32, {5, 7}, v), {0}), ty(DType::i32, {7}), want);
  expectInts(reduce(OpKind::ReduceSum, TI(DType::i64, {3}, {k2p53, 1, 2}), {0}), ty(DType::i64, {}),
             {k2p53 + 3});
}

INTERP_OP_TEST(ReduceSum, SixteenBitRoundsOnlyTheResult) {
  // 256 + 1 + 1 = 258 is a bf16 value; summing in bf16 step by step would give 256
  // (256 + 1 ties back to 256 each time).
  expectExact(reduce(OpKind::ReduceSum, T(DType::bf16, {3}, {256, 1, 1}), {0}), ty(DType::bf16, {}),
              {258});
  expectExact(reduce(OpKind::ReduceSum, T(DType::f16, {3}, {2048, 1, 1}), {-1}), ty(DType::f16, {}),
              {2050});
  // Likewise f32: 1 + 2^-24 + 2^-24 is 1 + 2^-23 (one f32 ulp above 1), but 1 + 2^-24 alone
  // ties back to 1, so float accumulation would return 1.
  expectExact(reduce(OpKind::ReduceSum, T(DType::f32, {3}, {1, 0x1p-24, 0x1p-24}), {0}),
              ty(DType::f32, {}), {1 + 0x1p-23});
}

// ---- reduce_max
// ----------------------------------------------------------------------------------

INTERP_OP_TEST(ReduceMax, AxesKeepdimsAndInfinities) {
  // Over i and k: 12 + 4 j + 3.
  expectExact(reduce(OpKind::ReduceMax, iota234(), {0, -1}, true), ty(DType::f32, {1, 3, 1}),
              {15, 19, 23});
  expectExact(reduce(OpKind::ReduceMax, T(DType::f32, {2, 2}, {-kInf, -kInf, -kInf, kInf}), {1}),
              ty(DType::f32, {2}), {-kInf, kInf});
}

INTERP_OP_TEST(ReduceMax, NaNPropagates) {
  // NaN first, in the middle and last all win.
  expectExact(reduce(OpKind::ReduceMax,
                     T(DType::f64, {4, 3}, {kNaN, 1, 2, 1, kNaN, 5, 1, 2, kNaN, 1, 2, 3}), {1}),
              ty(DType::f64, {4}), {kNaN, kNaN, kNaN, 3});
}

INTERP_OP_TEST(ReduceMax, Integers) {
  expectInts(reduce(OpKind::ReduceMax, TI(DType::i32, {2, 3}, {-5, -3, -9, 4, 0, 2}), {-1}),
             ty(DType::i32, {2}), {-3, 4});
  expectInts(reduce(OpKind::ReduceMax, TI(DType::i64, {2}, {k2p53 + 1, k2p53}), {0}),
             ty(DType::i64, {}), {k2p53 + 1});
}

INTERP_OP_TEST(ReduceMax, OverZeroElementsIsAnError) {
  std::string msg = errorOf([] { reduce(OpKind::ReduceMax, Tensor(ty(DType::f32, {2, 0})), {1}); });
  EXPECT_NE(msg.find("reduce_max %out"), std::string::npos) << msg;
  EXPECT_NE(msg.find("zero elements"), std::string::npos) << msg;
}

// ---- reduce_mean
// ---------------------------------------------------------------------------------

INTERP_OP_TEST(ReduceMean, Floats) {
  // Over j: (36 i + 3 k + 12) / 3 = 12 i + k + 4.
  expectExact(reduce(OpKind::ReduceMean, iota234(), {-2}, true), ty(DType::f32, {2, 1, 4}),
              {4, 5, 6, 7, 16, 17, 18, 19});
  expectNear(reduce(OpKind::ReduceMean, T(DType::f64, {3}, {1, 1, 2}), {0}), ty(DType::f64, {}),
             {4.0 / 3}, 1e-16);
  // A mean over nothing is 0 / 0.
  expectExact(reduce(OpKind::ReduceMean, Tensor(ty(DType::f32, {2, 0})), {1}), ty(DType::f32, {2}),
              {kNaN, kNaN});
}

INTERP_OP_TEST(ReduceMean, IntegersTruncateTowardZero) {
  // 1.5 -> 1, -1.5 -> -1, 7.5 -> 7, -1.5 -> -1.
  expectInts(reduce(OpKind::ReduceMean, TI(DType::i32, {4, 2}, {1, 2, -1, -2, 7, 8, -3, 0}), {1}),
             ty(DType::i32, {4}), {1, -1, 7, -1});
  // -1/3 -> 0; exact beyond 2^53.
  expectInts(reduce(OpKind::ReduceMean, TI(DType::i64, {3}, {-1, -1, 1}), {0}), ty(DType::i64, {}),
             {0});
  expectInts(reduce(OpKind::ReduceMean, TI(DType::i64, {2}, {k2p53 + 1, k2p53 + 3}), {0}),
             ty(DType::i64, {}), {k2p53 + 2});
  std::string msg = errorOf([] {
    reduce(OpKind::ReduceMean, Tensor(ty(DType::i32, {0, 3})), {0});
  });
  EXPECT_NE(msg.find("reduce_mean"), std::string::npos) << msg;
}

// ---- softmax / log_softmax
// -----------------------------------------------------------------------

Tensor softmax(OpKind op, const Tensor& x, int64_t axis = -1) {
  return runOp(op, {x}, {{"axis", axis}});
}

INTERP_OP_TEST(Softmax, LastAxis) {
  // e^i / (e + e^2 + e^3) for i = 1, 2, 3; rows are shift invariant.
  expectNear(softmax(OpKind::Softmax, T(DType::f64, {2, 3}, {1, 2, 3, 101, 102, 103})),
             ty(DType::f64, {2, 3}),
             {0.09003057317038046, 0.24472847105479764, 0.6652409557748219, 0.09003057317038046,
              0.24472847105479764, 0.6652409557748219},
             1e-14);
}

INTERP_OP_TEST(Softmax, OtherAxis) {
  // Columns [0,0] -> halves; [1,0] -> e/(e+1), 1/(e+1); [0, ln 3] -> 1/4, 3/4.
  Tensor x = T(DType::f64, {2, 3}, {0, 1, 0, 0, 0, std::log(3.0)});
  std::vector<double> want{0.5, 0.7310585786300049, 0.25, 0.5, 0.2689414213699951, 0.75};
  expectNear(softmax(OpKind::Softmax, x, 0), ty(DType::f64, {2, 3}), want, 1e-14);
  expectNear(softmax(OpKind::Softmax, x, -2), ty(DType::f64, {2, 3}), want, 1e-14);
  // A middle axis of a rank-3 tensor: x[i, j, k] with j the softmax axis.
  Tensor y = T(DType::f64, {2, 2, 2}, {0, 0, 0, std::log(3.0), 1, 5, 1, 5});
  expectNear(softmax(OpKind::Softmax, y, 1), ty(DType::f64, {2, 2, 2}),
             {0.5, 0.25, 0.5, 0.75, 0.5, 0.5, 0.5, 0.5}, 1e-14);
}

INTERP_OP_TEST(Softmax, AllNegInfRowGivesZeros) {
  Tensor x = T(DType::f32, {3, 3}, {-kInf, -kInf, -kInf, 0, 0, -kInf, -kInf, 7, -kInf});
  expectExact(softmax(OpKind::Softmax, x), ty(DType::f32, {3, 3}), {0, 0, 0, 0.5, 0.5, 0, 0, 1, 0});
}

INTERP_OP_TEST(Softmax, LargeValuesDoNotOverflowAndNaNSpreads) {
  expectNear(softmax(OpKind::Softmax, T(DType::f32, {2, 2}, {1000, 1001, -1000, -1001})),
             ty(DType::f32, {2, 2}),
             {0.2689414213699951, 0.7310585786300049, 0.7310585786300049, 0.2689414213699951});
  expectExact(softmax(OpKind::Softmax, T(DType::f32, {3}, {1, kNaN, 2})), ty(DType::f32, {3}),
              {kNaN, kNaN, kNaN});
}

INTERP_OP_TEST(Softmax, Bf16RoundsTheResult) {
  expectExact(softmax(OpKind::Softmax, T(DType::bf16, {2, 2}, {0, 1, 3, 3})),
              ty(DType::bf16, {2, 2}),
              {roundTo(DType::bf16, 0.2689414213699951), roundTo(DType::bf16, 0.7310585786300049),
               0.5, 0.5});
}

INTERP_OP_TEST(LogSoftmax, Values) {
  // log(e^i / (e + e^2 + e^3)) = i - 3 - log(1 + e^-1 + e^-2).
  expectNear(softmax(OpKind::LogSoftmax, T(DType::f64, {3}, {1, 2, 3})), ty(DType::f64, {3}),
             {-2.4076059644443806, -1.4076059644443806, -0.4076059644443806}, 1e-14);
  // log(1 + e) = 1.3132616875182228; no overflow at 1000.
  expectNear(
      softmax(OpKind::LogSoftmax, T(DType::f32, {2, 2}, {1000, 1001, 0, 1}), 1),
      ty(DType::f32, {2, 2}),
      {-1.3132616875182228, -0.31326168751822286, -1.3132616875182228, -0.31326168751822286});
  expectNear(softmax(OpKind::LogSoftmax, T(DType::f64, {2, 2}, {0, 0, 0, std::log(3.0)}), 0),
             ty(DType::f64, {2, 2}),
             {-0.6931471805599453, std::log(0.25), -0.6931471805599453, std::log(0.75)}, 1e-14);
}

INTERP_OP_TEST(LogSoftmax, NegInfRows) {
  // All -inf: -inf everywhere. Partly -inf: -inf there, log(1/2) elsewhere.
  Tensor x = T(DType::f32, {2, 3}, {-kInf, -kInf, -kInf, 0, 0, -kInf});
  expectNear(softmax(OpKind::LogSoftmax, x), ty(DType::f32, {2, 3}),
             {-kInf, -kInf, -kInf, -0.6931471805599453, -0.6931471805599453, -kInf});
}

// ---- layer_norm
// ----------------------------------------------------------------------------------

Tensor layerNorm(const Tensor& x, const Tensor& g, const Tensor& b,
                 std::optional<double> eps = {}) {
  AttrMap a;
  if (eps) a["eps"] = *eps;
  return runOp(OpKind::LayerNorm, {x, g, b}, std::move(a));
}

INTERP_OP_TEST(LayerNorm, BiasedVarianceOverLastAxis) {
  // Rows [0, 2] and [5, 7]: mean 1 and 6, biased variance 1 (unbiased would be 2), so the
  // normalized rows are [-1, 1] exactly with eps = 0; then * gamma + beta.
  Tensor x = T(DType::f32, {2, 2}, {0, 2, 5, 7});
  expectExact(layerNorm(x, T(DType::f32, {2}, {2, 3}), T(DType::f32, {2}, {10, 20}), 0.0),
              ty(DType::f32, {2, 2}), {8, 23, 8, 23});
}

INTERP_OP_TEST(LayerNorm, DefaultEpsAndRank3) {
  // Row [1, 2, 3, 4]: mean 2.5, variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25.
  // Row [5, 5, 5, 5]: variance 0, so the output is beta.
  Tensor x = T(DType::f64, {2, 1, 4}, {1, 2, 3, 4, 5, 5, 5, 5});
  Tensor g = T(DType::f64, {4}, {1, 1, 2, -1});
  Tensor b = T(DType::f64, {4}, {0, 0.5, 0, 1});
  double s = 1 / std::sqrt(1.25 + 1e-5);
  expectNear(layerNorm(x, g, b), ty(DType::f64, {2, 1, 4}),
             {-1.5 * s, -0.5 * s + 0.5, 0.5 * s * 2, -1.5 * s + 1, 0, 0.5, 0, 1}, 1e-14);
  // eps matters for a zero-variance row only through the 0 / sqrt(eps) = 0 it yields; with a
  // tiny variance it shows: [0, 2e-3] has variance 1e-6, so with eps = 3e-6 the scale is 1/2e-3.
  expectNear(layerNorm(T(DType::f64, {2}, {0, 2e-3}), T(DType::f64, {2}, {1, 1}),
                       T(DType::f64, {2}, {0, 0}), 3e-6),
             ty(DType::f64, {2}), {-0.5, 0.5}, 1e-12);
}

// ---- rms_norm
// ----------------------------------------------------------------------------------

INTERP_OP_TEST(RmsNorm, RootMeanSquareOverLastAxis) {
  // Row [3, 4]: mean square 12.5; row [-1, 1]: 1. Then * gamma; eps 0.
  Tensor x = T(DType::f64, {2, 2}, {3, 4, -1, 1});
  const double s = 1 / std::sqrt(12.5);
  expectNear(runOp(OpKind::RmsNorm, {x, T(DType::f64, {2}, {2, -1})}, {{"eps", 0.0}}),
             ty(DType::f64, {2, 2}), {6 * s, -4 * s, -2, -1}, 1e-14);
  // The default eps (1e-6) shows on a tiny row: [1e-3, -1e-3] has mean square 1e-6.
  expectNear(runOp(OpKind::RmsNorm, {T(DType::f64, {1, 2}, {1e-3, -1e-3}), T(DType::f64, {2}, {1, 1})}, {}),
             ty(DType::f64, {1, 2}), {1e-3 / std::sqrt(2e-6), -1e-3 / std::sqrt(2e-6)}, 1e-12);
}

}  // namespace
}  // namespace tgc
