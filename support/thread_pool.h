// A fixed pool of worker threads for the data-parallel loops of compiled kernels.
//
// parallelFor(n, fn) splits [0, n) into one contiguous chunk per thread, runs fn(begin, end)
// on each (the calling thread takes the first chunk) and returns when all are done. Threads
// are created once; between calls they spin briefly, then poll yielding the core for 2 ms
// (TGC_POOL_YIELD_US), then sleep on a futex (std::atomic wait), so a burst of
// back-to-back calls costs a few microseconds each, and an idle pool costs nothing. When
// the pool has a thread for every CPU of the process, each worker is bound to one of them
// other than the creating thread's (TGC_POOL_PIN=0: no binding), so that none waits on
// the caller's CPU.
// A call made from inside a running parallelFor (nested parallelism) runs serially on the
// calling thread; calls from several outside threads are serialized.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

namespace tgc {

class ThreadPool {
 public:
  using RangeFn = std::function<void(int64_t begin, int64_t end)>;

  // numThreads counts the calling thread: a pool of 1 runs everything inline.
  explicit ThreadPool(int numThreads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process-wide pool: TGC_NUM_THREADS threads if set (a positive integer), else the
  // hardware concurrency.
  static ThreadPool& global();
  // The thread count TGC_NUM_THREADS asks for, or the hardware concurrency.
  static int defaultNumThreads();

  int numThreads() const { return static_cast<int>(workers_.size()) + 1; }

#if defined(__linux__)
  // The CPUs a pool of n threads created on CPU `self` binds its workers to, in order:
  // every CPU of `cpus` but self, when the pool uses all of them (n == their count and self
  // among them); else none (no binding).
  static std::vector<int> workerCpus(const cpu_set_t& cpus, int self, int n);
#endif

  // Runs fn over [0, n) split into at most numThreads() chunks of at least `grain` items.
  // Blocks until every chunk is done; an exception thrown by fn is rethrown here (the
  // first one, after all chunks have finished).
  void parallelFor(int64_t n, const RangeFn& fn, int64_t grain = 1);

  // Runs fn on the chunks [i, i + chunk) of [0, n) (the last one shorter), the threads
  // taking chunks from a shared counter until none are left: work spreads itself when chunks cost unequal time, or when a
  // thread is slowed by other load on its core.
  void parallelForDynamic(int64_t n, int64_t chunk, const RangeFn& fn);

  // Runs fn(t) for t = 0..tasks-1 (tasks is capped at numThreads()), one task per thread,
  // for work that splits itself. Tasks must not wait for each other: a nested call runs
  // them one after another. Every task runs in the calling thread's floating-point mode
  // (support/float_mode.h: subnormals flushed or not).
  void runOnThreads(int tasks, const std::function<void(int)>& fn);

  // Whether runOnThreads(tasks, ...) called from this thread runs its tasks at the same
  // time, each on its own thread (2 <= tasks <= numThreads(), and not nested in a running
  // region): only then may the tasks wait for each other.
  bool runsSideBySide(int tasks) const;

 private:
  void workerLoop(int index);
  void runChunk(int index);

  std::vector<std::thread> workers_;
  std::mutex submitMutex_;  // one parallel region at a time

  // The current job, published by bumping generation_.
  const std::function<void(int)>* job_ = nullptr;
  int jobTasks_ = 0;
  uint32_t jobMode_ = 0;  // the submitting thread's floating-point mode (support/float_mode.h)
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // chunks of the current job not yet finished
  std::atomic<bool> stop_{false};
  std::mutex errorMutex_;
  std::exception_ptr error_;
};

}  // namespace tgc
