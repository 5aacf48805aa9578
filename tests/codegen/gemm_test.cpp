// GEMM against a naive double-precision triple loop, over shapes, transposes, leading
// dimensions, alpha/beta, batches with broadcast, thread counts and kernel configurations.
#include "codegen/gemm.h"

#include <gtest/gtest.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <set>
#include <stdexcept>
#include <type_traits>
#include <sys/mman.h>
#include <unistd.h>
#include <string>
#include <vector>

#include "codegen/gemm_pack.h"
#include "codegen/jit.h"
#include "support/thread_pool.h"
#include "tests/codegen/gemm_test_util.h"

namespace tgc::codegen {

// Names the kernel configuration in test failures instead of dumping its bytes.
void PrintTo(const GemmKernelConfig& c, std::ostream* os) {
  *os << c.name() << " kc=" << c.kc << " directAMaxN=" << c.directAMaxN;
}

namespace {

using testing::randomVector;

size_t storedA(const GemmDesc& d) { return static_cast<size_t>((d.transA ? d.k : d.m) * d.lda); }
size_t storedB(const GemmDesc& d) { return static_cast<size_t>((d.transB ? d.n : d.k) * d.ldb); }
size_t storedC(const GemmDesc& d) { return static_cast<size_t>(d.m * d.ldc); }

// Largest offset + 1 touched by a batched operand.
size_t extent(const GemmDesc& d, const std::vector<int64_t>& strides, size_t matrix) {
  size_t e = matrix;
  for (size_t i = 0; i < d.batch.size(); ++i)
    if (d.batch[i] > 0) e += static_cast<size_t>(strides[i] * (d.batch[i] - 1));
  return e;
}

// Runs desc on random operands and checks every element of C (and that the padding of C
// past column n is untouched) against a double-precision reference, with the error
// bound of a k-term dot product: (k + 4) eps (|alpha| sum |a||b| + |beta c|).
template <class T>
void checkGemm(const GemmEngine& engine, const GemmDesc& d, ThreadPool& pool, uint32_t seed = 1) {
  SCOPED_TRACE(::testing::Message() << "m=" << d.m << " n=" << d.n << " k=" << d.k << " tA=" << d.transA
                                    << " tB=" << d.transB << " lda=" << d.lda << " ldb=" << d.ldb
                                    << " ldc=" << d.ldc << " alpha=" << d.alpha << " beta=" << d.beta
                                    << " batch=" << d.batchCount() << " threads=" << pool.numThreads()
                                    << " config=" << engine.config().name());
  auto a = randomVector<T>(extent(d, d.strideA, storedA(d)), seed);
  auto b = randomVector<T>(extent(d, d.strideB, storedB(d)), seed + 1);
  auto c = randomVector<T>(extent(d, d.strideC, storedC(d)), seed + 2);
  if (d.beta == 0.0)  // C must not be read: poison it
    for (auto& x : c) x = std::numeric_limits<T>::quiet_NaN();
  const auto c0 = c;
  engine.run(d, a.data(), b.data(), c.data(), &pool);

  const double eps = std::numeric_limits<T>::epsilon();
  std::vector<size_t> touched(c.size(), 0);
  for (int64_t item = 0; item < d.batchCount(); ++item) {
    size_t oa = 0, ob = 0, oc = 0;
    int64_t rest = item;
    for (size_t dim = d.batch.size(); dim-- > 0;) {
      int64_t i = rest % d.batch[dim];
      rest /= d.batch[dim];
      oa += i * d.strideA[dim];
      ob += i * d.strideB[dim];
      oc += i * d.strideC[dim];
    }
    // op(B) as a dense k x n double matrix; rows of the reference accumulate over p
    // with unit stride in j (the loop vectorizes, so 1024x2048x512 takes a moment).
    std::vector<double> bm(static_cast<size_t>(d.k * d.n));
    for (int64_t p = 0; p < d.k; ++p)
      for (int64_t j = 0; j < d.n; ++j) bm[p * d.n + j] = b[ob + (d.transB ? j * d.ldb + p : p * d.ldb + j)];
    std::vector<double> sum(d.n), absSum(d.n);
    for (int64_t i = 0; i < d.m; ++i) {
      std::fill(sum.begin(), sum.end(), 0.0);
      std::fill(absSum.begin(), absSum.end(), 0.0);
      for (int64_t p = 0; p < d.k; ++p) {
        const double av = a[oa + (d.transA ? p * d.lda + i : i * d.lda + p)];
        const double* brow = bm.data() + p * d.n;
        for (int64_t j = 0; j < d.n; ++j) {
          sum[j] += av * brow[j];
          absSum[j] += std::abs(av * brow[j]);
        }
      }
      for (int64_t j = 0; j < d.n; ++j) {
        const size_t ci = oc + i * d.ldc + j;
        double old = d.beta == 0.0 ? 0.0 : static_cast<double>(c0[ci]);
        double want = d.alpha * sum[j] + d.beta * old;
        double tol = (d.k + 4) * eps * (std::abs(d.alpha) * absSum[j] + std::abs(d.beta * old)) + 1e-300;
        ASSERT_NEAR(static_cast<double>(c[ci]), want, tol) << "item " << item << " at (" << i << ", " << j << ")";
        touched[ci] = 1;
      }
    }
  }
  for (size_t i = 0; i < c.size(); ++i)
    if (!touched[i]) {
      const bool same = std::isnan(c0[i]) ? std::isnan(c[i]) : c[i] == c0[i];
      ASSERT_TRUE(same) << "element " << i << " outside the products was written";
    }
}

JitOptions uncached() {
  JitOptions o;
  o.useCache = false;
  return o;
}

// One JIT and engine per configuration, shared by the tests of a suite.
struct EngineSet {
  Jit jit{uncached()};
  std::unique_ptr<GemmEngine> engine;
  explicit EngineSet(const GemmKernelConfig& cfg) : engine(std::make_unique<GemmEngine>(jit, cfg)) {}
};

const GemmEngine& hostEngine(DType t) { return GemmEngine::host(t); }

constexpr int64_t kAlwaysDirect = int64_t{1} << 40;

struct Shape3 {
  int64_t m, n, k;
};

const std::vector<Shape3> kSweep = {
    {1, 1, 1},     {1, 1, 7},     {1, 17, 1},    {5, 1, 3},     {2, 3, 4},     {6, 16, 8},
    {7, 17, 9},    {5, 15, 31},   {13, 31, 97},  {12, 32, 256}, {11, 33, 257}, {37, 41, 43},
    {97, 101, 67}, {64, 64, 64},  {150, 70, 300}, {1, 300, 129}, {300, 2, 129}, {128, 128, 64},
    {255, 129, 513}, {20, 200, 37}};

TEST(Gemm, SweepAllTransposesF32) {
  ThreadPool pool(2);
  for (auto s : kSweep)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        checkGemm<float>(hostEngine(DType::f32), GemmDesc::contiguous(DType::f32, s.m, s.n, s.k, ta, tb), pool);
}

TEST(Gemm, SweepAllTransposesF64) {
  ThreadPool pool(2);
  for (auto s : kSweep)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        checkGemm<double>(hostEngine(DType::f64), GemmDesc::contiguous(DType::f64, s.m, s.n, s.k, ta, tb), pool);
}

TEST(Gemm, LargeF32) {
  ThreadPool pool(2);
  checkGemm<float>(hostEngine(DType::f32), GemmDesc::contiguous(DType::f32, 1024, 2048, 512), pool);
  checkGemm<float>(hostEngine(DType::f32), GemmDesc::contiguous(DType::f32, 509, 1031, 611, true, true), pool);
}

// A long K with few columns (the generator's dA = dY W^T, K = vocabulary): all of B is
// packed in one column block when it fits 8 MiB (n = 256), and in K super-blocks when a
// remainder sliver pushes it over (n = 264), transposed and not.
TEST(Gemm, LongKColumnBlocks) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (int64_t n : {256, 264})
      for (bool transB : {true, false})
        checkGemm<float>(hostEngine(DType::f32), GemmDesc::contiguous(DType::f32, 40, n, 8000, false, transB), pool);
  }
}

// When B over all of K exceeds 8 MiB, gemmBBlocking picks between narrower column blocks
// (each packs all of A again) and K super-blocks (each passes over C again). The base
// generator's dA (K = 8000, B^T) takes super-blocks of whole kc blocks over all columns;
// its dW (N = 8000) keeps all of K in narrower column blocks.
TEST(Gemm, KSuperBlocksAreChosenForLongK) {
  const GemmKernelConfig& cfg = hostEngine(DType::f32).config();
  const GemmBBlocking dA = gemmBBlocking(cfg, GemmDesc::contiguous(DType::f32, 1024, 512, 8000, false, true));
  EXPECT_EQ(dA.nc, 512);
  EXPECT_LT(dA.ks, 8000);
  EXPECT_EQ(dA.ks % cfg.kc, 0);
  const GemmBBlocking dW = gemmBBlocking(cfg, GemmDesc::contiguous(DType::f32, 512, 8000, 1024, true, false));
  EXPECT_EQ(dW.ks, 1024);
  EXPECT_LT(dW.nc, 8000);
  const GemmBBlocking small = gemmBBlocking(cfg, GemmDesc::contiguous(DType::f32, 1024, 256, 8000, false, true));
  EXPECT_EQ(small.ks, 8000) << "B of 8 MB fits one panel";
  EXPECT_EQ(small.nc, 256);
}

// K super-blocks against the reference: a last super-block that ends in a partial kc block,
// remainder columns, alpha/beta and a wider ldc (beta applies in the first super-block
// only), 1 and 2 threads; column sums over all super-blocks, the same bits on either
// thread count; an epilogue applied once, after the last super-block (ReLU of the
// product, bit for bit); and a shape that keeps narrower column blocks.
TEST(Gemm, KSuperBlocksMatchTheReference) {
  const GemmEngine& engine = hostEngine(DType::f32);
  GemmDesc d = GemmDesc::contiguous(DType::f32, 40, 264, 8000, false, true);
  const GemmBBlocking blocking = gemmBBlocking(engine.config(), d);
  ASSERT_LT(blocking.ks, d.k);
  ASSERT_NE(d.k % engine.config().kc, 0);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (bool transB : {true, false})
      checkGemm<float>(engine, GemmDesc::contiguous(DType::f32, 40, 264, 8000, false, transB), pool);
    GemmDesc scaled = GemmDesc::contiguous(DType::f32, 45, 270, 7800, true, true);
    ASSERT_LT(gemmBBlocking(engine.config(), scaled).ks, scaled.k);
    scaled.alpha = 0.5;
    scaled.beta = -0.75;
    scaled.ldc = 300;
    checkGemm<float>(engine, scaled, pool);
  }

  const auto a = randomVector<float>(static_cast<size_t>(d.m * d.k), 11);
  const auto b = randomVector<float>(storedB(d), 12);
  std::vector<double> want(static_cast<size_t>(d.n), 0.0), absSum(want.size(), 0.0);
  for (int64_t j = 0; j < d.n; ++j)
    for (int64_t k = 0; k < d.k; ++k) {
      want[j] += b[j * d.ldb + k];
      absSum[j] += std::abs(b[j * d.ldb + k]);
    }
  std::vector<float> plain(static_cast<size_t>(d.m * d.n));
  std::vector<std::vector<float>> sums;
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    GemmDesc withSums = d;
    withSums.sumB = true;
    std::vector<float> c(plain.size()), s(static_cast<size_t>(d.n));
    GemmEpilogueOperands ops;
    ops.sumB = s.data();
    engine.run(withSums, a.data(), b.data(), c.data(), &pool, ops);
    for (int64_t j = 0; j < d.n; ++j)
      ASSERT_NEAR(s[j], want[j], (d.k + 4) * 1.2e-7 * absSum[j]) << "column " << j;
    sums.push_back(s);
    engine.run(d, a.data(), b.data(), plain.data(), &pool);
    EXPECT_EQ(c, plain) << "the column sums changed the product";
    GemmDesc relu = d;
    relu.epilogue.activation = GemmActivation::relu;
    std::vector<float> r(plain.size());
    engine.run(relu, a.data(), b.data(), r.data(), &pool);
    for (size_t i = 0; i < r.size(); ++i) ASSERT_EQ(r[i], std::max(plain[i], 0.0f)) << "element " << i;
  }
  EXPECT_EQ(sums[0], sums[1]) << "the sums depend on the thread count";

  ThreadPool pool(2);
  const GemmDesc wide = GemmDesc::contiguous(DType::f32, 13, 8000, 1030, true, false);
  const GemmBBlocking columns = gemmBBlocking(engine.config(), wide);
  EXPECT_EQ(columns.ks, wide.k);
  EXPECT_LT(columns.nc, wide.n);
  checkGemm<float>(engine, wide, pool);
}

// A^T is packed eight k at a time across all slivers of a block (pack::copySlivers): K
// that is not a multiple of 8, a last sliver of 1-5 rows, row blocks past mc, and a
// leading dimension of 1024 floats (the weight gradient of a 1024-wide layer).
TEST(Gemm, TransposedAPanels) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (auto s : std::vector<Shape3>{{151, 40, 1030}, {6, 17, 8}, {13, 33, 15}, {300, 20, 3}}) {
      GemmDesc d = GemmDesc::contiguous(DType::f32, s.m, s.n, s.k, true, false);
      d.lda = 1024;
      checkGemm<float>(hostEngine(DType::f32), d, pool);
    }
  }
}

// The packing buffers are kept per thread and grow with the products; from 1 MiB on they
// are whole 2 MiB pages (huge pages). Packed B sizes below, above and across those steps,
// growing and shrinking again on the same threads: 0.3, 1.2, 2.1 (a second huge page),
// 4.3 MiB, then 1.2 again; f32 and f64 (twice the bytes for the same shape).
TEST(Gemm, PackingBuffersGrowAcrossHugePages) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (int64_t k : {64, 300, 520, 1050, 300}) {
      checkGemm<float>(hostEngine(DType::f32), GemmDesc::contiguous(DType::f32, 13, 1023, k), pool);
      checkGemm<double>(hostEngine(DType::f64), GemmDesc::contiguous(DType::f64, 7, 517, k, false, true), pool);
    }
  }
}

// pack::SourceLines (the lines of A that the next block's packA reads, prefetched while
// the current block runs) names exactly the lines holding the block's elements, for A
// and A^T, blocks at odd offsets and lengths, leading dimensions from dense to 1024, over
// any split into parts.
TEST(GemmPack, SourceLinesAreTheLinesPackAReads) {
  struct Block {
    bool trans;
    int64_t lda, i0, rows, p0, kc;
  };
  const std::vector<Block> blocks = {{false, 300, 0, 144, 0, 256},  {false, 301, 7, 13, 5, 61},
                                     {true, 256, 0, 144, 0, 512},   {true, 1024, 37, 112, 512, 488},
                                     {true, 9, 3, 5, 2, 7},         {false, 1, 0, 6, 0, 1},
                                     {true, 20, 19, 1, 0, 3}};
  for (const Block& b : blocks)
    for (int64_t parts : {1, 3, 16}) {
      SCOPED_TRACE(::testing::Message() << "trans=" << b.trans << " lda=" << b.lda << " i0=" << b.i0 << " rows="
                                        << b.rows << " p0=" << b.p0 << " kc=" << b.kc << " parts=" << parts);
      const int64_t stored = b.trans ? (b.p0 + b.kc) * b.lda : (b.i0 + b.rows) * b.lda;
      std::vector<float> a(static_cast<size_t>(stored) + 16);
      const float* base = a.data() + 3;  // not line-aligned
      std::set<uintptr_t> want, got;
      for (int64_t i = b.i0; i < b.i0 + b.rows; ++i)
        for (int64_t k = b.p0; k < b.p0 + b.kc; ++k)
          want.insert(reinterpret_cast<uintptr_t>(b.trans ? base + k * b.lda + i : base + i * b.lda + k) & ~uintptr_t{63});
      const pack::SourceLines lines(base, b.lda, b.trans, b.i0, b.rows, b.p0, b.kc);
      for (int64_t part = 0; part < parts; ++part)
        lines.forEachLine(part, parts, [&](const char* line) {
          EXPECT_EQ(reinterpret_cast<uintptr_t>(line) % 64, 0u);
          got.insert(reinterpret_cast<uintptr_t>(line));
        });
      EXPECT_EQ(got, want);
    }
  int calls = 0;
  pack::SourceLines().forEachLine(0, 1, [&](const char*) { ++calls; });
  EXPECT_EQ(calls, 0) << "an empty SourceLines names no line";
}

// pack::transposeSliver into slivers of 16 (B^T with AVX2) and of 6 (A, by 4x4 SSE
// transposes for full slivers), against the definition: k counts around the 4- and 16-k
// steps, full and partial slivers (zero padded), odd and power-of-two leading dimensions.
TEST(GemmPack, TransposeSliverMatchesTheDefinition) {
  for (int64_t ld : {int64_t{531}, int64_t{1024}})
    for (int64_t kc : {1, 7, 15, 16, 17, 33, 48, 515})
      for (int64_t w : {16, 15, 6, 5, 1}) {
        SCOPED_TRACE(::testing::Message() << "ld=" << ld << " kc=" << kc << " w=" << w);
        const auto src = randomVector<float>(static_cast<size_t>(16 * ld), 9);
        auto check = [&](auto width) {
          constexpr int W = decltype(width)::value;
          if (w > W) return;
          std::vector<float> dst(static_cast<size_t>(kc * W), -1.0f);
          pack::transposeSliver<float, W>(src.data() + 3, ld, w, kc, W, dst.data());
          for (int64_t k = 0; k < kc; ++k)
            for (int64_t i = 0; i < W; ++i)
              ASSERT_EQ(dst[k * W + i], i < w ? src[3 + i * ld + k] : 0.0f) << "W=" << W << " k=" << k << " i=" << i;
        };
        check(std::integral_constant<int, 16>());
        check(std::integral_constant<int, 6>());
      }
}

TEST(Gemm, ThreadCounts) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (auto s : std::vector<Shape3>{{3, 200, 50}, {200, 3, 50}, {61, 67, 71}, {300, 40, 20}})
      checkGemm<float>(hostEngine(DType::f32), GemmDesc::contiguous(DType::f32, s.m, s.n, s.k), pool);
  }
}

// Products of up to 8 rows read B in place (codegen/gemm_small_m.h): every row count
// around the 4-row groups, strip and 4-column edges, k tails of the 16-lane dot products,
// padded leading dimensions, alpha and beta, and column splits over two threads.
TEST(Gemm, FewRowsMatchTheReference) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (int64_t m : {1, 2, 3, 4, 5, 8, 9})
      for (int64_t n : {1, 5, 63, 65, 130, 1000})
        for (int64_t k : {1, 17, 300})
          for (bool ta : {false, true})
            for (bool tb : {false, true}) {
              GemmDesc d = GemmDesc::contiguous(DType::f32, m, n, k, ta, tb);
              if (n == 65) {
                d.lda += 3;
                d.ldb += 5;
                d.ldc += 2;
                d.alpha = -0.5;
                d.beta = 2;
              }
              checkGemm<float>(hostEngine(DType::f32), d, pool);
            }
  }
}

// B packed once (GemmEngine::packB) gives the bits of B packed on every call: the same
// panels, the same products. Shapes cover one panel, column blocks and K super-blocks.
template <class T>
void checkPackedB(DType dtype) {
  const GemmEngine& engine = hostEngine(dtype);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
             {32, 7187, 256}, {16, 33, 700}, {64, 1024, 600}, {9, 4000, 3000}, {200, 300, 5000}})
      for (bool tb : {false, true}) {
        GemmDesc d = GemmDesc::contiguous(dtype, m, n, k, false, tb);
        SCOPED_TRACE(::testing::Message() << m << "x" << n << "x" << k << " tB=" << tb << " threads=" << threads);
        const auto a = randomVector<T>(storedA(d), 1);
        const auto b = randomVector<T>(storedB(d), 2);
        std::vector<T> want(storedC(d)), got(storedC(d), T(-1));
        engine.run(d, a.data(), b.data(), want.data(), &pool);
        const auto packed = engine.packB(d, b.data());
        ASSERT_TRUE(packed);
        const std::vector<T> junk(b.size(), std::numeric_limits<T>::quiet_NaN());  // B unread
        engine.run(d, a.data(), junk.data(), got.data(), &pool, {}, {}, packed.get());
        ASSERT_EQ(got, want);
      }
  }
}

TEST(Gemm, PackedOnceEqualsPackedPerCall) {
  checkPackedB<float>(DType::f32);
  checkPackedB<double>(DType::f64);
}

TEST(Gemm, PackedOnceIsRefusedForAnotherShapeAndSkippedWhereBIsNotPackedPerCall) {
  const GemmEngine& engine = hostEngine(DType::f32);
  const GemmDesc d = GemmDesc::contiguous(DType::f32, 32, 64, 1000);
  const std::vector<float> a(storedA(d), 1.0f), b(storedB(d), 1.0f);
  std::vector<float> c(storedC(d));
  const auto packed = engine.packB(d, b.data());
  ASSERT_TRUE(packed);
  const GemmDesc other = GemmDesc::contiguous(DType::f32, 32, 64, 900);
  EXPECT_THROW(engine.run(other, a.data(), b.data(), c.data(), nullptr, {}, {}, packed.get()),
               std::invalid_argument);
  GemmDesc summed = d;
  summed.sumB = true;
  EXPECT_EQ(engine.packB(summed, b.data()), nullptr);
  GemmDesc batched = d;
  batched.addBatch(2);
  EXPECT_EQ(engine.packB(batched, b.data()), nullptr);
  // A small product keeps the batched path (codegen/gemm_batched.h).
  EXPECT_EQ(engine.packB(GemmDesc::contiguous(DType::f32, 8, 64, 64), b.data()), nullptr);
}

TEST(Gemm, LeadingDimensionsAndAlphaBeta) {
  ThreadPool pool(2);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      GemmDesc d = GemmDesc::contiguous(DType::f32, 23, 19, 29, ta, tb);
      d.lda += 5;
      d.ldb += 3;
      d.ldc += 7;
      for (auto [alpha, beta] : std::vector<std::pair<double, double>>{{1, 0}, {1, 1}, {2, 0.5}, {-0.5, 0}, {0, 2}}) {
        d.alpha = alpha;
        d.beta = beta;
        checkGemm<float>(hostEngine(DType::f32), d, pool);
      }
    }
}

TEST(Gemm, KZeroScalesC) {
  ThreadPool pool(1);
  GemmDesc d = GemmDesc::contiguous(DType::f64, 4, 5, 0);
  d.beta = 3;
  checkGemm<double>(hostEngine(DType::f64), d, pool);
  d.beta = 0;
  checkGemm<double>(hostEngine(DType::f64), d, pool);
}

TEST(Gemm, EmptyShapesDoNothing) {
  ThreadPool pool(2);
  std::vector<float> c(4, 7.0f);
  gemm(GemmDesc::contiguous(DType::f32, 0, 4, 3), nullptr, nullptr, c.data(), &pool);
  gemm(GemmDesc::contiguous(DType::f32, 4, 0, 3), nullptr, nullptr, c.data(), &pool);
  GemmDesc d = GemmDesc::contiguous(DType::f32, 2, 2, 2);
  d.addBatch(0);
  gemm(d, nullptr, nullptr, c.data(), &pool);
  for (float x : c) EXPECT_EQ(x, 7.0f);
}

TEST(Gemm, BatchesWithBroadcast) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        for (auto [ba, bb] : std::vector<std::pair<bool, bool>>{{false, false}, {true, false}, {false, true}}) {
          GemmDesc d = GemmDesc::contiguous(DType::f32, 13, 21, 17, ta, tb);
          d.addBatch(3, ba, bb);
          checkGemm<float>(hostEngine(DType::f32), d, pool);
        }
        // Two batch dimensions: [2, 5] with A shared along the inner one, B along the outer.
        GemmDesc d = GemmDesc::contiguous(DType::f32, 9, 10, 11, ta, tb);
        d.addBatch(5, /*broadcastA=*/true, false).addBatch(2, false, /*broadcastB=*/true);
        ASSERT_EQ(d.strideA[1], 0);
        ASSERT_EQ(d.strideB[0], 0);
        checkGemm<float>(hostEngine(DType::f32), d, pool);
      }
    // Many small products (attention heads) split across threads.
    GemmDesc heads = GemmDesc::contiguous(DType::f32, 32, 32, 16, false, true);
    heads.addBatch(16);
    checkGemm<float>(hostEngine(DType::f32), heads, pool);
    GemmDesc odd = GemmDesc::contiguous(DType::f64, 7, 5, 3);
    odd.addBatch(3);  // fewer items than 4x the threads and not a multiple: split inside
    checkGemm<double>(hostEngine(DType::f64), odd, pool);
  }
}

// Whole batch items run in runs of consecutive items per thread, each prefetching the
// next item's operands; runs end unevenly when the count does not divide, and items with
// padded leading dimensions or a broadcast operand prefetch spans with gaps or repeats.
TEST(Gemm, BatchItemRunsWithPrefetch) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t count : {1, 2, 7, 9, 13}) {
      GemmDesc d = GemmDesc::contiguous(DType::f32, 20, 24, 10);
      d.addBatch(count);
      checkGemm<float>(hostEngine(DType::f32), d, pool);
      GemmDesc t = GemmDesc::contiguous(DType::f32, 13, 40, 33, true, true);
      t.lda += 3;
      t.ldb += 5;
      t.ldc += 2;
      t.addBatch(count, false, /*broadcastB=*/true);
      checkGemm<float>(hostEngine(DType::f32), t, pool);
    }
  }
}

// Row and column chunks split evenly over 2 and 3 threads: sliver counts that are not a
// multiple of the chunk, and K over several kc blocks.
TEST(Gemm, BalancedChunksCoverEveryRowAndColumn) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (auto s : std::vector<Shape3>{{1024, 40, 30}, {1021, 33, 70}, {9, 1000, 20}, {40, 50, 1100}})
      checkGemm<float>(hostEngine(DType::f32), GemmDesc::contiguous(DType::f32, s.m, s.n, s.k), pool);
  }
}

// GemmDesc::sumB: the column sums of op(B) come out of the packing, for B as stored and
// transposed, K over several kc blocks, N over several nc blocks, and the paths that pack
// nothing (no rows, K = 0, alpha = 0); the product itself is unchanged; the sums are the
// same bits on 1 and 3 threads.
TEST(Gemm, SumBGivesTheColumnSumsOfOpB) {
  struct Case {
    int64_t m, n, k;
    bool transB;
    double alpha = 1.0;
  };
  const std::vector<Case> cases = {{5, 7, 3, false},     {64, 512, 513, false}, {20, 33, 1100, true},
                                   {7, 1100, 2000, false}, {0, 9, 17, false},   {4, 6, 0, false},
                                   {3, 40, 30, true, 0.0}};
  for (const Case& t : cases) {
    SCOPED_TRACE(::testing::Message() << "m=" << t.m << " n=" << t.n << " k=" << t.k << " tB=" << t.transB
                                      << " alpha=" << t.alpha);
    GemmDesc d = GemmDesc::contiguous(DType::f32, t.m, t.n, t.k, false, t.transB);
    d.alpha = t.alpha;
    d.sumB = true;
    auto a = randomVector<float>(static_cast<size_t>(std::max<int64_t>(1, t.m * t.k)), 3);
    auto b = randomVector<float>(std::max<size_t>(1, storedB(d)), 4);
    std::vector<double> want(t.n, 0.0), absSum(t.n, 0.0);
    for (int64_t j = 0; j < t.n; ++j)
      for (int64_t k = 0; k < t.k; ++k) {
        const double v = t.transB ? b[j * d.ldb + k] : b[k * d.ldb + j];
        want[j] += v;
        absSum[j] += std::abs(v);
      }
    std::vector<std::vector<float>> got;
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      std::vector<float> c(static_cast<size_t>(std::max<int64_t>(1, t.m * t.n))), sums(t.n, -7.0f);
      GemmEpilogueOperands ops;
      ops.sumB = sums.data();
      hostEngine(DType::f32).run(d, a.data(), b.data(), c.data(), &pool, ops);
      for (int64_t j = 0; j < t.n; ++j)
        ASSERT_NEAR(sums[j], want[j], (t.k + 4) * 1.2e-7 * absSum[j] + 1e-30) << "column " << j;
      got.push_back(sums);
    }
    EXPECT_EQ(got[0], got[1]) << "the sums depend on the thread count";
    GemmDesc plain = d;
    plain.sumB = false;
    ThreadPool pool(2);
    checkGemm<float>(hostEngine(DType::f32), plain, pool);
  }
  GemmDesc d = GemmDesc::contiguous(DType::f32, 4, 4, 4);
  d.sumB = true;
  std::vector<float> a(16, 1.0f), b(16, 1.0f), c(16);
  EXPECT_THROW(gemm(d, a.data(), b.data(), c.data()), std::invalid_argument) << "sumB without its output";
  d.addBatch(2);
  EXPECT_THROW(d.validate(), std::invalid_argument) << "sumB on a batch";
}

TEST(Gemm, InvalidDescriptionsAreRejected) {
  std::vector<float> buf(64);
  auto expectInvalid = [&](GemmDesc d, const std::string& what) {
    try {
      gemm(d, buf.data(), buf.data(), buf.data());
      FAIL() << "expected invalid_argument for " << what;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  GemmDesc d = GemmDesc::contiguous(DType::f32, 4, 4, 4);
  d.lda = 3;
  expectInvalid(d, "lda=3");
  d = GemmDesc::contiguous(DType::f32, 4, 4, 4, false, true);
  d.ldb = 2;
  expectInvalid(d, "ldb=2");
  d = GemmDesc::contiguous(DType::i32, 4, 4, 4);
  expectInvalid(d, "dtype i32");
  d = GemmDesc::contiguous(DType::f32, 2, 2, 2);
  d.batch = {2};
  d.strideA = {4};
  d.strideB = {4};
  d.strideC = {0};
  expectInvalid(d, "C cannot broadcast");
  d.strideC = {};
  expectInvalid(d, "strides");
  EXPECT_THROW(GemmEngine::host(DType::f64).run(GemmDesc::contiguous(DType::f32, 1, 1, 1), buf.data(),
                                                buf.data(), buf.data()),
               std::invalid_argument);
}

// Kernel configurations other than the host's run here too (LLVM splits or narrows the
// vectors), so the generator is checked for every register tile it makes, and tiny cache
// blocks make every blocking loop take many trips.
class GemmConfigs : public ::testing::TestWithParam<GemmKernelConfig> {};

TEST_P(GemmConfigs, MatchesReference) {
  const GemmKernelConfig& cfg = GetParam();
  EngineSet set(cfg);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (auto s : std::vector<Shape3>{{1, 1, 1}, {cfg.mr, cfg.nr, 5}, {cfg.mr + 1, cfg.nr - 1, 9},
                                      {45, 77, 39}, {100, 35, 70}})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          GemmDesc d = GemmDesc::contiguous(cfg.dtype, s.m, s.n, s.k, ta, tb);
          d.beta = (s.m % 2) ? 0.0 : 1.5;
          if (cfg.dtype == DType::f32)
            checkGemm<float>(*set.engine, d, pool);
          else
            checkGemm<double>(*set.engine, d, pool);
        }
  }
}

GemmKernelConfig makeConfig(DType t, int lanes, int mr, int nr, int unroll, bool fma, int64_t kc,
                            int64_t mcSlivers, int64_t ncSlivers, int64_t directAMaxN = 0) {
  GemmKernelConfig c;
  c.dtype = t;
  c.lanes = lanes;
  c.mr = mr;
  c.nr = nr;
  c.kUnroll = unroll;
  c.fma = fma;
  c.kc = kc;
  c.mc = mr * mcSlivers;
  c.nc = nr * ncSlivers;
  c.directAMaxN = directAMaxN;
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Tiles, GemmConfigs,
    ::testing::Values(makeConfig(DType::f32, 8, 6, 16, 4, true, 256, 24, 255),      // AVX2
                      makeConfig(DType::f32, 16, 12, 32, 4, true, 256, 12, 128),    // AVX-512
                      makeConfig(DType::f64, 8, 12, 16, 4, true, 128, 8, 64),       // AVX-512 f64
                      makeConfig(DType::f32, 4, 6, 8, 2, false, 64, 4, 8),          // SSE
                      makeConfig(DType::f64, 2, 3, 4, 3, true, 7, 2, 3),            // tiny blocks
                      makeConfig(DType::f32, 8, 6, 16, 4, true, 9, 1, 2),           // tiny blocks
                      makeConfig(DType::f32, 8, 1, 8, 1, true, 16, 3, 1),           // 1-row tile
                      // A read unpacked (GemmAForm::direct) whenever it is not transposed:
                      makeConfig(DType::f32, 8, 6, 16, 4, true, 256, 24, 255, kAlwaysDirect),
                      makeConfig(DType::f32, 16, 12, 32, 4, true, 13, 2, 3, kAlwaysDirect),
                      makeConfig(DType::f64, 4, 6, 8, 3, true, 10, 2, 2, kAlwaysDirect)),
    [](const auto& p) {
      return p.param.name() + "_kc" + std::to_string(p.param.kc) + (p.param.directAMaxN ? "_direct" : "");
    });

// `n` elements that end exactly where an inaccessible page begins: any read or write
// past the end faults.
template <class T>
class GuardedArray {
 public:
  explicit GuardedArray(size_t n) : n_(n) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = (n * sizeof(T) + page - 1) / page * page;
    size_ = bytes + page;
    base_ = static_cast<char*>(mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base_ == MAP_FAILED) throw std::runtime_error("mmap failed");
    mprotect(base_ + bytes, page, PROT_NONE);
    data_ = reinterpret_cast<T*>(base_ + bytes) - n;
    for (size_t i = 0; i < n; ++i) data_[i] = static_cast<T>(0.25 * static_cast<double>(i % 7));
  }
  ~GuardedArray() { munmap(base_, size_); }
  T* data() { return data_; }

 private:
  size_t n_, size_;
  char* base_;
  T* data_;
};

// Edge tiles, masked stores and unpacked A stay inside the operands (a stray access
// past any of them crashes the test).
TEST(Gemm, NeverTouchesMemoryPastTheOperands) {
  for (int64_t directAMaxN : {int64_t{0}, kAlwaysDirect}) {
    GemmKernelConfig cfg = GemmKernelConfig::forTarget(TargetSpec::host(), DType::f32);
    cfg.directAMaxN = directAMaxN;
    EngineSet set(cfg);
    ThreadPool pool(2);
    for (auto s : std::vector<Shape3>{{7, 13, 5}, {1, 1, 1}, {13, 3, 17}, {25, 33, 9}})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          GemmDesc d = GemmDesc::contiguous(DType::f32, s.m, s.n, s.k, ta, tb);
          d.beta = 1.0;
          GuardedArray<float> a(storedA(d)), b(storedB(d)), c(storedC(d));
          set.engine->run(d, a.data(), b.data(), c.data(), &pool);
          EXPECT_TRUE(std::isfinite(c.data()[storedC(d) - 1]));
        }
  }
}

// The micro-kernel compiles to FMAs on full vector registers of the host, with every
// accumulator in a register (no spill or reload anywhere), in both forms.
TEST(GemmKernel, AssemblyUsesHostVectorFmas) {
  Jit jit(uncached());
  auto cfg = GemmKernelConfig::forTarget(jit.target(), DType::f32);
  for (GemmAForm form : {GemmAForm::packed, GemmAForm::direct}) {
    llvm::LLVMContext ctx;
    llvm::Module m("k", ctx);
    emitGemmMicroKernel(m, cfg, "ukernel", form);
    jit.optimize(m);
    std::string text = jit.assembly(m);
    if (jit.target().vectorBits() == 512) {
      EXPECT_NE(text.find("zmm"), std::string::npos);
    } else if (jit.target().vectorBits() == 256) {
      EXPECT_NE(text.find("ymm"), std::string::npos);
    }
    if (cfg.fma) {
      EXPECT_NE(text.find("vfmadd"), std::string::npos) << text;
    }
    EXPECT_EQ(text.find("Spill"), std::string::npos) << text;
    EXPECT_EQ(text.find("Reload"), std::string::npos) << text;
  }
}

TEST(GemmKernel, ConfigFollowsTheTarget) {
  TargetSpec avx2{"x86_64-unknown-linux-gnu", "znver3", "+avx,+avx2,+fma,-avx512f"};
  auto c = GemmKernelConfig::forTarget(avx2, DType::f32);
  EXPECT_EQ(c.lanes, 8);
  EXPECT_EQ(c.mr, 6);
  EXPECT_EQ(c.nr, 16);
  EXPECT_TRUE(c.fma);
  EXPECT_EQ(GemmKernelConfig::forTarget(avx2, DType::f64).nr, 8);
  TargetSpec sse{"x86_64-unknown-linux-gnu", "x86-64", "+sse2,-avx,-fma"};
  c = GemmKernelConfig::forTarget(sse, DType::f32);
  EXPECT_EQ(c.lanes, 4);
  EXPECT_EQ(c.nr, 8);
  EXPECT_FALSE(c.fma) << "no FMA units: llvm.fmuladd, never a libm call per element";
  EXPECT_NO_THROW(c.validate());
  c.nr = 10;
  EXPECT_THROW(c.validate(), std::invalid_argument);
  c = GemmKernelConfig::forTarget(sse, DType::f64);
  c.mc = c.mr + 1;
  EXPECT_THROW(c.validate(), std::invalid_argument);
}

// The AVX-512 kernel, compiled for an AVX-512 CPU (not run: the host may lack it), keeps
// its 24 accumulators in zmm registers with no spills in the inner loop.
TEST(GemmKernel, Avx512KernelCompilesForSkylakeX) {
  JitOptions o = uncached();
  o.target.cpu = "skylake-avx512";
  o.target.features = "+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx2,+avx,+fma,+sse4.2";
  Jit jit(o);
  auto cfg = GemmKernelConfig::forTarget(jit.target(), DType::f32);
  EXPECT_EQ(cfg.lanes, 16);
  EXPECT_EQ(cfg.mr, 12);
  EXPECT_EQ(cfg.nr, 32);
  llvm::LLVMContext ctx;
  llvm::Module m("k", ctx);
  emitGemmMicroKernel(m, cfg, "ukernel");
  jit.optimize(m);
  std::string text = jit.assembly(m);
  EXPECT_NE(text.find("vfmadd231ps\t(%"), std::string::npos) << "broadcast folded into the FMA";
  EXPECT_NE(text.find("zmm"), std::string::npos);
  EXPECT_EQ(text.find("Spill"), std::string::npos) << text;
  EXPECT_EQ(text.find("Reload"), std::string::npos) << text;
}

}  // namespace
}  // namespace tgc::codegen
