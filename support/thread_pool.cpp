#include "support/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <utility>

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "support/cpu_relax.h"
#include "support/float_mode.h"

namespace tgc {

namespace {

// Set on pool workers, and on a caller while it runs its own chunk: a nested parallel
// region then runs inline instead of waiting for threads that are busy with this one.
thread_local bool tInsideParallel = false;

// How long a waiting thread polls before it sleeps on the futex. Kernels are launched
// back to back, so most waits end within this window and never pay a wake-up syscall.
// After a short busy spin it yields the core on each poll: when there are more runnable
// threads than cores, the thread being waited for may need this core to finish.
constexpr int kSpinIterations = 200;

// The yielding polls last this long (TGC_POOL_YIELD_US overrides). 2 ms rather than the
// ~0.1 ms of 200 polls: a worker that slept through a run of short serial launches woke
// late, and the scheduler could queue it on the caller's core while the other vCPU ran
// something else (attention launches that ran wholly on the caller). Small step, 2
// threads, 6 alternating rounds: median step 369 ms against 377 (500 us: 380).
int64_t yieldMicros() {
  static const int64_t us = [] {
    const char* env = std::getenv("TGC_POOL_YIELD_US");
    char* end = nullptr;
    const long long v = env ? std::strtoll(env, &end, 10) : -1;
    return env && end != env && *end == '\0' && v >= 0 ? static_cast<int64_t>(v) : int64_t{2000};
  }();
  return us;
}

template <class T, class Pred>
void spinThenWait(const std::atomic<T>& a, Pred done) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (done(a.load(std::memory_order_acquire))) return;
    cpuRelax();
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(yieldMicros());
  for (int i = 0;; ++i) {
    if (done(a.load(std::memory_order_acquire))) return;
    if ((i & 15) == 15 && std::chrono::steady_clock::now() > until) break;
    sched_yield();
  }
  for (T v = a.load(std::memory_order_acquire); !done(v); v = a.load(std::memory_order_acquire))
    a.wait(v, std::memory_order_acquire);
}

}  // namespace

#if defined(__linux__)
// The CPUs of the process: its main thread's mask, not the calling thread's (a pool
// worker's is one CPU). False when it cannot be read.
static bool processCpus(cpu_set_t& set) { return sched_getaffinity(getpid(), sizeof(set), &set) == 0; }
#endif

int ThreadPool::defaultNumThreads() {
  if (const char* env = std::getenv("TGC_NUM_THREADS")) {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v > 0 && v <= 4096) return static_cast<int>(v);
  }
#if defined(__linux__)
  cpu_set_t set;
  if (processCpus(set)) return std::max(1, CPU_COUNT(&set));
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(defaultNumThreads());
  return pool;
}

#if defined(__linux__)
std::vector<int> ThreadPool::workerCpus(const cpu_set_t& cpus, int self, int n) {
  std::vector<int> out;
  if (n < 2 || self < 0 || !CPU_ISSET(self, &cpus) || CPU_COUNT(&cpus) != n) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &cpus) && c != self) out.push_back(c);
  return out;
}
#endif

ThreadPool::ThreadPool(int numThreads) {
  int n = std::max(1, numThreads);
  workers_.reserve(n - 1);
  for (int i = 1; i < n; ++i) workers_.emplace_back([this, i] { workerLoop(i); });
#if defined(__linux__)
  // Each worker on a CPU of its own, never the creating thread's, when the pool uses every
  // CPU of the process (TGC_POOL_PIN=0: not). A new or woken worker could be queued on the
  // caller's CPU while the other stayed idle, and the scheduler took milliseconds to move
  // it: parallel regions ran at one thread's speed meanwhile (fused attention at L = 128:
  // 2.6 ms a step for its first steps instead of 1.3). The caller stays free, so that
  // processes sharing the CPUs still spread their serial work; a pool of fewer threads than
  // CPUs binds nothing, so that several of them can spread too. Best effort: a refused
  // call leaves the worker unbound.
  cpu_set_t cpus;
  const char* pin = std::getenv("TGC_POOL_PIN");
  if (n < 2 || !processCpus(cpus)) return;
  const std::vector<int> bound =
      pin && std::string(pin) == "0" ? std::vector<int>{} : workerCpus(cpus, sched_getcpu(), n);
  for (int i = 1; i < n; ++i) {
    // Unbound workers get the process's CPUs: made on a bound worker, they would inherit
    // its one CPU.
    cpu_set_t mask = cpus;
    if (!bound.empty()) {
      CPU_ZERO(&mask);
      CPU_SET(bound[i - 1], &mask);
    }
    pthread_setaffinity_np(workers_[i - 1].native_handle(), sizeof(mask), &mask);
  }
#endif
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::runChunk(int index) {
  try {
    (*job_)(index);
  } catch (...) {
    std::lock_guard lock(errorMutex_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::workerLoop(int index) {
  tInsideParallel = true;
  uint64_t seen = 0;
  for (;;) {
    spinThenWait(generation_, [seen](uint64_t g) { return g != seen; });
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    if (index < jobTasks_) {
      // The submitter's floating-point mode (support/float_mode.h), for this job.
      if (floatMode() != jobMode_) setFloatMode(jobMode_);
      runChunk(index);
    }
    // Every worker acknowledges every job, so none can read the next job's fields
    // while it still handles this one.
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::runOnThreads(int tasks, const std::function<void(int)>& fn) {
  tasks = std::min(tasks, numThreads());
  if (tasks <= 1 || tInsideParallel) {
    for (int t = 0; t < tasks; ++t) fn(t);
    return;
  }
  std::lock_guard submit(submitMutex_);
  job_ = &fn;
  jobTasks_ = tasks;
  jobMode_ = floatMode();
  error_ = nullptr;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();

  tInsideParallel = true;
  runChunk(0);
  tInsideParallel = false;
  spinThenWait(pending_, [](int p) { return p == 0; });

  job_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

bool ThreadPool::runsSideBySide(int tasks) const {
  return tasks >= 2 && tasks <= numThreads() && !tInsideParallel;
}

void ThreadPool::parallelFor(int64_t n, const RangeFn& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t chunks = std::min<int64_t>(numThreads(), (n + grain - 1) / grain);
  if (chunks <= 1 || tInsideParallel) {
    fn(0, n);
    return;
  }
  runOnThreads(static_cast<int>(chunks), [&](int t) {
    int64_t begin = n / chunks * t + std::min<int64_t>(t, n % chunks);
    int64_t end = begin + n / chunks + (t < n % chunks ? 1 : 0);
    if (begin < end) fn(begin, end);
  });
}

void ThreadPool::parallelForDynamic(int64_t n, int64_t chunk, const RangeFn& fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  const int64_t chunks = (n + chunk - 1) / chunk;
  if (chunks <= 1 || numThreads() == 1 || tInsideParallel) {
    for (int64_t c = 0; c < chunks; ++c) fn(c * chunk, std::min(n, (c + 1) * chunk));
    return;
  }
  std::atomic<int64_t> next{0};
  runOnThreads(static_cast<int>(std::min<int64_t>(numThreads(), chunks)), [&](int) {
    for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
         c = next.fetch_add(1, std::memory_order_relaxed))
      fn(c * chunk, std::min(n, (c + 1) * chunk));
  });
}

}  // namespace tgc
