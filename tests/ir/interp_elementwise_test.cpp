// Interpreter: elementwise ops (unary, cast, binary arithmetic, comparisons, logic, where),
// numpy broadcasting, dtype rounding and integer semantics. Expected values are literals or
// closed forms written here.
#include <cstdint>
#include <numbers>

#include "tests/ir/interp_test_util.h"

namespace tgc {
namespace {

using namespace interp_test;

constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t k2p53 = int64_t{1} << 53;

// ---- unary -------------------------------------------------------------------------------------

INTERP_OP_TEST(Neg, FloatAndInt) {
  expectExact(runOp(OpKind::Neg, {T(DType::f32, {4}, {1.5, -2, 0, kInf})}), ty(DType::f32, {4}),
              {-1.5, 2, 0, -kInf});
  // Integers wrap: -MIN is MIN.
  expectInts(runOp(OpKind::Neg, {TI(DType::i32, {3}, {5, -7, kI32Min})}), ty(DType::i32, {3}),
             {-5, 7, kI32Min});
  expectInts(runOp(OpKind::Neg, {TI(DType::i64, {2}, {int64_t{1} << 62, -(k2p53 + 1)})}),
             ty(DType::i64, {2}), {-(int64_t{1} << 62), k2p53 + 1});
}

INTERP_OP_TEST(Abs, FloatAndInt) {
  expectExact(runOp(OpKind::Abs, {T(DType::f64, {4}, {-1.5, 2, -kInf, kNaN})}), ty(DType::f64, {4}),
              {1.5, 2, kInf, kNaN});
  expectInts(runOp(OpKind::Abs, {TI(DType::i64, {2}, {-(k2p53 + 1), 3})}), ty(DType::i64, {2}),
             {k2p53 + 1, 3});
  expectInts(runOp(OpKind::Abs, {TI(DType::i32, {2}, {kI32Min, -4})}), ty(DType::i32, {2}),
             {kI32Min, 4});
}

INTERP_OP_TEST(Exp, Values) {
  // exp(89) overflows f32 (max ~3.4e38) but not f64.
  expectNear(runOp(OpKind::Exp, {T(DType::f32, {5}, {0, 1, -1, 89, -kInf})}), ty(DType::f32, {5}),
             {1, 2.718281828459045, 0.36787944117144233, kInf, 0});
  expectNear(runOp(OpKind::Exp, {T(DType::f64, {2}, {1, 89})}), ty(DType::f64, {2}),
             {2.718281828459045, 4.4896128191743455e38}, 1e-15);
}

INTERP_OP_TEST(Log, Values) {
  expectNear(runOp(OpKind::Log, {T(DType::f64, {6}, {1, 2.718281828459045, 0, -1, kInf, 10})}),
             ty(DType::f64, {6}), {0, 1, -kInf, kNaN, kInf, 2.302585092994046}, 1e-15);
}

INTERP_OP_TEST(Sqrt, Values) {
  expectNear(runOp(OpKind::Sqrt, {T(DType::f32, {5}, {4, 2, 0, -1, kInf})}), ty(DType::f32, {5}),
             {2, 1.4142135623730951, 0, kNaN, kInf});
}

INTERP_OP_TEST(Rsqrt, Values) {
  expectExact(runOp(OpKind::Rsqrt, {T(DType::f32, {5}, {4, 0.25, 0, kInf, -1})}),
              ty(DType::f32, {5}), {0.5, 2, kInf, 0, kNaN});
}

INTERP_OP_TEST(Tanh, Values) {
  expectNear(runOp(OpKind::Tanh, {T(DType::f64, {5}, {0, 1, -1, -kInf, 20})}), ty(DType::f64, {5}),
             {0, 0.7615941559557649, -0.7615941559557649, -1, 1}, 1e-15);
}

INTERP_OP_TEST(Erf, Values) {
  expectNear(runOp(OpKind::Erf, {T(DType::f64, {4}, {0, 1, -0.5, kInf})}), ty(DType::f64, {4}),
             {0, 0.8427007929497149, -0.5204998778130465, 1}, 1e-15);
}

INTERP_OP_TEST(Sigmoid, Values) {
  // Large |x| saturate to 0 and 1 without NaN.
  expectNear(runOp(OpKind::Sigmoid, {T(DType::f64, {4}, {0, 2, -800, 800})}), ty(DType::f64, {4}),
             {0.5, 0.8807970779778823, 0, 1}, 1e-15);
}

INTERP_OP_TEST(Silu, Values) {
  // x * sigmoid(x): large negative x goes to -0 without NaN, large positive to x.
  expectNear(runOp(OpKind::Silu, {T(DType::f64, {4}, {0, 2, -800, 800})}), ty(DType::f64, {4}),
             {0, 1.7615941559557646, 0, 800}, 1e-15);
}

INTERP_OP_TEST(Relu, Values) {
  expectExact(runOp(OpKind::Relu, {T(DType::f32, {6}, {-1, 0, 2.5, kNaN, -kInf, kInf})}),
              ty(DType::f32, {6}), {0, 0, 2.5, kNaN, 0, kInf});
}

INTERP_OP_TEST(Gelu, ExactUsesErf) {
  // x * Phi(x) with Phi the standard normal CDF: Phi(1) = 0.8413447460685429,
  // Phi(2) = 0.9772498680518208, Phi(-3) = 0.0013498980316301035.
  expectNear(
      runOp(OpKind::Gelu, {T(DType::f64, {5}, {0, 1, -1, 2, -3})}), ty(DType::f64, {5}),
      {0, 0.8413447460685429, -0.15865525393145707, 1.9544997361036416, -0.004049694094890311},
      1e-14);
}

INTERP_OP_TEST(Gelu, TanhApproximation) {
  std::vector<double> xs{0, 1, -1, 2, -3, 0.5};
  std::vector<double> want;
  for (double x : xs)
    want.push_back(0.5 * x *
                   (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x))));
  Tensor got =
      runOp(OpKind::Gelu, {T(DType::f64, {6}, xs)}, {{"approximate", std::string("tanh")}});
  expectNear(got, ty(DType::f64, {6}), want, 1e-14);
  // It is an approximation: close to the exact value at 1 but not equal.
  EXPECT_NEAR(got.getF(1), 0.8411919906082768, 1e-12);
}

INTERP_OP_TEST(Gelu, UnknownApproximationIsAnError) {
  std::string msg = errorOf([] {
    runOp(OpKind::Gelu, {T(DType::f32, {1}, {1})}, {{"approximate", std::string("fast")}});
  });
  EXPECT_NE(msg.find("gelu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fast"), std::string::npos) << msg;
}

INTERP_OP_TEST(LogicalNot, Bool) {
  expectExact(runOp(OpKind::LogicalNot, {T(DType::boolean, {2, 2}, {0, 1, 1, 0})}),
              ty(DType::boolean, {2, 2}), {1, 0, 0, 1});
}

// ---- cast --------------------------------------------------------------------------------------

Tensor cast(const Tensor& x, DType to) { return runOp(OpKind::Cast, {x}, {{"dtype", to}}); }

INTERP_OP_TEST(Cast, FloatToIntTruncatesAndSaturates) {
  expectInts(cast(T(DType::f32, {7}, {2.7, -2.7, 1e10, -1e10, kNaN, 0.999, -kInf}), DType::i32),
             ty(DType::i32, {7}), {2, -2, kI32Max, kI32Min, 0, 0, kI32Min});
  expectInts(cast(T(DType::f64, {3}, {9.3e18, -1.5, kInf}), DType::i64), ty(DType::i64, {3}),
             {kI64Max, -1, kI64Max});
}

INTERP_OP_TEST(Cast, ToBoolIsNonZero) {
  expectExact(cast(T(DType::f32, {5}, {0, -0.0, 0.1, kNaN, -kInf}), DType::boolean),
              ty(DType::boolean, {5}), {0, 0, 1, 1, 1});
  expectExact(cast(TI(DType::i32, {3}, {0, 3, -1}), DType::boolean), ty(DType::boolean, {3}),
              {0, 1, 1});
}

INTERP_OP_TEST(Cast, IntToIntWraps) {
  expectInts(cast(TI(DType::i64, {3}, {(int64_t{1} << 32) + 5, -1, int64_t{1} << 31}), DType::i32),
             ty(DType::i32, {3}), {5, -1, kI32Min});
  expectInts(cast(TI(DType::boolean, {2}, {1, 0}), DType::i64), ty(DType::i64, {2}), {1, 0});
  expectInts(cast(TI(DType::i32, {2}, {kI32Min, 7}), DType::i64), ty(DType::i64, {2}),
             {kI32Min, 7});
}

INTERP_OP_TEST(Cast, IntToFloatRoundsOnce) {
  expectExact(cast(TI(DType::i32, {2}, {16777217, -3}), DType::f32), ty(DType::f32, {2}),
              {16777216, -3});
  // 2^53 + 1 is halfway between two doubles: ties to even gives 2^53.
  expectExact(cast(TI(DType::i64, {1}, {k2p53 + 1}), DType::f64), ty(DType::f64, {1}),
              {9007199254740992.0});
  // 2^60 + 2^36 + 1 is just above halfway between the floats 2^60 and 2^60 + 2^37; going
  // through double first would land exactly on the halfway point and round down to 2^60.
  int64_t v = (int64_t{1} << 60) + (int64_t{1} << 36) + 1;
  expectExact(cast(TI(DType::i64, {1}, {v}), DType::f32), ty(DType::f32, {1}),
              {std::ldexp(1.0, 60) + std::ldexp(1.0, 37)});
  expectExact(cast(TI(DType::boolean, {2}, {1, 0}), DType::f32), ty(DType::f32, {2}), {1, 0});
}

INTERP_OP_TEST(Cast, FloatToFloatRounds) {
  // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie and rounds to even (1.0);
  // 1 + 3 * 2^-8 is a tie between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  expectExact(cast(T(DType::f32, {3}, {1.00390625, 1.01171875, -2.5}), DType::bf16),
              ty(DType::bf16, {3}), {1.0, 1.015625, -2.5});
  // f16: 65520 overflows to inf, 65504 is the largest finite, 1e-8 is below half the
  // smallest subnormal (2^-24 ~ 5.96e-8), 0.1 rounds to 1638 * 2^-14.
  expectExact(cast(T(DType::f32, {4}, {65520, 65504, 1e-8, 0.1}), DType::f16), ty(DType::f16, {4}),
              {kInf, 65504, 0, 0.0999755859375});
  // Widening is exact: the f32 nearest 0.1 as a double.
  expectExact(cast(T(DType::f32, {1}, {0.1}), DType::f64), ty(DType::f64, {1}),
              {0.100000001490116119384765625});
}

// ---- binary arithmetic and broadcasting ---------------------------------------------------------

INTERP_OP_TEST(Add, SameShape) {
  expectExact(runOp(OpKind::Add, {T(DType::f32, {3}, {1, 2, 3}), T(DType::f32, {3}, {10, 20, 30})}),
              ty(DType::f32, {3}), {11, 22, 33});
  expectExact(
      runOp(OpKind::Add, {T(DType::f32, {2}, {kInf, 1}), T(DType::f32, {2}, {-kInf, kNaN})}),
      ty(DType::f32, {2}), {kNaN, kNaN});
}

INTERP_OP_TEST(Add, BroadcastBothDirections) {
  Tensor col = T(DType::f32, {2, 1}, {1, 2});
  Tensor row = T(DType::f32, {1, 3}, {10, 20, 30});
  std::vector<double> want{11, 21, 31, 12, 22, 32};
  expectExact(runOp(OpKind::Add, {col, row}), ty(DType::f32, {2, 3}), want);
  expectExact(runOp(OpKind::Add, {row, col}), ty(DType::f32, {2, 3}), want);
  // Fewer dims on either side: [3] against [2, 3].
  Tensor m = T(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor v = T(DType::f32, {3}, {100, 200, 300});
  expectExact(runOp(OpKind::Add, {m, v}), ty(DType::f32, {2, 3}), {101, 202, 303, 104, 205, 306});
  expectExact(runOp(OpKind::Add, {v, m}), ty(DType::f32, {2, 3}), {101, 202, 303, 104, 205, 306});
}

INTERP_OP_TEST(Add, Scalar) {
  Tensor s = T(DType::f64, {}, {0.5});
  Tensor m = T(DType::f64, {2, 2}, {1, 2, 3, 4});
  expectExact(runOp(OpKind::Add, {m, s}), ty(DType::f64, {2, 2}), {1.5, 2.5, 3.5, 4.5});
  expectExact(runOp(OpKind::Add, {s, m}), ty(DType::f64, {2, 2}), {1.5, 2.5, 3.5, 4.5});
  expectExact(runOp(OpKind::Add, {s, s}), ty(DType::f64, {}), {1});
}

INTERP_OP_TEST(Add, SizeOneMiddleDimAndOddSizes) {
  // a[i, 0, k] = 100 i + k broadcast over the middle dim of b[i, j, k] = (i*5 + j)*7 + k.
  std::vector<double> av, bv, want;
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 7; ++k) av.push_back(100 * i + k);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 7; ++k) {
        bv.push_back((i * 5 + j) * 7 + k);
        want.push_back(100 * i + k + (i * 5 + j) * 7 + k);
      }
  expectExact(runOp(OpKind::Add, {T(DType::f32, {3, 1, 7}, av), T(DType::f32, {3, 5, 7}, bv)}),
              ty(DType::f32, {3, 5, 7}), want);
  // [3, 1, 7] + [5, 1]: both sides broadcast at once to [3, 5, 7].
  std::vector<double> cv{1000, 2000, 3000, 4000, 5000}, want2;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 7; ++k) want2.push_back(100 * i + k + cv[j]);
  expectExact(runOp(OpKind::Add, {T(DType::f32, {3, 1, 7}, av), T(DType::f32, {5, 1}, cv)}),
              ty(DType::f32, {3, 5, 7}), want2);
}

INTERP_OP_TEST(Add, IntegersWrapAndStayExact) {
  expectInts(runOp(OpKind::Add, {TI(DType::i32, {2}, {kI32Max, -5}), TI(DType::i32, {2}, {1, 3})}),
             ty(DType::i32, {2}), {kI32Min, -2});
  // 2^53 + 1 is not a double; integer math must not go through one.
  expectInts(
      runOp(OpKind::Add, {TI(DType::i64, {2}, {k2p53, kI64Max}), TI(DType::i64, {2}, {1, 1})}),
      ty(DType::i64, {2}), {k2p53 + 1, kI64Min});
}

INTERP_OP_TEST(Add, RoundsToSixteenBitFloats) {
  // bf16 has 8 significant bits: 1 + 2^-8 ties to 1; 1 + 2^-7 is exact.
  expectExact(runOp(OpKind::Add,
                    {T(DType::bf16, {2}, {1, 1}), T(DType::bf16, {2}, {0.00390625, 0.0078125})}),
              ty(DType::bf16, {2}), {1, 1.0078125});
  // f16 has 11: above 2048 the spacing is 2, so 2048 + 1 ties to 2048 and 2048 + 3 to 2052.
  expectExact(runOp(OpKind::Add, {T(DType::f16, {2}, {2048, 2048}), T(DType::f16, {2}, {1, 3})}),
              ty(DType::f16, {2}), {2048, 2052});
  // The same sums in f32 are exact.
  expectExact(
      runOp(OpKind::Add, {T(DType::f32, {2}, {1, 2048}), T(DType::f32, {2}, {0.00390625, 1})}),
      ty(DType::f32, {2}), {1.00390625, 2049});
}

INTERP_OP_TEST(Sub, BroadcastAndIntegers) {
  expectExact(
      runOp(OpKind::Sub, {T(DType::f32, {2, 2}, {5, 6, 7, 8}), T(DType::f32, {2, 1}, {1, 2})}),
      ty(DType::f32, {2, 2}), {4, 5, 5, 6});
  expectExact(runOp(OpKind::Sub, {T(DType::f32, {}, {1}), T(DType::f32, {3}, {1, 2, 3})}),
              ty(DType::f32, {3}), {0, -1, -2});
  expectInts(
      runOp(OpKind::Sub, {TI(DType::i64, {2}, {kI64Min, k2p53 + 3}), TI(DType::i64, {2}, {1, 1})}),
      ty(DType::i64, {2}), {kI64Max, k2p53 + 2});
}

INTERP_OP_TEST(Mul, BroadcastOverflowAndIntegers) {
  expectExact(runOp(OpKind::Mul,
                    {T(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6}), T(DType::f32, {3}, {0.5, -1, 2})}),
              ty(DType::f32, {2, 3}), {0.5, -2, 6, 2, -5, 12});
  // 1e30 * 1e30 overflows f32 to inf (not f64); 0 * inf is NaN.
  expectExact(runOp(OpKind::Mul, {T(DType::f32, {2}, {1e30, 0}), T(DType::f32, {2}, {1e30, kInf})}),
              ty(DType::f32, {2}), {kInf, kNaN});
  expectNear(runOp(OpKind::Mul, {T(DType::f64, {1}, {1e30}), T(DType::f64, {1}, {1e30})}),
             ty(DType::f64, {1}), {1e60}, 1e-15);
  expectInts(
      runOp(OpKind::Mul, {TI(DType::i32, {2}, {65536, -3}), TI(DType::i32, {2}, {65536, 7})}),
      ty(DType::i32, {2}), {0, -21});
  expectInts(runOp(OpKind::Mul, {TI(DType::i64, {2}, {int64_t{1} << 32, 3}),
                                 TI(DType::i64, {2}, {int64_t{1} << 32, k2p53 + 1})}),
             ty(DType::i64, {2}), {0, 3 * (k2p53 + 1)});
}

INTERP_OP_TEST(Div, FloatsFollowIEEE) {
  expectExact(runOp(OpKind::Div,
                    {T(DType::f32, {5}, {1, -1, 0, 7, 1}), T(DType::f32, {5}, {0, 0, 0, 2, kInf})}),
              ty(DType::f32, {5}), {kInf, -kInf, kNaN, 3.5, 0});
  expectNear(runOp(OpKind::Div, {T(DType::f64, {2, 1}, {1, 2}), T(DType::f64, {3}, {3, 4, 8})}),
             ty(DType::f64, {2, 3}), {1.0 / 3, 0.25, 0.125, 2.0 / 3, 0.5, 0.25}, 1e-16);
}

INTERP_OP_TEST(Div, IntegersTruncateTowardZero) {
  expectInts(runOp(OpKind::Div, {TI(DType::i32, {6}, {7, -7, 7, -7, 6, kI32Min}),
                                 TI(DType::i32, {6}, {2, 2, -2, -2, 3, -1})}),
             ty(DType::i32, {6}), {3, -3, -3, 3, 2, kI32Min});
  expectInts(
      runOp(OpKind::Div, {TI(DType::i64, {3}, {k2p53 + 2, kI64Min, -9}), TI(DType::i64, {}, {-1})}),
      ty(DType::i64, {3}), {-(k2p53 + 2), kI64Min, 9});
}

INTERP_OP_TEST(Div, IntegerDivisionByZeroIsAnError) {
  std::string msg = errorOf([] {
    runOp(OpKind::Div, {TI(DType::i32, {3}, {4, 7, 1}), TI(DType::i32, {3}, {2, 0, 1})});
  });
  EXPECT_NE(msg.find("div %out"), std::string::npos) << msg;
  EXPECT_NE(msg.find("division by zero"), std::string::npos) << msg;
  EXPECT_NE(msg.find("7 / 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("element 1"), std::string::npos) << msg;
}

INTERP_OP_TEST(Pow, Values) {
  expectNear(runOp(OpKind::Pow, {T(DType::f64, {7}, {2, 4, -8, 0, kNaN, 2, -2}),
                                 T(DType::f64, {7}, {3, 0.5, 1.0 / 3, -1, 0, -1, 2})}),
             ty(DType::f64, {7}), {8, 2, kNaN, kInf, 1, 0.5, 4}, 1e-15);
  expectExact(runOp(OpKind::Pow, {T(DType::f32, {2, 2}, {1, 2, 3, 4}), T(DType::f32, {}, {2})}),
              ty(DType::f32, {2, 2}), {1, 4, 9, 16});
}

INTERP_OP_TEST(Maximum, NaNWinsAndBroadcast) {
  expectExact(runOp(OpKind::Maximum, {T(DType::f32, {4}, {1, kNaN, 3, -kInf}),
                                      T(DType::f32, {4}, {2, 0, kNaN, -5})}),
              ty(DType::f32, {4}), {2, kNaN, kNaN, -5});
  expectInts(runOp(OpKind::Maximum, {TI(DType::i64, {2, 2}, {1, -9, k2p53 + 1, 0}),
                                     TI(DType::i64, {2}, {0, k2p53})}),
             ty(DType::i64, {2, 2}), {1, k2p53, k2p53 + 1, k2p53});
}

INTERP_OP_TEST(Minimum, NaNWinsAndBroadcast) {
  expectExact(runOp(OpKind::Minimum, {T(DType::f32, {4}, {1, kNaN, 3, -kInf}),
                                      T(DType::f32, {4}, {2, 0, kNaN, -5})}),
              ty(DType::f32, {4}), {1, kNaN, kNaN, -kInf});
  expectInts(runOp(OpKind::Minimum, {TI(DType::i32, {3}, {1, -9, 5}), TI(DType::i32, {}, {0})}),
             ty(DType::i32, {3}), {0, -9, 0});
}

// ---- comparisons -------------------------------------------------------------------------------

// a and b cover: less, equal, NaN against NaN, -inf against -inf, greater.
const std::vector<double> kCmpA{1, 2, kNaN, -kInf, 3};
const std::vector<double> kCmpB{2, 2, kNaN, -kInf, 1};
// 2^53 and 2^53 + 1 are one double apart only as integers: they must compare exactly.
const std::vector<int64_t> kCmpIA{k2p53, k2p53 + 1, -4};
const std::vector<int64_t> kCmpIB{k2p53 + 1, k2p53 + 1, 3};

void checkCompare(OpKind op, std::vector<double> wantF, std::vector<double> wantI) {
  expectExact(runOp(op, {T(DType::f32, {5}, kCmpA), T(DType::f32, {5}, kCmpB)}),
              ty(DType::boolean, {5}), wantF);
  expectExact(runOp(op, {TI(DType::i64, {3}, kCmpIA), TI(DType::i64, {3}, kCmpIB)}),
              ty(DType::boolean, {3}), wantI);
}

INTERP_OP_TEST(Eq, FloatsIntsBools) {
  checkCompare(OpKind::Eq, {0, 1, 0, 1, 0}, {0, 1, 0});
  expectExact(runOp(OpKind::Eq, {T(DType::boolean, {2}, {0, 1}), T(DType::boolean, {}, {1})}),
              ty(DType::boolean, {2}), {0, 1});
}
INTERP_OP_TEST(Ne, FloatsAndInts) { checkCompare(OpKind::Ne, {1, 0, 1, 0, 1}, {1, 0, 1}); }
INTERP_OP_TEST(Lt, FloatsAndInts) { checkCompare(OpKind::Lt, {1, 0, 0, 0, 0}, {1, 0, 1}); }
INTERP_OP_TEST(Le, FloatsAndInts) { checkCompare(OpKind::Le, {1, 1, 0, 1, 0}, {1, 1, 1}); }
INTERP_OP_TEST(Gt, FloatsAndInts) { checkCompare(OpKind::Gt, {0, 0, 0, 0, 1}, {0, 0, 0}); }
INTERP_OP_TEST(Ge, FloatsAndInts) { checkCompare(OpKind::Ge, {0, 1, 0, 1, 1}, {0, 1, 0}); }

INTERP_OP_TEST(Lt, Broadcast) {
  expectExact(runOp(OpKind::Lt, {T(DType::f64, {2, 1}, {1, 2}), T(DType::f64, {3}, {0, 1.5, 3})}),
              ty(DType::boolean, {2, 3}), {0, 1, 1, 0, 0, 1});
}

// ---- logic and where ---------------------------------------------------------------------------

INTERP_OP_TEST(LogicalAnd, TruthTableBroadcast) {
  expectExact(runOp(OpKind::LogicalAnd,
                    {T(DType::boolean, {2, 1}, {0, 1}), T(DType::boolean, {2}, {0, 1})}),
              ty(DType::boolean, {2, 2}), {0, 0, 0, 1});
}

INTERP_OP_TEST(LogicalOr, TruthTableBroadcast) {
  expectExact(
      runOp(OpKind::LogicalOr, {T(DType::boolean, {2, 1}, {0, 1}), T(DType::boolean, {2}, {0, 1})}),
      ty(DType::boolean, {2, 2}), {0, 1, 1, 1});
}

INTERP_OP_TEST(Where, ThreeWayBroadcast) {
  // cond [2,1], a [1,3], b scalar -> [2,3].
  expectExact(runOp(OpKind::Where, {T(DType::boolean, {2, 1}, {1, 0}),
                                    T(DType::f32, {1, 3}, {1, 2, 3}), T(DType::f32, {}, {-1})}),
              ty(DType::f32, {2, 3}), {1, 2, 3, -1, -1, -1});
  // cond [3] against a [2,3] and b [2,1].
  expectExact(runOp(OpKind::Where,
                    {T(DType::boolean, {3}, {1, 0, 1}), T(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6}),
                     T(DType::f32, {2, 1}, {-1, -2})}),
              ty(DType::f32, {2, 3}), {1, -1, 3, 4, -2, 6});
}

INTERP_OP_TEST(Where, IntAndBoolBranchesAreExact) {
  expectInts(
      runOp(OpKind::Where, {T(DType::boolean, {2}, {1, 0}), TI(DType::i64, {2}, {k2p53 + 1, 0}),
                            TI(DType::i64, {2}, {0, -(k2p53 + 3)})}),
      ty(DType::i64, {2}), {k2p53 + 1, -(k2p53 + 3)});
  expectExact(runOp(OpKind::Where, {T(DType::boolean, {2}, {0, 1}), T(DType::boolean, {2}, {1, 1}),
                                    T(DType::boolean, {}, {0})}),
              ty(DType::boolean, {2}), {0, 1});
  // NaN in the branch not taken does not leak.
  expectExact(
      runOp(OpKind::Where, {T(DType::boolean, {2}, {1, 0}), T(DType::bf16, {2}, {1.5, kNaN}),
                            T(DType::bf16, {2}, {kNaN, 2.5})}),
      ty(DType::bf16, {2}), {1.5, 2.5});
}

}  // namespace
}  // namespace tgc
