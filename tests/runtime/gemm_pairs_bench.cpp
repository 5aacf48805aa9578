// Two independent GEMMs of the small training step run as a pair (one per thread, each on
// the single-thread path: what the executable does for GEMM pairs, runtime/launch_schedule.h)
// against one after the other, each split over both threads (what it does without). Not a
// test:
//   build/tests/runtime/gemm_pairs_bench [--runs 30] [--clock wall|cpu] [--preset small|base] [--cold] [--only TEXT]
// The two ways alternate, run by run, on the same buffers; the figures are the minimum and
// the median time per pair of products over the runs, and GFLOP/s from the minimum. On a
// loaded host the minimum wall time (the runs in which both threads kept a core) is the
// steadier figure; the median shows how much a pair loses when the host takes one of its
// threads. --clock cpu takes the process's CPU time (both threads, spinning included)
// divided by 2: what each way costs in cores, whatever the host does in between. The last
// column is both products on one thread, the other idle (GFLOP/s at the minimum over a
// third of the runs): a pair cannot beat twice that.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codegen/gemm.h"
#include "support/thread_pool.h"
#include "tests/bench_clock.h"

namespace {

using tgc::ThreadPool;
using tgc::codegen::GemmDesc;

struct Product {
  GemmDesc desc;
  std::vector<float> a, b, c;
  explicit Product(GemmDesc d) : desc(std::move(d)) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    a.resize(static_cast<size_t>(desc.m * desc.k));
    b.resize(static_cast<size_t>(desc.k * desc.n));
    c.resize(static_cast<size_t>(desc.m * desc.n));
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
  }
  void run(ThreadPool& pool) { tgc::codegen::gemm(desc, a.data(), b.data(), c.data(), &pool); }
  double flops() const { return 2.0 * static_cast<double>(desc.m * desc.n * desc.k); }
};

struct Case {
  const char* name;
  GemmDesc x, y;
};

// The CPU clock counts both threads: half of it is the time per thread.
double now(bool cpu) { return cpu ? tgc::bench::seconds(true) / 2 : tgc::bench::seconds(false); }

}  // namespace

int main(int argc, char** argv) {
  int runs = 30;
  bool cpu = false;
  bool base = false;
  bool cold = false;      // --cold: caches overwritten before each timed way
  const char* only = "";  // run only the pairs whose name contains this
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--clock") == 0 && i + 1 < argc) {
      cpu = std::strcmp(argv[++i], "cpu") == 0;
    } else if (std::strcmp(argv[i], "--preset") == 0 && i + 1 < argc) {
      base = std::strcmp(argv[++i], "base") == 0;
    } else if (std::strcmp(argv[i], "--cold") == 0) {
      cold = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--runs N] [--clock wall|cpu] [--preset small|base] [--cold] [--only TEXT]\n", argv[0]);
      return 2;
    }
  }
  using tgc::DType;
  auto mm = [](int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
    return GemmDesc::contiguous(DType::f32, m, n, k, ta, tb);
  };
  // The step's pairs over 1024 token rows and a vocabulary of 8000: the small preset's
  // (B = 32 x 32 tokens, d = 256, FFN 1024) or the base preset's (B = 16 x 64, d = 512,
  // FFN 2048).
  const int64_t d = base ? 512 : 256, ff = 4 * d, rows = 1024, vocab = 8000;
  const std::vector<Case> cases = {
      {"generator dA | dW", mm(rows, d, vocab, false, true), mm(d, vocab, rows, true, false)},
      {"ffn1 dX | dW", mm(rows, d, ff, false, true), mm(d, ff, rows, true, false)},
      {"ffn2 dX | dW", mm(rows, ff, d, false, true), mm(ff, d, rows, true, false)},
      {"attn proj dX | dW", mm(rows, d, d, false, true), mm(d, d, rows, true, false)},
      {"attn Q | K", mm(rows, d, d, false, false), mm(rows, d, d, false, false)},
  };
  ThreadPool pool(2), serial(1);
  // The operands of a step's GEMM come from DRAM more often than not (the small step's
  // arena is ~130 MiB): --cold writes 64 MiB before each timed way, not timed.
  std::vector<char> evictBuf(cold ? size_t{64} << 20 : 0);
  auto evict = [&] {
    for (size_t i = 0; i < evictBuf.size(); i += 64) evictBuf[i] = static_cast<char>(evictBuf[i] + 1);
  };
  std::printf("%s clock\n%-20s %22s %22s %8s\n", cpu ? "CPU (per thread)" : "wall", "pair",
              "split min/median ms", "paired min/median ms", "gain");
  for (const Case& cs : cases) {
    if (!std::strstr(cs.name, only)) continue;
    Product x(cs.x), y(cs.y);
    std::vector<double> split, paired;
    for (int r = 0; r < runs + 2; ++r) {  // two warm-up runs each
      evict();
      double t0 = now(cpu);
      x.run(pool);
      y.run(pool);
      const double s = now(cpu) - t0;
      evict();
      t0 = now(cpu);
      pool.runOnThreads(2, [&](int t) { (t == 0 ? x : y).run(serial); });
      const double p = now(cpu) - t0;
      if (r >= 2) {
        split.push_back(s);
        paired.push_back(p);
      }
    }
    double alone = 1e30;
    for (int r = 0; r < std::max(1, runs / 3); ++r) {
      const double t0 = now(cpu);
      x.run(serial);
      y.run(serial);
      alone = std::min(alone, now(cpu) - t0);
    }
    if (cpu) alone *= 2;  // one thread's CPU time, not halved
    std::sort(split.begin(), split.end());
    std::sort(paired.begin(), paired.end());
    const double gflop = (x.flops() + y.flops()) * 1e-9;
    std::printf("%-20s %8.2f / %8.2f ms %8.2f / %8.2f ms %7.1f%%   (%.0f / %.0f GFLOP/s at the min; one thread %.0f)\n",
                cs.name, split.front() * 1e3, split[split.size() / 2] * 1e3, paired.front() * 1e3,
                paired[paired.size() / 2] * 1e3, 100 * (split.front() / paired.front() - 1),
                gflop / split.front(), gflop / paired.front(), gflop / alone);
  }
  return 0;
}
