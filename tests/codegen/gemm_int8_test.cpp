// The int8 GEMM (codegen/gemm_int8.h): the 32-bit sums against an exact integer reference,
// on VPDPBUSD (when the host has AVX512-VNNI or AVX-VNNI), on VPMADDWD (AVX2) and on the
// portable loops, which must agree bit for bit; the quantizers; the f32 GEMM against the dequantized operands; bad input refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "codegen/gemm_int8.h"
#include "tests/codegen/gemm_test_util.h"
#include "support/thread_pool.h"

namespace tgc::codegen {
namespace {

// int8 values in [-127, 127] (truncated from uniform doubles).
std::vector<int8_t> randomS8(size_t n, uint32_t seed) {
  return testing::randomVector<int8_t>(n, seed, -127.99, 127.99);
}

const Int8Kernel kKernels[] = {Int8Kernel::portable, Int8Kernel::avxvnni, Int8Kernel::avx512vnni, Int8Kernel::avx2,
                               Int8Kernel::best};

// Every shape edge: one row, rows past a multiple of 8, K not a multiple of 4, N past 32.
const std::vector<std::vector<int64_t>> kShapes = {
    {1, 1, 1}, {1, 33, 5}, {7, 31, 3}, {8, 32, 4}, {9, 64, 9}, {13, 100, 257}, {64, 512, 512}, {3, 7, 1024}};

TEST(GemmInt8, SumsAreExactOnEveryPath) {
  ThreadPool pool(2);
  for (const auto& s : kShapes) {
    const int64_t m = s[0], n = s[1], k = s[2];
    SCOPED_TRACE(::testing::Message() << m << "x" << n << "x" << k);
    const auto a = randomS8(static_cast<size_t>(m * (k + 3)), 1);  // row stride k + 3
    const auto wq = randomS8(static_cast<size_t>(k * n), 2);
    const Int8Weights w = packWeights(wq.data(), k, n, n, std::vector<float>(static_cast<size_t>(n), 1.0f));
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(w.at(kk, j), wq[static_cast<size_t>(kk * n + j)]);
    std::vector<int32_t> want(static_cast<size_t>(m * n), 0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t kk = 0; kk < k; ++kk)
          want[static_cast<size_t>(i * n + j)] += a[static_cast<size_t>(i * (k + 3) + kk)] * wq[static_cast<size_t>(kk * n + j)];
    for (Int8Kernel kernel : kKernels)
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<int32_t> got(static_cast<size_t>(m * (n + 1)), -1);  // ldc n + 1
        int8GemmS32(a.data(), m, k + 3, w, got.data(), n + 1, p, kernel);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j)
            ASSERT_EQ(got[static_cast<size_t>(i * (n + 1) + j)], want[static_cast<size_t>(i * n + j)])
                << "kernel " << static_cast<int>(kernel) << " at (" << i << ", " << j << ")";
      }
  }
  if (!hostHasVnni() || !hostHasAvxVnni() || !hostHasAvx2())
    GTEST_SKIP() << "this host lacks AVX512-VNNI, AVX-VNNI or AVX2: those kernels ran as the portable loops";
}

TEST(GemmInt8, ExtremesDoNotOverflow) {
  // K near the limit with every product at its largest magnitude, both signs.
  const int64_t m = 2, n = 33, k = 65532;
  std::vector<int8_t> a(static_cast<size_t>(m * k)), wq(static_cast<size_t>(k * n));
  for (int64_t kk = 0; kk < k; ++kk) {
    a[static_cast<size_t>(kk)] = 127;
    a[static_cast<size_t>(k + kk)] = -127;
    for (int64_t j = 0; j < n; ++j) wq[static_cast<size_t>(kk * n + j)] = j % 2 ? 127 : -127;
  }
  const Int8Weights w = packWeights(wq.data(), k, n, n, std::vector<float>(static_cast<size_t>(n), 1.0f));
  std::vector<int32_t> c(static_cast<size_t>(m * n));
  for (Int8Kernel kernel : kKernels) {
    int8GemmS32(a.data(), m, k, w, c.data(), n, nullptr, kernel);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t one = (j % 2 ? 127 : -127) * 127 * k;
      EXPECT_EQ(c[static_cast<size_t>(j)], one);
      EXPECT_EQ(c[static_cast<size_t>(n + j)], -one);
    }
  }
  std::vector<int8_t> big(static_cast<size_t>(65536));
  EXPECT_THROW(packWeights(big.data(), 65536, 1, 1, {1.0f}), std::invalid_argument);
}

TEST(GemmInt8, QuantizersRoundToTheNearestStep) {
  const std::vector<float> row = {0.5f, -1.0f, 0.25f, 0.0f, 1.0f / 254};
  std::vector<int8_t> q(row.size());
  float scale = 0;
  quantizeRows(row.data(), 1, static_cast<int64_t>(row.size()), 0, q.data(), &scale);
  EXPECT_FLOAT_EQ(scale, 1.0f / 127);
  EXPECT_EQ(q, (std::vector<int8_t>{64, -127, 32, 0, 0}));  // 63.5 and 0.5 round to even
  const std::vector<float> zeros(4, 0.0f);
  quantizeRows(zeros.data(), 1, 4, 0, q.data(), &scale);
  EXPECT_EQ(scale, 1.0f);
  const std::vector<float> bad = {1.0f, NAN};
  EXPECT_THROW(quantizeRows(bad.data(), 1, 2, 0, q.data(), &scale), std::invalid_argument);
  // Weights: per column.
  const std::vector<float> w = {2.0f, 0.1f, -1.0f, 0.2f};  // [2, 2]
  const Int8Weights p = quantizeWeights(w.data(), 2, 2, 2);
  EXPECT_FLOAT_EQ(p.scale[0], 2.0f / 127);
  EXPECT_FLOAT_EQ(p.scale[1], 0.2f / 127);
  EXPECT_EQ(p.at(0, 0), 127);
  EXPECT_EQ(p.at(1, 0), -64);  // -63.5 rounds to even
  EXPECT_EQ(p.at(1, 1), 127);
  EXPECT_EQ(p.colSum[0], 127 - 64);
}

TEST(GemmInt8, FloatGemmIsTheDequantizedProduct) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d;
  const int64_t m = 19, n = 70, k = 96;
  std::vector<float> a(static_cast<size_t>(m * k)), w(static_cast<size_t>(k * n)), bias(static_cast<size_t>(n));
  for (auto& x : a) x = d(rng);
  for (auto& x : w) x = d(rng);
  for (auto& x : bias) x = d(rng);
  const Int8Weights p = quantizeWeights(w.data(), k, n, n);
  std::vector<int8_t> q(static_cast<size_t>(m * k));
  std::vector<float> sa(static_cast<size_t>(m));
  quantizeRows(a.data(), m, k, k, q.data(), sa.data());
  std::vector<float> c(static_cast<size_t>(m * n));
  ThreadPool pool(2);
  int8Gemm(a.data(), m, k, p, bias.data(), c.data(), n, &pool);
  double err = 0, mag = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double deq = 0, exact = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        deq += static_cast<double>(q[static_cast<size_t>(i * k + kk)]) * p.at(kk, j);
        exact += static_cast<double>(a[static_cast<size_t>(i * k + kk)]) * w[static_cast<size_t>(kk * n + j)];
      }
      deq = deq * sa[static_cast<size_t>(i)] * p.scale[static_cast<size_t>(j)] + bias[static_cast<size_t>(j)];
      const double got = c[static_cast<size_t>(i * n + j)];
      EXPECT_NEAR(got, deq, 1e-5 * (std::fabs(deq) + 1)) << i << ", " << j;  // f32 rounding only
      err = std::max(err, std::fabs(got - exact - bias[static_cast<size_t>(j)]));
      mag = std::max(mag, std::fabs(exact));
    }
  // The quantization error itself: about 1% of the largest product here.
  EXPECT_LT(err, 0.03 * mag);
  // The vectorized quantizer and kernels give the portable path's bits (odd K: a tail).
  for (int64_t kk : {k, int64_t{37}}) {
    const Int8Weights p2 = quantizeWeights(w.data(), kk, n, n);
    std::vector<float> fast(static_cast<size_t>(m * n)), plain(fast.size());
    int8Gemm(a.data(), m, k, p2, nullptr, plain.data(), n, &pool, Int8Kernel::portable);
    for (Int8Kernel kernel : kKernels) {
      int8Gemm(a.data(), m, k, p2, nullptr, fast.data(), n, &pool, kernel);
      EXPECT_EQ(fast, plain) << "K " << kk << " kernel " << static_cast<int>(kernel);
    }
  }
}

}  // namespace
}  // namespace tgc::codegen
