// GEMM pairs (runtime/launch_schedule.h): which GEMMs pair and move (independent ones of
// similar FLOPs within the window) and which must not (a read of the first one's result or
// of a launch in between, a write over a buffer a launch in between touches, unequal FLOPs,
// too far), the executables that run them against the interpreter and against the same
// graph without pairs, a memory plan that keeps a pair's live buffers apart, and the tiny
// training step with pairs against the same step without.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "frontend/frontend.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "passes/train_step.h"
#include "runtime/executable.h"
#include "runtime/launch_schedule.h"
#include "runtime/param_store.h"
#include "tests/runtime/exec_test_util.h"

namespace tgc {
namespace {

using runtime::LaunchAccess;
using runtime::pairGemms;

LaunchAccess gemm(std::vector<int> reads, int write, double flops = 100) {
  return {std::move(reads), {write}, flops};
}
LaunchAccess kernel(std::vector<int> reads, std::vector<int> writes) {
  return {std::move(reads), std::move(writes), 0};
}

TEST(PairGemms, AnIndependentGemmMovesUpNextToTheFirst) {
  // g0 -> k1 (reads g0's result) ; g2 independent of both.
  const auto s = pairGemms({gemm({0, 1}, 2), kernel({2}, {3}), gemm({4, 5}, 6)});
  EXPECT_EQ(s.order, (std::vector<int>{0, 2, 1}));
  EXPECT_EQ(s.partner, (std::vector<int>{1, 0, -1}));
  EXPECT_EQ(s.pairs, 1);
}

TEST(PairGemms, AGemmReadingTheFirstsResultOrALaunchInBetweenStays) {
  // g2 reads g0's result: dependent.
  auto s = pairGemms({gemm({0, 1}, 2), kernel({1}, {3}), gemm({2, 5}, 6)});
  EXPECT_EQ(s.pairs, 0);
  EXPECT_EQ(s.order, (std::vector<int>{0, 1, 2}));
  // g2 reads k1's result: it cannot move above k1, nor g0 below it (k1 reads g0's result).
  s = pairGemms({gemm({0, 1}, 2), kernel({2}, {3}), gemm({3, 5}, 6)});
  EXPECT_EQ(s.pairs, 0);
}

TEST(PairGemms, AGemmWritingWhatALaunchInBetweenTouchesStays) {
  // Write after read: k1 reads 7, which g2 overwrites (a buffer shared in place); k1 also
  // reads g0's result, so g0 cannot move below it either.
  auto s = pairGemms({gemm({0, 1}, 2), kernel({2, 7}, {3}), gemm({4, 5}, 7)});
  EXPECT_EQ(s.pairs, 0);
  // Write after write: k1 writes 7 too.
  s = pairGemms({gemm({0, 1}, 2), kernel({2}, {7}), gemm({4, 5}, 7)});
  EXPECT_EQ(s.pairs, 0);
  // g2 overwrites what g0 reads: running both at once would race.
  s = pairGemms({gemm({0, 1}, 2), gemm({4, 5}, 1)});
  EXPECT_EQ(s.pairs, 0);
  // ... and g1 reading what g0 writes is a plain dependence.
  s = pairGemms({gemm({0, 1}, 2), gemm({2, 5}, 6)});
  EXPECT_EQ(s.pairs, 0);
}

TEST(PairGemms, OnlySimilarFlopsPairAndTheClosestWins) {
  // 1.5x apart: the pair would wait on the larger one for longer than splitting gains.
  EXPECT_EQ(pairGemms({gemm({0}, 1, 150), gemm({2}, 3, 100)}).pairs, 0);
  EXPECT_EQ(pairGemms({gemm({0}, 1, 130), gemm({2}, 3, 100)}).pairs, 1);
  // g0 (100) pairs with g3 (101), not g1 (130) or g2 (90); g1 and g2 then pair (1.44x: no).
  const auto s = pairGemms({gemm({0}, 10, 100), gemm({1}, 11, 130), gemm({2}, 12, 90),
                            gemm({3}, 13, 101)});
  EXPECT_EQ(s.order, (std::vector<int>{0, 3, 1, 2}));
  EXPECT_EQ(s.pairs, 1);
  EXPECT_EQ(s.partner, (std::vector<int>{1, 0, -1, -1}));
}

TEST(PairGemms, EachLaunchPairsOnceAndNotBeyondTheWindow) {
  std::vector<LaunchAccess> ls{gemm({0}, 100)};
  for (int i = 0; i < 20; ++i) ls.push_back(kernel({0}, {200 + i}));
  ls.push_back(gemm({1}, 101));
  runtime::PairOptions o;
  o.window = 20;
  EXPECT_EQ(pairGemms(ls, o).pairs, 0);
  o.window = 21;
  EXPECT_EQ(pairGemms(ls, o).pairs, 1);
  // Four independent equal GEMMs: two pairs, (0, 1) and (2, 3).
  const auto s = pairGemms({gemm({0}, 10), gemm({1}, 11), gemm({2}, 12), gemm({3}, 13)});
  EXPECT_EQ(s.pairs, 2);
  EXPECT_EQ(s.partner, (std::vector<int>{1, 0, 3, 2}));
}

TEST(PairGemms, TheFirstMovesDownWhenThePartnerNeedsALaunchInBetween) {
  // g2 reads k1's result (a recomputed operand); g0 is independent of k1: g0 moves down.
  const auto s = pairGemms({gemm({0, 1}, 2), kernel({1}, {3}), gemm({3, 5}, 6), kernel({2}, {7})});
  EXPECT_EQ(s.order, (std::vector<int>{1, 0, 2, 3}));
  EXPECT_EQ(s.partner, (std::vector<int>{-1, 2, 1, -1}));
  // ... unless k1 reads g0's result.
  EXPECT_EQ(pairGemms({gemm({0, 1}, 2), kernel({2}, {3}), gemm({3, 5}, 6)}).pairs, 0);
}

// Random launches: the schedule is a permutation, pairs are adjacent and independent, and
// every two launches that share a buffer one of them writes keep their order.
TEST(PairGemms, RandomSchedulesKeepEveryDependence) {
  std::mt19937_64 rng(17);
  int pairs = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 40), buffers = 4 + static_cast<int>(rng() % 60);
    std::vector<LaunchAccess> ls(static_cast<size_t>(n));
    for (auto& l : ls) {
      for (int r = static_cast<int>(rng() % 3); r >= 0; --r) l.reads.push_back(static_cast<int>(rng() % buffers));
      for (int w = static_cast<int>(rng() % 2); w >= 0; --w) l.writes.push_back(static_cast<int>(rng() % buffers));
      if (rng() % 2) l.flops = 100 + static_cast<double>(rng() % 60);
    }
    const auto s = pairGemms(ls);
    ASSERT_EQ(s.order.size(), ls.size());
    std::vector<int> pos(ls.size(), -1);
    for (size_t q = 0; q < s.order.size(); ++q) {
      ASSERT_EQ(pos[static_cast<size_t>(s.order[q])], -1) << "not a permutation";
      pos[static_cast<size_t>(s.order[q])] = static_cast<int>(q);
    }
    auto conflict = [&](const LaunchAccess& a, const LaunchAccess& b) {
      auto meets = [](const std::vector<int>& x, const std::vector<int>& y) {
        return std::any_of(x.begin(), x.end(),
                           [&](int v) { return std::find(y.begin(), y.end(), v) != y.end(); });
      };
      return meets(a.writes, b.reads) || meets(a.writes, b.writes) || meets(a.reads, b.writes);
    };
    int counted = 0;
    for (size_t q = 0; q < s.partner.size(); ++q) {
      const int o = s.partner[q];
      if (o < 0) continue;
      ++counted;
      ASSERT_TRUE(o == static_cast<int>(q) + 1 || o == static_cast<int>(q) - 1) << "not adjacent";
      ASSERT_EQ(s.partner[static_cast<size_t>(o)], static_cast<int>(q));
      EXPECT_GT(ls[static_cast<size_t>(s.order[q])].flops, 0);
      EXPECT_FALSE(conflict(ls[static_cast<size_t>(s.order[q])], ls[static_cast<size_t>(s.order[static_cast<size_t>(o)])]));
    }
    EXPECT_EQ(counted, 2 * s.pairs);
    pairs += s.pairs;
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b)
        if (conflict(ls[static_cast<size_t>(a)], ls[static_cast<size_t>(b)])) {
          EXPECT_LT(pos[static_cast<size_t>(a)], pos[static_cast<size_t>(b)])
              << "trial " << trial << ": launches " << a << " and " << b << " swapped";
        }
  }
  EXPECT_GT(pairs, 100);  // the property is tested on schedules that move launches
}

// Independent products of several shapes: a linear's backward (dX and dW with the bias
// gradient summed into dW's GEMM), a batched product, GEMMs with bias / addend epilogues,
// and a GEMM that reads a kernel's result computed between two others.
const char* kIndependent = R"(
graph @pairs {
  %x = input() : f32[3,7,13]
  %w = input() : f32[13,5]
  %g = input() : f32[3,7,5]
  %c = constant() {value=[0.5]} : f32[]
  %dy = mul(%g, %c) : f32[3,7,5]
  %x2 = reshape(%x) {shape=[21,13]} : f32[21,13]
  %dy2 = reshape(%dy) {shape=[21,5]} : f32[21,5]
  %dw = matmul(%x2, %dy2) {transpose_a=true} : f32[13,5]
  %db = reduce_sum(%dy) {axes=[0,1]} : f32[5]
  %dx = matmul(%dy, %w) {transpose_b=true} : f32[3,7,13]
  %q = input() : f32[4,9,16]
  %k = input() : f32[4,9,16]
  %wq = input() : f32[16,16]
  %bq = input() : f32[16]
  %pq = matmul(%q, %wq) : f32[4,9,16]
  %yq = add(%pq, %bq) : f32[4,9,16]
  %pk = matmul(%k, %wq) : f32[4,9,16]
  %rk = relu(%pk) : f32[4,9,16]
  %pv = matmul(%k, %wq) {transpose_b=true} : f32[4,9,16]
  %zv = add(%pv, %q) : f32[4,9,16]
  %s = matmul(%yq, %rk) {transpose_b=true} : f32[4,9,9]
  %s2 = matmul(%zv, %k) {transpose_b=true} : f32[4,9,9]
  return %dw, %db, %dx, %yq, %rk, %zv, %s, %s2
}
)";

runtime::ExecOptions twoThreads(bool pairs) {
  auto o = testing::testExecOptions();
  o.numThreads = 2;
  o.gemmPairs = pairs;
  return o;
}

TEST(GemmPairsExec, IndependentProductsMatchTheInterpreterWithAndWithoutPairs) {
  auto g = parseGraph(kIndependent);
  auto in = testing::randomInputs(*g, 11);
  auto ref = Interpreter().run(*g, in);
  std::vector<Tensor> plain;
  for (int mode : {0, 1, 2})  // no pairs; pairs; pairs whose halves do not help each other
    for (bool poison : {false, true}) {
      const bool pairs = mode > 0;
      SCOPED_TRACE(std::string(mode == 0 ? "no pairs" : mode == 1 ? "pairs" : "pairs, no help") +
                   (poison ? ", poisoned" : ""));
      auto o = twoThreads(pairs);
      o.gemmPairHelp = mode == 1;
      o.poisonFreed = poison;
      auto exe = runtime::Executable::compile(*g, o);
      EXPECT_EQ(exe->stats().gemmPairs > 0, pairs);
      for (int rep = 0; rep < 2; ++rep) {  // a second run over the first one's arena
        auto got = exe->run(in);
        ASSERT_EQ(got.size(), ref.size());
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_TRUE(testing::allClose(got[i], ref[i], 2e-5, 2e-5)) << "output " << i;
        if (plain.empty()) plain = got;
        // One thread per GEMM or two: the same sums in the same order, the same bits.
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_EQ(std::memcmp(got[i].data(), plain[i].data(), got[i].nbytes()), 0)
              << "output " << i;
      }
    }
}

TEST(GemmPairsExec, PairsOnlyWithTwoThreads) {
  auto g = parseGraph(kIndependent);
  for (int threads : {1, 3}) {
    auto o = twoThreads(true);
    o.numThreads = threads;
    EXPECT_EQ(runtime::Executable::compile(*g, o)->stats().gemmPairs, 0) << threads;
  }
}

// %b depends on %t, which a kernel computes from %a after it: neither moves next to the
// other; %c is independent and moves up (launchNames order). %d reads %a's result: never
// its partner. Then the same with %t computed from %x: %a moves down past it to %b.
TEST(GemmPairsExec, ADependentGemmIsNotHoisted) {
  auto g = parseGraph(R"(
graph @order {
  %x = input() : f32[32,32]
  %w = input() : f32[32,32]
  %a = matmul(%x, %w) : f32[32,32]
  %t = relu(%a) : f32[32,32]
  %b = matmul(%t, %w) : f32[32,32]
  %c = matmul(%w, %x) : f32[32,32]
  %d = matmul(%a, %b) : f32[32,32]
  return %a, %b, %c, %d
}
)");
  auto exe = runtime::Executable::compile(*g, twoThreads(true));
  EXPECT_EQ(exe->launchNames(),
            (std::vector<std::string>{"gemm:a", "gemm:c", "t", "gemm:b", "gemm:d"}));
  EXPECT_EQ(exe->stats().gemmPairs, 1);  // %b and %d depend on each other
  EXPECT_EQ(exe->launchSteps(), (std::vector<int>{0, 0, 1, 2, 3}));
  auto in = testing::randomInputs(*g, 5);
  auto ref = Interpreter().run(*g, in);
  auto got = exe->run(in);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(testing::allClose(got[i], ref[i], 1e-4, 1e-4)) << "output " << i;

  // A weight gradient's GEMM whose operand is recomputed after the input gradient's GEMM.
  auto sunk = parseGraph(R"(
graph @sink {
  %x = input() : f32[32,32]
  %w = input() : f32[32,32]
  %a = matmul(%x, %w) : f32[32,32]
  %t = exp(%x) : f32[32,32]
  %b = matmul(%t, %w) : f32[32,32]
  %d = matmul(%a, %b) : f32[32,32]
  return %d
}
)");
  auto exe2 = runtime::Executable::compile(*sunk, twoThreads(true));
  EXPECT_EQ(exe2->launchNames(), (std::vector<std::string>{"t", "gemm:a", "gemm:b", "gemm:d"}));
  EXPECT_EQ(exe2->launchSteps(), (std::vector<int>{0, 1, 1, 2}));
  in = testing::randomInputs(*sunk, 6);
  EXPECT_TRUE(testing::allClose(exe2->run(in)[0], Interpreter().run(*sunk, in)[0], 1e-4, 1e-4));
}

// The profile: each half timed on its thread, the pair's wall time on both, partners named.
TEST(GemmPairsExec, TheProfileTimesEachHalfAndThePair) {
  auto g = parseGraph(R"(
graph @profiled {
  %x = input() : f32[64,64]
  %w = input() : f32[64,64]
  %a = matmul(%x, %w) : f32[64,64]
  %b = matmul(%w, %x) : f32[64,64]
  %e = exp(%x) : f32[64,64]
  return %a, %b, %e
}
)");
  auto o = twoThreads(true);
  o.profile = true;
  auto exe = runtime::Executable::compile(*g, o);
  auto in = testing::randomInputs(*g, 4);
  for (int r = 0; r < 3; ++r) exe->run(in);
  const auto prof = exe->profile();
  ASSERT_EQ(prof.size(), 3u);
  EXPECT_EQ(prof[0].partner, 1);
  EXPECT_EQ(prof[1].partner, 0);
  EXPECT_EQ(prof[2].partner, -1);
  for (int i : {0, 1}) {
    EXPECT_TRUE(prof[static_cast<size_t>(i)].gemm);
    EXPECT_EQ(prof[static_cast<size_t>(i)].runs, 3);
    EXPECT_GT(prof[static_cast<size_t>(i)].seconds, 0);
  }
  EXPECT_EQ(prof[0].stepSeconds, prof[1].stepSeconds);
  // Each launch's time is the thread time spent on it (its own thread's, and the other's
  // while it helped): together at most both threads for the pair's wall time.
  EXPECT_GE(2 * prof[0].stepSeconds, prof[0].seconds + prof[1].seconds);
  EXPECT_EQ(prof[2].runs, 3);
}

// Buffers live in either launch of a pair are live at the same time: their bytes are apart.
// %e dies in %p's GEMM and %q's result is born in its partner: launch by launch they never
// meet, so a plan by launches would put %q on %e's bytes while %p still reads them.
TEST(GemmPairsExec, TheMemoryPlanKeepsBuffersOfOnePairApart) {
  auto g = parseGraph(R"(
graph @plan {
  %x = input() : f32[48,48]
  %w = input() : f32[48,48]
  %e = exp(%x) : f32[48,48]
  %p = matmul(%e, %w) : f32[48,48]
  %q = matmul(%x, %w) {transpose_b=true} : f32[48,48]
  %r = matmul(%p, %q) : f32[48,48]
  return %r
}
)");
  for (bool poison : {false, true}) {
    auto o = twoThreads(true);
    o.poisonFreed = poison;
    auto exe = runtime::Executable::compile(*g, o);
    ASSERT_EQ(exe->stats().gemmPairs, 1);
    const auto steps = exe->launchSteps();
    const auto bufs = exe->arenaBuffers();
    const int end = static_cast<int>(steps.size());
    auto stepOf = [&](int launch) { return launch >= end ? steps.back() + 1 : steps[launch]; };
    int meetInPair = 0;  // buffer pairs apart by launches but together by steps
    for (size_t i = 0; i < bufs.size(); ++i)
      for (size_t j = i + 1; j < bufs.size(); ++j) {
        const auto &a = bufs[i], &b = bufs[j];
        if (a.bytes == 0 || b.bytes == 0) continue;
        if (stepOf(a.last) < stepOf(b.first) || stepOf(b.last) < stepOf(a.first)) continue;
        meetInPair += a.last < b.first || b.last < a.first;
        EXPECT_TRUE(a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset)
            << a.value << " and " << b.value << " are live in one step and overlap";
      }
    EXPECT_GE(meetInPair, 1) << "the graph should test a pair's boundary";
    auto in = testing::randomInputs(*g, 9);
    auto ref = Interpreter().run(*g, in);
    EXPECT_TRUE(testing::allClose(exe->run(in)[0], ref[0], 1e-4, 1e-4));
  }
}

// The tiny Transformer's training step (forward, backward with dX/dW pairs, AdamW in
// place): two steps with pairs, freed memory poisoned, give the same bits as two without.
TEST(GemmPairsExec, TinyTrainingStepIsBitExactWithAndWithoutPairs) {
  ModelOptions mo;
  mo.preset = "tiny";
  mo.sets = {{"src_vocab", "24"}, {"tgt_vocab", "24"}, {"p_drop", "0.1"}};
  mo.dims = {{"B", 3}, {"S", 7}, {"T", 6}};
  CompiledModel m = compileModelFile(std::string(TGC_SOURCE_DIR) + "/models/transformer.tg", mo);
  ASSERT_GE(m.loss_output, 0);
  m.graph->setOutputs({m.graph->outputs()[static_cast<size_t>(m.loss_output)]});
  OptimizerConfig cfg;
  cfg.schedule = "constant";
  cfg.lr = 3e-3;
  buildTrainStep(*m.graph, cfg);
  const Graph& g = *m.graph;

  std::vector<std::map<std::string, Tensor>> results;
  std::vector<std::vector<Tensor>> states;
  for (bool pairs : {false, true}) {
    auto o = twoThreads(pairs);
    o.updateInPlace = true;
    o.poisonFreed = pairs;
    auto exe = runtime::Executable::compile(g, o);
    if (pairs) {
      EXPECT_GE(exe->stats().gemmPairs, 4) << "dX/dW pairs of the linears";
    }
    // The same state and batch for both: inputs from one seed, state in a fresh store.
    auto in = testing::transformerInputs(g, 3, 24, /*zeroState=*/true);
    runtime::ParamStore store;
    std::map<std::string, Tensor> batch;
    const auto& stateNames = exe->stateNames();
    for (auto& [name, t] : in) {
      if (std::find(stateNames.begin(), stateNames.end(), name) != stateNames.end())
        store.set(name, t);
      else
        batch.emplace(name, t);
    }
    std::map<std::string, Tensor> out;
    for (int step = 0; step < 2; ++step) out = exe->runStep(store, batch);
    results.push_back(out);
    std::vector<Tensor> state;
    for (const auto& name : stateNames) state.push_back(store.at(name));
    states.push_back(state);
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (const auto& [name, t] : results[0]) {
    const Tensor& u = results[1].at(name);
    EXPECT_EQ(std::memcmp(t.data(), u.data(), t.nbytes()), 0) << name;
  }
  ASSERT_EQ(states[0].size(), states[1].size());
  for (size_t i = 0; i < states[0].size(); ++i)
    EXPECT_EQ(std::memcmp(states[0][i].data(), states[1][i].data(), states[0][i].nbytes()), 0)
        << "state " << i;
}

}  // namespace
}  // namespace tgc
