// GemmPairShare (codegen/gemm_pair_share.h): the thread that finishes its GEMM first takes
// blocks of rows of the other's, and the results are the same bits as without the help.
#include "codegen/gemm_pair_share.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "codegen/gemm.h"
#include "support/thread_pool.h"
#include "tests/codegen/gemm_test_util.h"

namespace tgc::codegen {
namespace {

using testing::randomVector;

// The protocol alone: the owner's first block waits until the helper has run another, so
// the helper must take part; every block runs exactly once; both threads return.
TEST(GemmPairShare, TheIdleThreadRunsBlocksOfTheOthersOffer) {
  GemmPairShare share;
  constexpr int64_t kBlocks = 64;
  std::vector<std::atomic<int>> ranBy(kBlocks);
  for (auto& r : ranBy) r.store(-1);
  std::atomic<bool> helperRan{false};
  std::atomic<bool> timedOut{false};
  struct Context {
    std::vector<std::atomic<int>>* ranBy;
    std::atomic<bool>* helperRan;
    std::atomic<bool>* timedOut;
    std::thread::id owner;
  } ctx{&ranBy, &helperRan, &timedOut, {}};
  double helpSeconds = 0;

  std::thread owner([&] {
    ctx.owner = std::this_thread::get_id();
    GemmPairShare::Offer offer;
    offer.blocks = kBlocks;
    offer.context = &ctx;
    offer.run = [](const void* p, int64_t i) {
      const auto& c = *static_cast<const Context*>(p);
      const bool mine = std::this_thread::get_id() == c.owner;
      int expected = -1;
      EXPECT_TRUE((*c.ranBy)[static_cast<size_t>(i)].compare_exchange_strong(expected, mine ? 0 : 1))
          << "block " << i << " ran twice";
      if (!mine) c.helperRan->store(true);
      if (mine && i == 0) {  // hold the owner here until the helper has run a block
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!c.helperRan->load())
          if (std::chrono::steady_clock::now() > until) {
            c.timedOut->store(true);
            break;
          }
      }
    };
    share.share(0, offer);
    share.finish(0);
    share.help(0);  // side 1 finishes at once: returns
  });
  std::thread helper([&] {
    share.finish(1);  // its own product was empty
    helpSeconds = share.help(1);
  });
  owner.join();
  helper.join();
  EXPECT_FALSE(timedOut.load()) << "the helper never took a block";
  int helped = 0;
  for (auto& r : ranBy) {
    EXPECT_NE(r.load(), -1) << "a block never ran";
    helped += r.load() == 1;
  }
  EXPECT_GE(helped, 1);
  EXPECT_GT(helpSeconds, 0);
}

struct Product {
  GemmDesc d;
  std::vector<float> a, b, bias, c, sums;
};

Product makeProduct(int64_t m, int64_t n, int64_t k, bool transA, bool transB, uint32_t seed) {
  Product p;
  p.d = GemmDesc::contiguous(DType::f32, m, n, k, transA, transB);
  p.d.epilogue.bias = true;
  p.d.epilogue.activation = GemmActivation::relu;
  p.d.sumB = true;
  p.a = randomVector<float>(static_cast<size_t>(m * k), seed);
  p.b = randomVector<float>(static_cast<size_t>(k * n), seed + 1);
  p.bias = randomVector<float>(static_cast<size_t>(n), seed + 2);
  p.c.assign(static_cast<size_t>(m * n), 0.0f);
  p.sums.assign(static_cast<size_t>(n), 0.0f);
  return p;
}

void runProduct(Product& p, ThreadPool& serial, GemmPairShare::Side side = {}) {
  GemmEpilogueOperands ops;
  ops.bias = p.bias.data();
  ops.sumB = p.sums.data();
  gemm(p.d, p.a.data(), p.b.data(), p.c.data(), &serial, ops, side);
}

// Real products, one per thread, the small one finishing first and helping the large one
// (many row blocks; B over 8 MiB, so K super-blocks and several offers; A and B
// transposed; bias, ReLU and column sums): C and the sums equal a run without help, bit
// for bit, whoever ran which block.
TEST(GemmPairShare, HelpedProductsEqualUnhelpedOnesBitForBit) {
  struct Shape {
    int64_t m, n, k;
    bool transA, transB;
  };
  const Shape shapes[] = {{1100, 300, 700, false, false},
                          {1000, 520, 4200, true, true},   // B 8.7 MB: K super-blocks
                          {150, 9000, 260, false, true}};  // two row blocks, column panels
  for (const Shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << s.m << "x" << s.n << "x" << s.k << " transA "
                                      << s.transA << " transB " << s.transB);
    Product want = makeProduct(s.m, s.n, s.k, s.transA, s.transB, 7);
    ThreadPool serial0(1);
    runProduct(want, serial0);
    for (int round = 0; round < 3; ++round) {
      Product big = makeProduct(s.m, s.n, s.k, s.transA, s.transB, 7);
      Product small = makeProduct(8, 16, 8, false, false, 99);
      GemmPairShare share;
      double helped = 0;
      std::thread t0([&] {
        ThreadPool serial(1);
        runProduct(big, serial, {&share, 0});
        share.finish(0);
        share.help(0);
      });
      std::thread t1([&] {
        ThreadPool serial(1);
        runProduct(small, serial, {&share, 1});
        share.finish(1);
        helped = share.help(1);
      });
      t0.join();
      t1.join();
      EXPECT_EQ(std::memcmp(big.c.data(), want.c.data(), want.c.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(big.sums.data(), want.sums.data(), want.sums.size() * sizeof(float)), 0);
      RecordProperty("helped_ms_round_" + std::to_string(round), std::to_string(helped * 1e3));
    }
  }
}

}  // namespace
}  // namespace tgc::codegen
