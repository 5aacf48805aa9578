// bf16 GEMM (codegen/gemm_bf16.h) against a double-precision sum of the bf16 operands rounded
// once to bf16: shapes that cross the C tiles (1024 x 4096) and K blocks (2048), transposes,
// leading dimensions with padding that must stay untouched, alpha/beta, batches (widened
// whole, with a broadcast operand) and an empty contraction. Every test runs on both kernels:
// the widening path and the AVX512-BF16 one (skipped, visibly, on a CPU without it).
#include "codegen/gemm_bf16.h"

#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <limits>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "ir/dtype.h"
#include "support/thread_pool.h"

namespace tgc::codegen {
namespace {

std::vector<uint16_t> randomBf16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = floatToBF16(dist(rng));
  return v;
}

int64_t extent(const GemmDesc& d, int64_t rows, int64_t ld, const std::vector<int64_t>& strides) {
  int64_t e = rows * ld;
  for (size_t i = 0; i < d.batch.size(); ++i) e += strides[i] * (d.batch[i] - 1);
  return e;
}

// Runs d on random operands and checks each element of C against the reference: the exact
// products summed in double, times alpha, plus beta * C, rounded to bf16. The GEMM sums in
// f32, so it may land one bf16 step away where the f32 sum's error (k eps sum |ab|) crosses
// a rounding boundary; padding past column n must keep its bits.
void check(const GemmDesc& d, ThreadPool& pool) {
  SCOPED_TRACE(::testing::Message() << "m=" << d.m << " n=" << d.n << " k=" << d.k << " tA="
                                    << d.transA << " tB=" << d.transB << " batch=" << d.batch.size()
                                    << " alpha=" << d.alpha << " beta=" << d.beta);
  const auto a = randomBf16(static_cast<size_t>(extent(d, d.transA ? d.k : d.m, d.lda, d.strideA)), 1);
  const auto b = randomBf16(static_cast<size_t>(extent(d, d.transB ? d.n : d.k, d.ldb, d.strideB)), 2);
  const auto c0 = randomBf16(static_cast<size_t>(extent(d, d.m, d.ldc, d.strideC)), 3);
  std::vector<uint16_t> c = c0;
  // With beta = 0, C must not be read: its elements start as NaN (the padding keeps c0's
  // bits, which must survive).
  if (d.beta == 0)
    for (size_t at = 0; at < c.size(); ++at)
      if (static_cast<int64_t>(at) % d.ldc < d.n) c[at] = 0x7FC0;
  gemmBf16(d, a.data(), b.data(), c.data(), &pool);

  const int64_t items = d.batchCount();
  int bad = 0;
  for (int64_t item = 0; item < items; ++item) {
    int64_t oa = 0, ob = 0, oc = 0, rest = item;
    for (size_t i = d.batch.size(); i-- > 0;) {
      const int64_t j = rest % d.batch[i];
      rest /= d.batch[i];
      oa += j * d.strideA[i];
      ob += j * d.strideB[i];
      oc += j * d.strideC[i];
    }
    for (int64_t i = 0; i < d.m; ++i)
      for (int64_t j = 0; j < d.ldc; ++j) {
        const size_t at = static_cast<size_t>(oc + i * d.ldc + j);
        if (j >= d.n) {
          if (c[at] != c0[at] && bad++ < 5) ADD_FAILURE() << "padding (" << i << "," << j << ") written";
          continue;
        }
        double sum = 0, mag = 0;
        for (int64_t p = 0; p < d.k; ++p) {
          const double x = bf16ToFloat(a[static_cast<size_t>(oa + (d.transA ? p * d.lda + i : i * d.lda + p))]);
          const double y = bf16ToFloat(b[static_cast<size_t>(ob + (d.transB ? j * d.ldb + p : p * d.ldb + j))]);
          sum += x * y;
          mag += std::abs(x * y);
        }
        const double cin = bf16ToFloat(c0[at]);
        const double want = d.alpha * sum + (d.beta == 0 ? 0.0 : d.beta * cin);
        const double got = bf16ToFloat(c[at]);
        // One bf16 rounding of the result, plus the f32 accumulation's error bound.
        const double tol = std::ldexp(std::abs(want), -8) +
                           (d.k + 4) * std::ldexp(std::abs(d.alpha) * mag + std::abs(d.beta * cin), -23);
        if (!(std::abs(got - want) <= tol) && bad++ < 5)
          ADD_FAILURE() << "item " << item << " C(" << i << "," << j << ") = " << got << ", want "
                        << want << " +- " << tol;
      }
  }
  EXPECT_EQ(bad, 0);
}

// Runs each test on one kernel, restoring the default after.
class GemmBf16 : public ::testing::TestWithParam<Bf16GemmPath> {
 protected:
  void SetUp() override {
    if (GetParam() == Bf16GemmPath::Native && !bf16GemmHasNative())
      GTEST_SKIP() << "this CPU has no AVX512-BF16";
    saved_ = bf16GemmPath();
    setBf16GemmPath(GetParam());
  }
  void TearDown() override { setBf16GemmPath(saved_); }
  Bf16GemmPath saved_ = Bf16GemmPath::Widen;
};

TEST_P(GemmBf16, SmallShapesAndTransposes) {
  ThreadPool pool(2);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [m, n, k] : {std::array<int64_t, 3>{1, 1, 1}, {7, 5, 3}, {33, 65, 17}, {64, 64, 64}})
        check(GemmDesc::contiguous(DType::bf16, m, n, k, ta, tb), pool);
}

TEST_P(GemmBf16, CrossesTheCTilesAndKBlocks) {
  ThreadPool pool(2);
  // m over 1024 rows (two row tiles), k over 2048 (two K blocks accumulated in f32 before the
  // one rounding), n over 4096 columns (two column tiles), with every transpose.
  check(GemmDesc::contiguous(DType::bf16, 1030, 9, 2100, false, false), pool);
  check(GemmDesc::contiguous(DType::bf16, 1030, 9, 2100, true, true), pool);
  check(GemmDesc::contiguous(DType::bf16, 3, 4100, 2060, false, true), pool);
  check(GemmDesc::contiguous(DType::bf16, 3, 4100, 2060, true, false), pool);
}

TEST_P(GemmBf16, LeadingDimensionsAlphaBeta) {
  ThreadPool pool(2);
  // n = 40: both 16-column halves of the native tile's second vector read the old C.
  // k = 2100: beta applies once, before the first K block of the widening path.
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t k : {19, 2100}) {
        GemmDesc d = GemmDesc::contiguous(DType::bf16, 13, 40, k, ta, tb);
        d.lda += 3;
        d.ldb += 5;
        d.ldc += 4;  // padding columns must not be written
        d.alpha = 0.5;
        d.beta = -1.5;
        check(d, pool);
      }
}

// alpha = 0 is C = beta * C without reading A or B (as the f32 engine): an infinity in A
// must not turn C into NaN.
TEST_P(GemmBf16, ZeroAlphaReadsNeitherOperand) {
  ThreadPool pool(2);
  const int64_t m = 14, n = 35, k = 6;
  std::vector<uint16_t> a = randomBf16(static_cast<size_t>(m * k), 6);
  const std::vector<uint16_t> b = randomBf16(static_cast<size_t>(k * n), 7);
  const std::vector<uint16_t> c0 = randomBf16(static_cast<size_t>(m * n), 8);
  a[3] = floatToBF16(std::numeric_limits<float>::infinity());
  GemmDesc d = GemmDesc::contiguous(DType::bf16, m, n, k);
  d.alpha = 0;
  d.beta = 0.5;
  std::vector<uint16_t> c = c0;
  gemmBf16(d, a.data(), b.data(), c.data(), &pool);
  for (size_t i = 0; i < c.size(); ++i)
    EXPECT_EQ(bf16ToFloat(c[i]), 0.5f * bf16ToFloat(c0[i])) << "element " << i;
}

TEST_P(GemmBf16, BatchesWidenedWholeAndOneByOne) {
  ThreadPool pool(2);
  // Attention-like: 6 heads of 16x8 @ 8x16, and B broadcast over the outer dimension.
  GemmDesc d = GemmDesc::contiguous(DType::bf16, 16, 16, 8, false, true);
  d.addBatch(3).addBatch(2, false, true);
  check(d, pool);
  // Items too large to widen whole go tile by tile, one after another.
  GemmDesc big = GemmDesc::contiguous(DType::bf16, 1100, 8, 1000);
  big.addBatch(2, true, false);
  check(big, pool);
}

TEST_P(GemmBf16, EmptyContractionScalesC) {
  ThreadPool pool(1);
  GemmDesc d = GemmDesc::contiguous(DType::bf16, 3, 4, 0);
  d.beta = 2;
  check(d, pool);
  d.beta = 0;
  check(d, pool);
}

// The native kernel's register tile is 12 x 32 and its blocks 8 x 8 tiles, halved for
// small products: row and column counts around those edges, odd K (a half pair of zeros),
// with every transpose.
TEST_P(GemmBf16, TileAndBlockEdges) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto [m, n, k] : {std::array<int64_t, 3>{12, 32, 2}, {11, 31, 1}, {13, 33, 5},
                               {97, 257, 129}, {200, 300, 64}, {25, 520, 255}})
          check(GemmDesc::contiguous(DType::bf16, m, n, k, ta, tb), pool);
  }
}

// A NaN in A makes its row of C NaN and leaves the others finite; an infinity in B makes
// its column infinite.
TEST_P(GemmBf16, NaNAndInfinityPropagate) {
  ThreadPool pool(2);
  const int64_t m = 20, n = 40, k = 9;
  std::vector<uint16_t> a = randomBf16(static_cast<size_t>(m * k), 4);
  std::vector<uint16_t> b = randomBf16(static_cast<size_t>(k * n), 5);
  for (auto& x : a) x = floatToBF16(std::abs(bf16ToFloat(x)) + 0.25f);  // positive: no inf - inf
  for (auto& x : b) x = floatToBF16(std::abs(bf16ToFloat(x)) + 0.25f);
  a[static_cast<size_t>(13 * k + 4)] = floatToBF16(std::nanf(""));
  b[static_cast<size_t>(6 * n + 33)] = floatToBF16(std::numeric_limits<float>::infinity());
  std::vector<uint16_t> c(static_cast<size_t>(m * n), 0);
  gemmBf16(GemmDesc::contiguous(DType::bf16, m, n, k), a.data(), b.data(), c.data(), &pool);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float got = bf16ToFloat(c[static_cast<size_t>(i * n + j)]);
      if (i == 13) EXPECT_TRUE(std::isnan(got)) << "C(" << i << "," << j << ") = " << got;
      else if (j == 33) EXPECT_EQ(got, std::numeric_limits<float>::infinity()) << "C(" << i << "," << j << ")";
      else EXPECT_TRUE(std::isfinite(got)) << "C(" << i << "," << j << ") = " << got;
    }
}

// An f32 B (GemmDesc::bF32, a weight's cast folded into the GEMM) gives bit for bit the C of
// the same product on B rounded to bf16 by floatToBF16 first: the rounding happens where B
// is packed or widened, and the rest is the bf16 product. B holds exact ties (rounded to
// even), values that round up into the next binade, the largest finite f32 (rounds to
// infinity), a NaN and denormals; shapes cover both transposes, odd K, column tails, a
// batch with B broadcast (widened whole) and a product tiled over K blocks.
TEST_P(GemmBf16, F32BIsRoundedAsACastRoundsIt) {
  ThreadPool pool(2);
  auto run = [&](GemmDesc d) {
    SCOPED_TRACE(::testing::Message() << "m=" << d.m << " n=" << d.n << " k=" << d.k
                                      << " tB=" << d.transB << " batch=" << d.batch.size());
    const auto a = randomBf16(static_cast<size_t>(extent(d, d.transA ? d.k : d.m, d.lda, d.strideA)), 6);
    std::vector<float> b32(static_cast<size_t>(extent(d, d.transB ? d.n : d.k, d.ldb, d.strideB)));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    for (size_t i = 0; i < b32.size(); ++i) {
      float x = dist(rng);
      uint32_t u = std::bit_cast<uint32_t>(x);
      switch (i % 7) {
        case 1: u = (u & 0xFFFF0000u) | 0x8000u; break;  // a tie: even goes down, odd up
        case 3: u |= 0x7FFFu; break;                     // rounds up, maybe to the next binade
        default: break;
      }
      b32[i] = std::bit_cast<float>(u);
    }
    if (b32.size() > 5) {
      b32[2] = std::numeric_limits<float>::max();
      b32[4] = std::nanf("");
      b32[5] = std::numeric_limits<float>::denorm_min() * 3;
    }
    std::vector<uint16_t> b16(b32.size());
    for (size_t i = 0; i < b32.size(); ++i) b16[i] = floatToBF16(b32[i]);
    const size_t cn = static_cast<size_t>(extent(d, d.m, d.ldc, d.strideC));
    std::vector<uint16_t> want(cn, 0), got(cn, 0);
    gemmBf16(d, a.data(), b16.data(), want.data(), &pool);
    d.bF32 = true;
    gemmBf16(d, a.data(), b32.data(), got.data(), &pool);
    int bad = 0;
    for (size_t i = 0; i < cn; ++i)
      if (got[i] != want[i] && bad++ < 5)
        ADD_FAILURE() << "C element " << i << ": " << got[i] << ", want " << want[i];
  };
  for (bool tb : {false, true})
    for (auto [m, n, k] : {std::array<int64_t, 3>{1, 1, 1}, {13, 33, 5}, {25, 520, 255},
                           {97, 257, 129}, {64, 48, 512}})
      run(GemmDesc::contiguous(DType::bf16, m, n, k, false, tb));
  GemmDesc batched = GemmDesc::contiguous(DType::bf16, 16, 16, 8, false, true);
  batched.addBatch(3).addBatch(2, false, true);
  run(batched);
  run(GemmDesc::contiguous(DType::bf16, 40, 9, 2100, false, true));
}

// GemmDesc::sumB (a bias gradient next to its weight gradient): the column sums of op(B) in
// f32, each over k in order -- bit for bit a sequential f32 sum of the widened B -- with C
// still right, on both layouts of B, odd K, column tails past the 32-column slivers, and an
// alpha of 0 (C scaled only, the sums still made).
TEST_P(GemmBf16, ColumnSumsOfBAreSequentialF32Sums) {
  ThreadPool pool(2);
  for (bool tb : {false, true})
    for (auto [m, n, k] : {std::array<int64_t, 3>{1, 1, 1}, {13, 33, 5}, {64, 100, 1024},
                           {7, 520, 255}})
      for (double alpha : {1.0, 0.0}) {
        SCOPED_TRACE(::testing::Message() << "m=" << m << " n=" << n << " k=" << k << " tB=" << tb
                                          << " alpha=" << alpha);
        GemmDesc d = GemmDesc::contiguous(DType::bf16, m, n, k, false, tb);
        d.alpha = alpha;
        d.sumB = true;
        const auto a = randomBf16(static_cast<size_t>(m * k), 8);
        const auto b = randomBf16(static_cast<size_t>(k * n), 9);
        std::vector<uint16_t> c(static_cast<size_t>(m * n), 0), plain(c.size(), 0);
        std::vector<float> sums(static_cast<size_t>(n), -1.0f);
        gemmBf16(d, a.data(), b.data(), c.data(), &pool, sums.data());
        GemmDesc without = d;
        without.sumB = false;
        gemmBf16(without, a.data(), b.data(), plain.data(), &pool);
        EXPECT_EQ(c, plain) << "the sums changed C";
        for (int64_t j = 0; j < n; ++j) {
          float want = 0;
          for (int64_t p = 0; p < k; ++p)
            want += bf16ToFloat(b[static_cast<size_t>(tb ? j * k + p : p * n + j)]);
          EXPECT_EQ(sums[static_cast<size_t>(j)], want) << "column " << j;
        }
      }
  // No rows of A: C is empty, the sums are still B's.
  GemmDesc noRows = GemmDesc::contiguous(DType::bf16, 0, 3, 2);
  noRows.sumB = true;
  const std::vector<uint16_t> b6{floatToBF16(1), floatToBF16(2), floatToBF16(3),
                                 floatToBF16(4), floatToBF16(5), floatToBF16(6)};
  std::vector<float> s3(3, -1.0f);
  uint16_t none = 0;
  gemmBf16(noRows, &none, b6.data(), &none, &pool, s3.data());
  EXPECT_EQ(s3, (std::vector<float>{5, 7, 9}));

  GemmDesc d = GemmDesc::contiguous(DType::bf16, 2, 2, 2);
  d.sumB = true;
  std::vector<uint16_t> two(4, 0);
  EXPECT_THROW(gemmBf16(d, two.data(), two.data(), two.data(), &pool), std::invalid_argument)
      << "sumB without an output";
}

INSTANTIATE_TEST_SUITE_P(Paths, GemmBf16,
                         ::testing::Values(Bf16GemmPath::Native, Bf16GemmPath::Widen),
                         [](const ::testing::TestParamInfo<Bf16GemmPath>& p) {
                           return p.param == Bf16GemmPath::Native ? "Native" : "Widen";
                         });

TEST(GemmBf16Api, RejectsWhatItDoesNotRun) {
  EXPECT_THROW(validateGemmBf16(GemmDesc::contiguous(DType::f32, 2, 2, 2)), std::invalid_argument);
  GemmDesc s = GemmDesc::contiguous(DType::bf16, 2, 2, 2);
  s.sumB = true;
  s.bF32 = true;  // column sums of an f32 B: not a case the executable makes
  EXPECT_THROW(validateGemmBf16(s), std::invalid_argument);
  s.bF32 = false;
  s.addBatch(2);  // column sums of a batch of products
  EXPECT_THROW(validateGemmBf16(s), std::invalid_argument);
  GemmDesc d = GemmDesc::contiguous(DType::bf16, 2, 2, 2);
  d.lda = 1;
  EXPECT_THROW(validateGemmBf16(d), std::invalid_argument);
  GemmDesc f = GemmDesc::contiguous(DType::f32, 2, 2, 2);
  f.bF32 = true;  // an f32 B rounded to bf16 means nothing in an f32 product
  EXPECT_THROW(f.validate(), std::invalid_argument);
  GemmDesc ok = GemmDesc::contiguous(DType::bf16, 2, 2, 2);
  ok.bF32 = true;
  EXPECT_NO_THROW(validateGemmBf16(ok));
}

}  // namespace
}  // namespace tgc::codegen
