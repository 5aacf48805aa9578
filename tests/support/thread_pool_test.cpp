#include "support/thread_pool.h"

#include <gtest/gtest.h>

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tgc {
namespace {

// Every index of [0, n) is visited exactly once, for several pool sizes and lengths.
TEST(ThreadPool, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.numThreads(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000, 4097}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallelFor(n, [&](int64_t b, int64_t e) {
        ASSERT_LE(0, b);
        ASSERT_LT(b, e);
        ASSERT_LE(e, n);
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n << " i=" << i;
    }
  }
}

// The chunks are balanced (sizes differ by at most one) and run on distinct threads.
TEST(ThreadPool, ChunksAreBalancedAndOnDistinctThreads) {
  ThreadPool pool(4);
  std::mutex mu;
  std::vector<int64_t> sizes;
  std::set<std::thread::id> ids;
  pool.parallelFor(1003, [&](int64_t b, int64_t e) {
    std::lock_guard lock(mu);
    sizes.push_back(e - b);
    ids.insert(std::this_thread::get_id());
  });
  ASSERT_EQ(sizes.size(), 4u);
  for (int64_t s : sizes) EXPECT_TRUE(s == 250 || s == 251) << s;
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_TRUE(ids.count(std::this_thread::get_id())) << "the caller runs a chunk too";
}

TEST(ThreadPool, DynamicChunksCoverRangeExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 5, 100, 1001})
      for (int64_t chunk : {1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int64_t> calls{0};
        pool.parallelForDynamic(n, chunk, [&](int64_t b, int64_t e) {
          ASSERT_LT(b, e);
          ASSERT_LE(e - b, chunk);
          calls++;
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " chunk=" << chunk;
        EXPECT_EQ(calls.load(), (n + chunk - 1) / chunk);
      }
  }
}

// A thread held up in one chunk does not hold up the others' chunks: chunk 0 waits until
// all 39 others are done, which only happens if the free thread takes them all (a static
// split would leave half of them queued behind chunk 0, and the wait would time out).
TEST(ThreadPool, DynamicChunksFlowToFreeThreads) {
  ThreadPool pool(2);
  std::atomic<int> done{0};
  bool othersFinished = false;
  pool.parallelForDynamic(40, 1, [&](int64_t b, int64_t) {
    if (b != 0) {
      done++;
      return;
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (done.load() < 39 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    othersFinished = done.load() == 39;
  });
  EXPECT_TRUE(othersFinished);
}

TEST(ThreadPool, GrainLimitsTheNumberOfChunks) {
  ThreadPool pool(4);
  std::atomic<int> chunks{0};
  pool.parallelFor(10, [&](int64_t, int64_t) { chunks++; }, /*grain=*/10);
  EXPECT_EQ(chunks.load(), 1);
  chunks = 0;
  pool.parallelFor(10, [&](int64_t, int64_t) { chunks++; }, /*grain=*/5);
  EXPECT_EQ(chunks.load(), 2);
}

TEST(ThreadPool, ManyBackToBackCalls) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 5000; ++rep)
    pool.parallelFor(6, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
  EXPECT_EQ(sum.load(), 5000 * 15);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> count{0};
  pool.parallelFor(4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallelFor(5, [&](int64_t b2, int64_t e2) { count += e2 - b2; });
  });
  EXPECT_EQ(count.load(), 20);
}

// Tasks run side by side only outside a running region and up to the pool's size; nested
// in one (on the caller or on a worker) they run inline, one after the other.
TEST(ThreadPool, RunsSideBySideOnlyWhenNotNested) {
  ThreadPool pool(2);
  EXPECT_TRUE(pool.runsSideBySide(2));
  EXPECT_FALSE(pool.runsSideBySide(1));
  EXPECT_FALSE(pool.runsSideBySide(3));
  EXPECT_FALSE(ThreadPool(1).runsSideBySide(2));
  ThreadPool other(2);
  std::atomic<int> sideBySide{0};
  pool.runOnThreads(2, [&](int) { sideBySide += other.runsSideBySide(2); });
  EXPECT_EQ(sideBySide.load(), 0);
  EXPECT_TRUE(pool.runsSideBySide(2));
}

TEST(ThreadPool, ExceptionsPropagateAndThePoolSurvives) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallelFor(30,
                                [&](int64_t b, int64_t) {
                                  if (b > 0) throw std::runtime_error("chunk failed");
                                }),
               std::runtime_error);
  std::atomic<int> n{0};
  pool.parallelFor(30, [&](int64_t b, int64_t e) { n += static_cast<int>(e - b); });
  EXPECT_EQ(n.load(), 30);
}

TEST(ThreadPool, CallsFromSeveralThreadsAreSerialized) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 500; ++rep)
        pool.parallelFor(100, [&](int64_t b, int64_t e) { total += e - b; });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 3 * 500 * 100);
}

TEST(ThreadPool, RunOnThreadsGivesEachTaskItsIndex) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> seen(3);
  pool.runOnThreads(3, [&](int t) { seen[t]++; });
  for (auto& s : seen) EXPECT_EQ(s.load(), 1);
  std::atomic<int> capped{0};
  pool.runOnThreads(10, [&](int) { capped++; });
  EXPECT_EQ(capped.load(), 3) << "tasks are capped at the thread count";
}

// Sets an environment variable for one scope and restores it on every way out.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(ThreadPool, DefaultThreadCountFollowsTheEnvironment) {
  {
    ScopedEnv three("TGC_NUM_THREADS", "3");
    EXPECT_EQ(ThreadPool::defaultNumThreads(), 3);
  }
  {
    ScopedEnv junk("TGC_NUM_THREADS", "junk");
    EXPECT_GE(ThreadPool::defaultNumThreads(), 1);
  }
  ScopedEnv zero("TGC_NUM_THREADS", "0");
  EXPECT_GE(ThreadPool::defaultNumThreads(), 1);
}

#if defined(__linux__)
// The CPUs each task of a one-task-per-thread job may run on, by task index.
std::vector<cpu_set_t> affinityPerTask(ThreadPool& pool) {
  std::vector<cpu_set_t> sets(pool.numThreads());
  pool.runOnThreads(pool.numThreads(), [&](int t) {
    if (sched_getaffinity(0, sizeof(cpu_set_t), &sets[t]) != 0) CPU_ZERO(&sets[t]);
  });
  return sets;
}

cpu_set_t cpuSet(std::initializer_list<int> cpus) {
  cpu_set_t s;
  CPU_ZERO(&s);
  for (int c : cpus) CPU_SET(c, &s);
  return s;
}

// Workers are bound only in a pool with a thread for every CPU: each to one of the other
// CPUs than the creating thread's, in order.
TEST(ThreadPool, WorkerCpusAreTheOtherCpusOfAFullPool) {
  const cpu_set_t four = cpuSet({0, 2, 5, 7});
  EXPECT_EQ(ThreadPool::workerCpus(four, 2, 4), (std::vector<int>{0, 5, 7}));
  EXPECT_EQ(ThreadPool::workerCpus(four, 7, 4), (std::vector<int>{0, 2, 5}));
  EXPECT_TRUE(ThreadPool::workerCpus(four, 2, 3).empty()) << "fewer threads than CPUs";
  EXPECT_TRUE(ThreadPool::workerCpus(four, 2, 5).empty()) << "more threads than CPUs";
  EXPECT_TRUE(ThreadPool::workerCpus(four, 1, 4).empty()) << "created on a CPU outside the set";
  EXPECT_TRUE(ThreadPool::workerCpus(four, -1, 4).empty()) << "sched_getcpu failed";
  EXPECT_TRUE(ThreadPool::workerCpus(cpuSet({3}), 3, 1).empty());
}

// In a real pool made on a thread held to one CPU: the workers are on the others, one
// each, and the creating thread's mask is left alone. TGC_POOL_PIN=0, or a pool of another
// size, leaves every worker the process's CPUs.
TEST(ThreadPool, WorkersAreBoundToTheOtherCpus) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  const int cpus = CPU_COUNT(&mine);
  if (cpus < 2) GTEST_SKIP() << "one CPU: nothing to bind to";
  int first = 0;
  while (!CPU_ISSET(first, &mine)) ++first;
  const cpu_set_t held = cpuSet({first});
  // Runs fn on a new thread held to CPU `first`, as the pool's creator and caller.
  auto onHeldThread = [&](const std::function<void()>& fn) {
    std::thread t([&] {
      ASSERT_EQ(sched_setaffinity(0, sizeof(held), &held), 0);
      fn();
    });
    t.join();
  };
  {
    ScopedEnv unset("TGC_POOL_PIN", nullptr);
    onHeldThread([&] {
      ThreadPool pool(cpus);
      const auto sets = affinityPerTask(pool);
      EXPECT_TRUE(CPU_EQUAL(&sets[0], &held)) << "the caller's own mask is left alone";
      std::set<int> bound;
      for (int t = 1; t < cpus; ++t) {
        ASSERT_EQ(CPU_COUNT(&sets[t]), 1) << "worker " << t;
        for (int c = 0; c < CPU_SETSIZE; ++c)
          if (CPU_ISSET(c, &sets[t])) {
            EXPECT_TRUE(CPU_ISSET(c, &mine));
            EXPECT_NE(c, first) << "a worker on the creating thread's CPU";
            bound.insert(c);
          }
      }
      EXPECT_EQ(static_cast<int>(bound.size()), cpus - 1) << "each worker on a CPU of its own";
    });
    onHeldThread([&] {
      ThreadPool pool(cpus + 1);  // a pool of another size than the CPUs
      const auto sets = affinityPerTask(pool);
      for (int t = 1; t < pool.numThreads(); ++t) EXPECT_TRUE(CPU_EQUAL(&sets[t], &mine)) << t;
    });
  }
  ScopedEnv off("TGC_POOL_PIN", "0");
  onHeldThread([&] {
    ThreadPool pool(cpus);
    const auto sets = affinityPerTask(pool);
    for (int t = 1; t < cpus; ++t) EXPECT_TRUE(CPU_EQUAL(&sets[t], &mine)) << t;
  });
}
#endif

}  // namespace
}  // namespace tgc
