// The memory plan: buffers live at the same time never share bytes, buffers that are not
// do, and views share their operand's memory; checked on the planner directly and on the
// plans executables make.
#include <gtest/gtest.h>

#include <random>

#include "ir/parser.h"
#include "runtime/executable.h"
#include "runtime/memory_plan.h"
#include "tests/runtime/exec_test_util.h"

namespace tgc {
namespace {

using runtime::BufferLifetime;
using runtime::planMemory;

::testing::AssertionResult noLiveOverlap(const std::vector<BufferLifetime>& b,
                                         const runtime::MemoryPlan& p) {
  for (size_t i = 0; i < b.size(); ++i) {
    if (p.offsets[i] % runtime::kArenaAlignment != 0)
      return ::testing::AssertionFailure() << "buffer " << i << " misaligned at " << p.offsets[i];
    if (p.offsets[i] + b[i].bytes > p.arenaBytes)
      return ::testing::AssertionFailure() << "buffer " << i << " ends past the arena";
    for (size_t j = i + 1; j < b.size(); ++j) {
      if (!runtime::livesOverlap(b[i], b[j]) || b[i].bytes == 0 || b[j].bytes == 0) continue;
      bool apart = p.offsets[i] + b[i].bytes <= p.offsets[j] ||
                   p.offsets[j] + b[j].bytes <= p.offsets[i];
      if (!apart)
        return ::testing::AssertionFailure()
               << "buffers " << i << " and " << j << " are live together and overlap";
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(MemoryPlan, ChainReusesTwoSlots) {
  // a -> b -> c -> d: each buffer is read by the next launch only, so two slots suffice.
  std::vector<BufferLifetime> b{{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}, {1000, 3, 4}};
  auto p = planMemory(b);
  EXPECT_TRUE(noLiveOverlap(b, p));
  EXPECT_EQ(p.arenaBytes, 2 * 1024);
  EXPECT_EQ(p.totalBytes, 4 * 1024);
  EXPECT_EQ(p.peakLiveBytes, 2 * 1024);
  EXPECT_EQ(p.offsets[0], p.offsets[2]);  // reuse happens
}

TEST(MemoryPlan, SmallBuffersFillTheGapsOfLargeOnes) {
  // A big buffer dies at launch 2; two small ones that start later fit into its bytes.
  std::vector<BufferLifetime> b{{4096, 0, 2}, {4096, 0, 9}, {1024, 3, 5}, {1024, 4, 9}};
  auto p = planMemory(b);
  EXPECT_TRUE(noLiveOverlap(b, p));
  EXPECT_EQ(p.arenaBytes, 8192);
}

TEST(MemoryPlan, RandomLifetimesNeverOverlapAndStayNearThePeak) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<BufferLifetime> b;
    const int n = 1 + static_cast<int>(rng() % 200);
    for (int i = 0; i < n; ++i) {
      int first = static_cast<int>(rng() % 100);
      int len = static_cast<int>(rng() % 20);
      b.push_back({static_cast<int64_t>(rng() % 100000), first, first + len});
    }
    auto p = planMemory(b);
    ASSERT_TRUE(noLiveOverlap(b, p)) << "trial " << trial;
    EXPECT_GE(p.arenaBytes, p.peakLiveBytes);
    EXPECT_LE(p.arenaBytes, p.totalBytes);
    // Greedy by size is not optimal, but it never wastes much on such inputs.
    EXPECT_LE(p.arenaBytes, 2 * p.peakLiveBytes + 1) << "trial " << trial;
  }
}

TEST(MemoryPlan, RejectsAnEmptyLifetime) {
  EXPECT_THROW(planMemory({{64, 3, 2}}), std::invalid_argument);
}

// The executable's own plan: checked buffer by buffer from what it reports.
void expectPlanSound(const runtime::Executable& exe) {
  auto bufs = exe.arenaBuffers();
  for (size_t i = 0; i < bufs.size(); ++i)
    for (size_t j = i + 1; j < bufs.size(); ++j) {
      const auto &a = bufs[i], &b = bufs[j];
      if (a.bytes == 0 || b.bytes == 0 || a.last < b.first || b.last < a.first) continue;
      EXPECT_TRUE(a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset)
          << a.value << " [" << a.first << "," << a.last << "] and " << b.value << " ["
          << b.first << "," << b.last << "] overlap";
    }
}

TEST(ExecutablePlan, ViewsShareMemoryAndExtendTheirOperandsLife) {
  // %v views %e; %e's memory must stay live until %v's last reader (the add), although %e
  // itself is last read by a GEMM. GEMMs between the kernels keep every value in memory
  // whatever kernels fusion would merge.
  auto g = parseGraph(R"(graph @views {
  %x = input() : f32[64,64]
  %w = input() : f32[64,64]
  %e = exp(%x) : f32[64,64]
  %v = reshape(%e) {shape=[4096]} : f32[4096]
  %m = matmul(%e, %w) : f32[64,64]
  %m2 = matmul(%m, %w) : f32[64,64]
  %c = reshape(%m2) {shape=[4096]} : f32[4096]
  %s = add(%v, %c) : f32[4096]
  %t = reshape(%s) {shape=[64,64]} : f32[64,64]
  %z = matmul(%t, %w) : f32[64,64]
  return %z
}
)");
  auto opts = testing::testExecOptions();
  opts.poisonFreed = true;
  auto exe = runtime::Executable::compile(*g, opts);
  EXPECT_EQ(exe->stats().views, 3);
  auto bufs = exe->arenaBuffers();
  auto find = [&](const std::string& name) {
    for (const auto& b : bufs)
      if (b.value == name) return b;
    ADD_FAILURE() << "no arena buffer for %" << name;
    return runtime::Executable::ArenaBuffer{};
  };
  for (const auto& b : bufs)
    for (const char* view : {"v", "c", "t"}) EXPECT_NE(b.value, view) << "a view got a buffer";
  // exp, gemm m, gemm m2, add, gemm z; the reshapes launch nothing.
  ASSERT_EQ(exe->launchNames().size(), 5u);
  EXPECT_EQ(find("e").first, 0);
  EXPECT_EQ(find("e").last, 3);
  EXPECT_EQ(find("m").first, 1);
  EXPECT_EQ(find("m").last, 2);
  expectPlanSound(*exe);
  // %m dies at launch 2: the add's result reuses its bytes.
  EXPECT_EQ(find("s").offset, find("m").offset);
  EXPECT_LT(exe->stats().arenaBytes, exe->stats().bufferBytes);

  auto in = testing::randomInputs(*g, 3);
  auto want = Interpreter().run(*g, in);
  auto got = exe->run(in);
  EXPECT_TRUE(testing::allClose(got[0], want[0], 1e-4, 1e-4));  // three f32 products deep
}

// A chain of dynamic_update_slice writes its rows into the operand's own memory when nothing
// reads the operand after it: the arena buffer of %e, and the donated input %cache (whose
// output is then left out of `out`). Results equal the interpreter's either way; a read of
// %cache after the update keeps it intact (a copy); a start out of range is an error.
TEST(ExecutablePlan, UpdateSlicesWriteInPlaceWhenNothingReadsTheOperandLater) {
  const char* text = R"(graph @cache {
  %cache = input() : f32[2,4,8]
  %x = input() : f32[1,4,1]
  %pos = input() : i64[1]
  %z = constant() {value=[0]} : i64[1]
  %one = constant() {value=[1]} : i64[1]
  %s0 = concat(%z, %z, %pos) {axis=0} : i64[3]
  %s1 = concat(%one, %z, %pos) {axis=0} : i64[3]
  %a = dynamic_update_slice(%cache, %x, %s0) : f32[2,4,8]
  %e = exp(%a) : f32[2,4,8]
  %b = dynamic_update_slice(%a, %x, %s1) : f32[2,4,8]
  %f = dynamic_update_slice(%e, %x, %s1) : f32[2,4,8]
  %g = add(%f, %f) : f32[2,4,8]
  return %b, %g
}
)";
  auto g = parseGraph(text);
  auto in = testing::randomInputs(*g, 3);
  in.at("pos").setI(0, 5);
  const auto want = Interpreter().run(*g, in);
  for (bool donate : {false, true}) {
    SCOPED_TRACE(donate ? "donated" : "not donated");
    auto opts = testing::testExecOptions();
    opts.poisonFreed = true;
    if (donate) opts.donatedInputs = {"cache"};
    auto exe = runtime::Executable::compile(*g, opts);
    EXPECT_EQ(exe->outputInDonatedInput(0), donate);
    EXPECT_FALSE(exe->outputInDonatedInput(1));
    for (const auto& b : exe->arenaBuffers()) EXPECT_NE(b.value, "f") << "%f is written in %e";
    expectPlanSound(*exe);
    auto feed = in;
    std::vector<Tensor> out;
    exe->run(feed, out);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_TRUE(testing::allClose(out[1], want[1], 1e-6, 1e-6));  // (exp rounds its own way)
    if (donate) {
      EXPECT_EQ(out[0].data(), nullptr);  // left as it was (empty)
      EXPECT_TRUE(testing::allClose(feed.at("cache"), want[0], 0, 0));
    } else {
      EXPECT_TRUE(testing::allClose(out[0], want[0], 0, 0));
      EXPECT_TRUE(feed.at("cache").bitwiseEqual(in.at("cache")));
    }
    feed.at("pos").setI(0, 8);  // past the last position
    try {
      exe->run(feed, out);
      ADD_FAILURE() << "no error for start 8";
    } catch (const IRError& e) {
      EXPECT_NE(std::string(e.what()).find("start 8 of dim 2 is out of range"), std::string::npos) << e.what();
    }
  }
  // %cache read after its update: the update copies it first.
  std::string reread = text;
  reread.replace(reread.find("return %b, %g"), 13, "%r = add(%cache, %cache) : f32[2,4,8]\n  return %b, %g, %r");
  auto g2 = parseGraph(reread);
  auto opts = testing::testExecOptions();
  opts.donatedInputs = {"cache"};
  auto exe = runtime::Executable::compile(*g2, opts);
  EXPECT_FALSE(exe->outputInDonatedInput(0));
  auto feed = in;
  const auto out = exe->run(feed);
  EXPECT_TRUE(testing::allClose(out[0], want[0], 0, 0));
  EXPECT_TRUE(feed.at("cache").bitwiseEqual(in.at("cache")));
}

// A slice that is one contiguous, aligned range of its operand is a view at an offset (a
// layer of a stacked cache read by a GEMM); one that is not contiguous, or starts off the
// alignment, is copied. Both give the interpreter's results, with freed memory poisoned.
TEST(ExecutablePlan, ContiguousSlicesAreViewsAtAnOffset) {
  auto g = parseGraph(R"(graph @slices {
  %stack = input() : f32[3,16,16]
  %w = input() : f32[16,16]
  %e = exp(%stack) : f32[3,16,16]
  %layer = slice(%e) {axis=0, start=1, end=2} : f32[1,16,16]
  %l2 = reshape(%layer) {shape=[16,16]} : f32[16,16]
  %m = matmul(%l2, %w) : f32[16,16]
  %cols = slice(%e) {axis=2, start=0, end=8} : f32[3,16,8]
  %c2 = reshape(%cols) {shape=[48,8]} : f32[48,8]
  %odd = slice(%stack) {axis=1, start=1, end=2} : f32[3,1,16]
  %o2 = reshape(%odd) {shape=[3,16]} : f32[3,16]
  %n = matmul(%o2, %w) : f32[3,16]
  return %m, %c2, %n
}
)");
  auto opts = testing::testExecOptions();
  opts.poisonFreed = true;
  auto exe = runtime::Executable::compile(*g, opts);
  for (const auto& b : exe->arenaBuffers()) EXPECT_NE(b.value, "layer") << "the layer slice got a buffer";
  expectPlanSound(*exe);
  auto in = testing::randomInputs(*g, 4);
  const auto want = Interpreter().run(*g, in);
  const auto got = exe->run(in);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(testing::allClose(got[i], want[i], 1e-5, 1e-5)) << i;
}

}  // namespace
}  // namespace tgc
