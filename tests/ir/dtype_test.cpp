#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ir/dtype.h"
#include "ir/tensor.h"

using namespace tgc;

TEST(DType, NamesRoundTrip) {
  for (DType t : kAllDTypes) EXPECT_EQ(parseDType(dtypeName(t)), t);
  EXPECT_FALSE(parseDType("f8").has_value());
  EXPECT_EQ(dtypeName(DType::boolean), "bool");
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(floatToBF16(1.0f), 0x3F80);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(floatToBF16(1.00390625f), 0x3F80);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd mantissa) and 1.015625: rounds up.
  EXPECT_EQ(floatToBF16(1.01171875f), 0x3F82);
  EXPECT_EQ(bf16ToFloat(0xC040), -3.0f);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBF16(std::nanf("")))));
  EXPECT_EQ(bf16ToFloat(floatToBF16(INFINITY)), INFINITY);
}

TEST(DType, F16Conversions) {
  EXPECT_EQ(floatToF16(1.0f), 0x3C00);
  EXPECT_EQ(floatToF16(-2.0f), 0xC000);
  EXPECT_EQ(floatToF16(65504.0f), 0x7BFF);      // largest finite
  EXPECT_EQ(floatToF16(65520.0f), 0x7C00);      // ties to even overflow to inf
  EXPECT_EQ(floatToF16(65519.0f), 0x7BFF);
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -25)), 0x0000);  // halfway to it: ties to even (0)
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(floatToF16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie to even
  EXPECT_EQ(floatToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t v = static_cast<uint16_t>(h);
    float f = f16ToFloat(v);
    if (std::isnan(f)) continue;
    EXPECT_EQ(floatToF16(f), v) << std::hex << h;  // every f16 survives a round trip
  }
}

TEST(Tensor, StoresRoundToDType) {
  Tensor t(TensorType{DType::i32, {3}});
  t.setF(0, -2.7);
  t.setF(1, 1e20);
  t.setF(2, std::nan(""));
  EXPECT_EQ(t.getI(0), -2);
  EXPECT_EQ(t.getI(1), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(t.getI(2), 0);
  Tensor b(TensorType{DType::boolean, {2}});
  b.setF(0, 0.5);
  EXPECT_EQ(b.getF(0), 1.0);
  EXPECT_EQ(b.getF(1), 0.0);
  Tensor l(TensorType{DType::i64, {1}});
  l.setI(0, (int64_t{1} << 62) + 1);
  EXPECT_EQ(l.getI(0), (int64_t{1} << 62) + 1);
  Tensor f(TensorType{DType::f32, {1}}, {0.1});
  EXPECT_EQ(f.getF(0), static_cast<double>(0.1f));
}

TEST(Tensor, Strides) {
  EXPECT_EQ(stridesOf({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(stridesOf({}), (std::vector<int64_t>{}));
  EXPECT_EQ(numElements({}), 1);
  EXPECT_EQ(numElements({3, 0}), 0);
}

// retype reuses the storage for another shape or dtype when it is large enough: the bytes
// held stay, those beyond them are zero, and a type too large changes nothing.
TEST(Tensor, RetypeReusesStorageAndZeroesWhatItAdds) {
  Tensor t(TensorType{DType::f32, {4, 8}}, std::vector<double>(32, 1.5));
  const void* storage = t.data();
  ASSERT_TRUE(t.retype(TensorType{DType::f32, {2, 8}}));
  EXPECT_EQ(t.data(), storage);
  EXPECT_EQ(t.shape(), (Shape{2, 8}));
  EXPECT_EQ(t.as<float>()[15], 1.5f);
  ASSERT_TRUE(t.retype(TensorType{DType::f32, {4, 8}}));  // back within the capacity
  EXPECT_EQ(t.data(), storage);
  EXPECT_EQ(t.as<float>()[16], 0.0f);  // beyond the 16 floats it held: zero
  EXPECT_EQ(t.as<float>()[31], 0.0f);
  EXPECT_EQ(t.as<float>()[3], 1.5f);
  EXPECT_FALSE(t.retype(TensorType{DType::f32, {8, 8}}));
  EXPECT_EQ(t.shape(), (Shape{4, 8}));
  EXPECT_GE(t.capacityBytes(), 32 * sizeof(float));
}
