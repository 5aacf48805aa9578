// Philox4x32-10 against the Random123 known-answer vectors, and the uniform mapping (four
// elements a call).
#include "ir/philox.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tgc {
namespace {

using Words = std::array<uint32_t, 4>;

TEST(Philox, KnownAnswerZero) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (Words{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
}

TEST(Philox, KnownAnswerAllOnes) {
  EXPECT_EQ(
      philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
      (Words{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
}

TEST(Philox, KnownAnswerPi) {
  // Counter and key are the hex digits of pi, as in Random123's kat_vectors.
  EXPECT_EQ(
      philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
      (Words{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, UniformIsTopBitsOfTheFourWords) {
  // Element i is word (i & 3) of the call with counter (offset + i / 4) split into two 32-bit
  // words, key = seed's halves: the four words of one call land on elements 4j .. 4j + 3.
  uint64_t seed = 0x0123456789abcdefull, offset = 0x00000001fffffffeull;
  for (uint64_t j = 0; j < 4; ++j) {
    uint64_t c = offset + j;  // crosses the 32-bit word boundary at j = 2
    Words w = philox4x32({static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0, 0},
                         {0x89abcdefu, 0x01234567u});
    std::array<float, 4> quad = philoxUniformQuad(seed, offset, j);
    for (uint64_t t = 0; t < 4; ++t) {
      const float want = static_cast<float>(w[t] >> 8) / 16777216.0f;
      EXPECT_EQ(philoxUniformAt(seed, offset, 4 * j + t), want) << j << " " << t;
      EXPECT_EQ(quad[t], want) << j << " " << t;
    }
  }
  // Counter 0, key 0 (KnownAnswerZero): elements 0-3 are the top 24 bits of its words.
  const uint32_t kat[4] = {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
  for (uint64_t t = 0; t < 4; ++t)
    EXPECT_EQ(philoxUniformAt(0, 0, t), static_cast<float>(kat[t] >> 8) / 16777216.0f);
  // A counter that wraps modulo 2^64: offset 2^64 - 1, quad 1 is counter 0.
  EXPECT_EQ(philoxUniformAt(0, ~uint64_t{0}, 5), static_cast<float>(kat[1] >> 8) / 16777216.0f);
}

TEST(Philox, UniformRangeMeanAndReproducibility) {
  const int n = 100000;
  std::vector<float> a(n);
  double sum = 0, sumSq = 0;
  for (int i = 0; i < n; ++i) {
    a[i] = philoxUniformAt(42, 7, static_cast<uint64_t>(i));
    ASSERT_GE(a[i], 0.0f) << i;
    ASSERT_LT(a[i], 1.0f) << i;
    sum += a[i];
    sumSq += static_cast<double>(a[i]) * a[i];
  }
  double mean = sum / n;
  double var = sumSq / n - mean * mean;
  // Standard error of the mean is sqrt(1/12 / n) ~ 0.0009; allow about 5 of them.
  EXPECT_NEAR(mean, 0.5, 0.005);
  EXPECT_NEAR(var, 1.0 / 12.0, 0.003);
  // Same (seed, offset, i): same value. An offset counts calls, four elements each:
  // (offset 7, i) == (offset 0, 28 + i), and offset 8 starts where offset 7's fifth element is.
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(philoxUniformAt(42, 7, static_cast<uint64_t>(i)), a[i]);
    EXPECT_EQ(philoxUniformAt(42, 0, static_cast<uint64_t>(i) + 28), a[i]);
    EXPECT_EQ(philoxUniformAt(42, 8, static_cast<uint64_t>(i)), a[i + 4]);
  }
  // A different seed gives a different stream.
  int same = 0;
  for (int i = 0; i < 1000; ++i) same += philoxUniformAt(43, 7, static_cast<uint64_t>(i)) == a[i];
  EXPECT_LT(same, 5);
}

}  // namespace
}  // namespace tgc
