// The batched GEMM's small-item path (codegen/gemm_batched.h) against a double-precision
// reference: batched shapes with odd sizes, transposes, broadcast operands, padded leading
// dimensions, alpha/beta, epilogues (bias, per-item addend and mask), one and many items,
// one and two threads, f32 and f64.
// Every case first checks that it takes that path (batched::smallItems), so a change of
// the dispatch cannot turn these into tests of the general path unnoticed.
#include "codegen/gemm_batched.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "codegen/gemm.h"
#include "codegen/gemm_pack.h"
#include "support/thread_pool.h"
#include "tests/codegen/gemm_test_util.h"

namespace tgc::codegen {
namespace {

using testing::randomVector;

// Elements an operand spans: its last item's offset plus one matrix.
size_t extent(const GemmDesc& d, const std::vector<int64_t>& strides, int64_t matrix) {
  int64_t e = matrix;
  for (size_t i = 0; i < d.batch.size(); ++i) e += strides[i] * (d.batch[i] - 1);
  return static_cast<size_t>(e);
}

struct Case {
  int64_t batch, m, n, k;
  bool transA = false, transB = false;
  bool broadcastA = false, broadcastB = false;
  int64_t pad = 0;  // added to every leading dimension
  double alpha = 1, beta = 0;
  bool epilogue = false;  // bias + addend (per item) + relu + scale
  bool mask = false;      // a bool-byte mask per item (keep where nonzero)
};

// Runs the case with the host engine and checks every element of C, and that C's
// padding columns are untouched, against sum_k op(A) op(B) in double (then the epilogue),
// within (k + 4) eps of the magnitudes summed.
template <class T>
void check(const Case& cs, int threads) {
  const DType dtype = sizeof(T) == 4 ? DType::f32 : DType::f64;
  GemmDesc d = GemmDesc::contiguous(dtype, cs.m, cs.n, cs.k, cs.transA, cs.transB);
  d.lda += cs.pad;
  d.ldb += cs.pad;
  d.ldc += cs.pad;
  d.alpha = cs.alpha;
  d.beta = cs.beta;
  d.addBatch(cs.batch, cs.broadcastA, cs.broadcastB);
  if (cs.epilogue) {
    d.epilogue.bias = true;
    d.epilogue.addend = true;
    d.epilogue.ldAddend = cs.n + 3;
    d.epilogue.strideAddend = {cs.m * (cs.n + 3)};
    d.epilogue.activation = GemmActivation::relu;
    d.epilogue.scale = 0.5;
  }
  if (cs.mask) {
    d.epilogue.mask = GemmMask::nonzero;
    d.epilogue.ldMask = cs.n + 1;
    d.epilogue.strideMask = {cs.m * (cs.n + 1)};
  }
  SCOPED_TRACE(::testing::Message() << cs.batch << " x (" << cs.m << "x" << cs.n << "x" << cs.k << ") tA=" << cs.transA
                                    << " tB=" << cs.transB << " bcA=" << cs.broadcastA << " bcB=" << cs.broadcastB
                                    << " pad=" << cs.pad << " beta=" << cs.beta << " epi=" << cs.epilogue << " mask=" << cs.mask
                                    << " threads=" << threads << (sizeof(T) == 4 ? " f32" : " f64"));
  const GemmEngine& engine = GemmEngine::host(dtype);
  ASSERT_TRUE(batched::smallItems(engine.config(), d));

  auto a = randomVector<T>(extent(d, d.strideA, (cs.transA ? cs.k : cs.m) * d.lda), 1);
  auto b = randomVector<T>(extent(d, d.strideB, (cs.transB ? cs.n : cs.k) * d.ldb), 2);
  auto c = randomVector<T>(extent(d, d.strideC, cs.m * d.ldc), 3);
  if (cs.beta == 0)  // C must not be read
    for (size_t i = 0; i < c.size(); ++i)
      if (static_cast<int64_t>(i % d.ldc) < cs.n) c[i] = std::numeric_limits<T>::quiet_NaN();
  const auto c0 = c;
  auto bias = randomVector<T>(cs.n, 4);
  auto addend = randomVector<T>(static_cast<size_t>(cs.batch * cs.m * (cs.n + 3)), 5);
  std::vector<unsigned char> mask(static_cast<size_t>(cs.batch * cs.m * (cs.n + 1)));
  std::mt19937 rng(6);
  for (auto& x : mask) x = static_cast<unsigned char>(rng() % 2);
  GemmEpilogueOperands ops;
  if (cs.epilogue) {
    ops.bias = bias.data();
    ops.addend = addend.data();
  }
  if (cs.mask) ops.mask = mask.data();
  ThreadPool pool(threads);
  engine.run(d, a.data(), b.data(), c.data(), &pool, ops);

  const double eps = std::numeric_limits<T>::epsilon();
  for (int64_t item = 0; item < cs.batch; ++item) {
    const T* ai = a.data() + item * d.strideA[0];
    const T* bi = b.data() + item * d.strideB[0];
    const int64_t oc = item * d.strideC[0];
    for (int64_t i = 0; i < cs.m; ++i)
      for (int64_t j = 0; j < d.ldc; ++j) {
        const size_t at = static_cast<size_t>(oc + i * d.ldc + j);
        if (j >= cs.n) {  // padding
          ASSERT_EQ(c[at], c0[at]) << "padding written at item " << item << " (" << i << ", " << j << ")";
          continue;
        }
        double s = 0, mag = 0;
        for (int64_t p = 0; p < cs.k; ++p) {
          const double x = cs.transA ? ai[p * d.lda + i] : ai[i * d.lda + p];
          const double y = cs.transB ? bi[j * d.ldb + p] : bi[p * d.ldb + j];
          s += x * y;
          mag += std::abs(x * y);
        }
        const double old = cs.beta != 0 ? cs.beta * c0[at] : 0.0;  // c0 is NaN when beta == 0
        double want = cs.alpha * s + old;
        double bound = (cs.k + 4) * eps * (std::abs(cs.alpha) * mag + std::abs(old)) + 1e-30;
        if (cs.epilogue) {
          want += bias[j] + addend[item * cs.m * (cs.n + 3) + i * (cs.n + 3) + j];
          want = std::max(want, 0.0) * 0.5;
          bound += 4 * eps * (std::abs(want) + 1);
        }
        if (cs.mask && !mask[item * cs.m * (cs.n + 1) + i * (cs.n + 1) + j]) {  // masked: exactly 0
          want = 0;
          bound = 0;
        }
        ASSERT_NEAR(c[at], want, bound) << "item " << item << " (" << i << ", " << j << ")";
      }
  }
}

TEST(GemmBatched, TransformerShapes) {
  for (int threads : {1, 2}) {
    check<float>({8, 128, 128, 64}, threads);                      // attention's scores x V
    check<float>({8, 128, 64, 128, false, true}, threads);         // q k^T
  }
}

TEST(GemmBatched, OddSizesAndTransposes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int threads : {1, 2}) {
        check<float>({5, 13, 37, 29, ta, tb}, threads);
        check<float>({3, 1, 1, 1, ta, tb}, threads);
        check<float>({4, 7, 17, 3, ta, tb}, threads);  // k below the SSE transposition's 4
        check<float>({3, 50, 200, 19, ta, tb}, threads);  // n past the unpacked-A limit: A packed
      }
}

TEST(GemmBatched, BroadcastPaddingAlphaBeta) {
  check<float>({6, 30, 40, 21, false, false, true, false}, 2);
  check<float>({6, 30, 40, 21, false, true, false, true}, 2);
  check<float>({5, 25, 33, 18, true, true, false, false, 5}, 2);
  check<float>({5, 25, 33, 18, false, false, false, false, 3, -0.5, 0.75}, 1);
  check<float>({5, 25, 33, 18, false, true, false, false, 1, 2.0, 1.0}, 2);
}

TEST(GemmBatched, Epilogues) {
  for (int threads : {1, 2}) {
    check<float>({4, 31, 45, 20, false, false, false, false, 0, 1, 0, true}, threads);
    check<float>({4, 31, 45, 20, true, true, false, true, 2, 1.5, 0.5, true}, threads);
    check<float>({5, 26, 35, 24, false, true, false, false, 0, 1, 0, false, true}, threads);
    check<float>({3, 26, 35, 24, false, false, false, false, 1, 1, 0, true, true}, threads);
  }
}

TEST(GemmBatched, OneItemAndManyItems) {
  check<float>({1, 40, 24, 16}, 1);
  check<float>({1, 40, 24, 16, false, true}, 1);
  check<float>({37, 9, 20, 11, false, true}, 2);  // an odd item count over two threads
  check<float>({64, 6, 16, 8}, 2);
}

TEST(GemmBatched, Double) {
  for (bool tb : {false, true}) {
    check<double>({6, 23, 29, 17, false, tb}, 2);
    check<double>({3, 12, 40, 9, true, tb, false, false, 1, 1, 0.5, true}, 1);
  }
}

// The SSE transposition packs exactly what the generic packing does, zero padding included.
TEST(GemmBatched, TransposedPackingMatchesGeneric) {
  for (int64_t n : {16, 32, 37, 5})
    for (int64_t kc : {1, 3, 4, 7, 64, 129})
      for (int64_t pad : {0, 3}) {
        const int64_t ldb = kc + pad, slivers = (n + 15) / 16;
        auto b = randomVector<float>(static_cast<size_t>(n * ldb), 9);
        std::vector<float> want(static_cast<size_t>(slivers * 16 * kc), -1), got(want.size(), -2);
        pack::packB(b.data(), ldb, true, 0, n, 0, kc, 16, 0, slivers, want.data());
        batched::packBTransposedF32(b.data(), ldb, n, kc, got.data());
        ASSERT_EQ(got, want) << "n=" << n << " kc=" << kc << " ldb=" << ldb;
      }
}

// Items too large for the path, and products that only scale C, go the general way.
TEST(GemmBatched, Dispatch) {
  const GemmKernelConfig& cfg = GemmEngine::host(DType::f32).config();
  GemmDesc d = GemmDesc::contiguous(DType::f32, 128, 128, 64);
  EXPECT_TRUE(batched::smallItems(cfg, d));
  EXPECT_FALSE(batched::smallItems(cfg, GemmDesc::contiguous(DType::f32, 512, 512, 64)));  // 256 KiB of A and B
  EXPECT_FALSE(batched::smallItems(cfg, GemmDesc::contiguous(DType::f32, 16, 16, cfg.kc + 1)));  // two K blocks
  d.alpha = 0;
  EXPECT_FALSE(batched::smallItems(cfg, d));
}

}  // namespace
}  // namespace tgc::codegen
