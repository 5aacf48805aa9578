// The softmax-cross-entropy library kernels (codegen/loss_kernels.h) called directly at one
// shape: forward and backward time per call, without a graph around them, next to a plain
// read of the logits and a read + write of them (the kernels' memory floor). Not a test:
//   build/tests/codegen/loss_bench [--rows 1024] [--vocab 8000] [--smoothing 0.1] [--f64]
//       [--portable] [--threads 1] [--runs 100] [--clock cpu|wall]
// --portable runs the kernels' portable build instead of the AVX2 one (codegen::setLossIsa).
// The figures are the median and the minimum over the runs; --clock cpu (the default) is
// the process's CPU time divided by the threads, which only means something when they all
// stay busy, so compare at --threads 1. Every run uses the same buffers, larger than the
// caches (32 MB of logits at the default shape), so every run streams them from memory. The checksum of the results lets two builds be checked for the same output.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codegen/loss_kernels.h"
#include "support/thread_pool.h"
#include "tests/bench_clock.h"

namespace {

struct Options {
  int64_t rows = 1024, vocab = 8000;
  double smoothing = 0.1;
  bool f64 = false, portable = false, cpuClock = true;
  int threads = 1, runs = 100;
};

double now(bool cpu) { return tgc::bench::seconds(cpu); }

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool hasValue = i + 1 < argc;
    if (a == "--f64") {
      o.f64 = true;
    } else if (a == "--portable") {
      o.portable = true;
    } else if (a == "--clock" && hasValue) {
      const std::string c = argv[++i];
      if (c != "cpu" && c != "wall") return false;
      o.cpuClock = c == "cpu";
    } else if (hasValue && (a == "--rows" || a == "--vocab" || a == "--smoothing" ||
                            a == "--threads" || a == "--runs")) {
      const char* v = argv[++i];
      if (a == "--rows") o.rows = std::atoll(v);
      if (a == "--vocab") o.vocab = std::atoll(v);
      if (a == "--smoothing") o.smoothing = std::atof(v);
      if (a == "--threads") o.threads = std::atoi(v);
      if (a == "--runs") o.runs = std::atoi(v);
    } else {
      return false;
    }
  }
  return o.rows > 0 && o.vocab > 0 && o.threads > 0 && o.runs > 0;
}

struct Stat {
  double median, min;
};
Stat stat(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front()};
}

template <class T>
int run(const Options& o) {
  using namespace tgc;
  const auto n = static_cast<size_t>(o.rows * o.vocab), rows = static_cast<size_t>(o.rows);
  std::vector<T> x(n), dx(n), loss(rows), lse(rows), dloss(rows);
  std::vector<int64_t> targets(rows);
  std::mt19937 rng(1);
  std::normal_distribution<T> normal(0, 2);
  for (T& v : x) v = normal(rng);
  for (size_t r = 0; r < rows; ++r) {
    // Every 8th row padding (target -1), as a batch of padded sentences has some.
    targets[r] = r % 8 == 7 ? -1 : static_cast<int64_t>(rng() % static_cast<uint32_t>(o.vocab));
    dloss[r] = T(1) / static_cast<T>(o.rows);
  }
  const codegen::CrossEntropyShape s{o.f64 ? DType::f64 : DType::f32, DType::i64, o.rows,
                                     o.vocab, o.smoothing};
  ThreadPool pool(o.threads);
  const double per = o.cpuClock ? o.threads : 1;
  std::vector<double> tf, tb, tr, trw;
  volatile T sink = 0;
  for (int r = 0; r < o.runs; ++r) {
    const double t0 = now(o.cpuClock);
    codegen::softmaxCrossEntropyForward(s, x.data(), targets.data(), loss.data(), lse.data(),
                                        pool);
    const double t1 = now(o.cpuClock);
    codegen::softmaxCrossEntropyBackward(s, x.data(), targets.data(), lse.data(), dloss.data(),
                                         dx.data(), pool);
    const double t2 = now(o.cpuClock);
    // The floors: a sum over the logits, and dx = 2 x (read + write), on the same threads.
    std::vector<T> part(static_cast<size_t>(o.threads) * 16);
    pool.parallelFor(o.rows, [&](int64_t b, int64_t e) {
      T acc[16] = {};
      const T* p = x.data() + b * o.vocab;
      const int64_t m = (e - b) * o.vocab, full = m / 16 * 16;
      for (int64_t i = 0; i < full; i += 16)
        for (int l = 0; l < 16; ++l) acc[l] += p[i + l];
      for (int64_t i = full; i < m; ++i) acc[0] += p[i];
      T sum = 0;
      for (T a : acc) sum += a;
      sink = sink + sum;
    });
    const double t3 = now(o.cpuClock);
    pool.parallelFor(o.rows, [&](int64_t b, int64_t e) {
      for (int64_t i = b * o.vocab; i < e * o.vocab; ++i)
        dx[static_cast<size_t>(i)] = T(2) * x[static_cast<size_t>(i)];
    });
    const double t4 = now(o.cpuClock);
    tf.push_back((t1 - t0) / per);
    tb.push_back((t2 - t1) / per);
    tr.push_back((t3 - t2) / per);
    trw.push_back((t4 - t3) / per);
  }
  // Recompute the backward (the floor pass overwrote dx) for the checksum.
  codegen::softmaxCrossEntropyBackward(s, x.data(), targets.data(), lse.data(), dloss.data(),
                                       dx.data(), pool);
  double checksum = 0;
  for (T v : loss) checksum += static_cast<double>(v);
  for (T v : lse) checksum += static_cast<double>(v);
  for (size_t i = 0; i < n; i += 7) checksum += static_cast<double>(dx[i]) * 1e3;
  const Stat f = stat(tf), b = stat(tb), rd = stat(tr), rw = stat(trw);
  std::printf(
      "%lld x %lld %s smoothing %g, %d thread(s), %s clock, %d runs (%s)\n"
      "  forward    median %.3f ms  min %.3f ms\n"
      "  backward   median %.3f ms  min %.3f ms\n"
      "  read       median %.3f ms  min %.3f ms  (floor of the forward)\n"
      "  read+write median %.3f ms  min %.3f ms  (floor of the backward)\n"
      "  checksum %.9g\n",
      static_cast<long long>(o.rows), static_cast<long long>(o.vocab), o.f64 ? "f64" : "f32",
      o.smoothing, o.threads, o.cpuClock ? "cpu" : "wall", o.runs,
      codegen::lossIsa() == codegen::LossIsa::Avx2 ? "avx2" : "portable", f.median * 1e3,
      f.min * 1e3, b.median * 1e3, b.min * 1e3, rd.median * 1e3, rd.min * 1e3,
      rw.median * 1e3, rw.min * 1e3, checksum);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: %s [--rows R] [--vocab V] [--smoothing E] [--f64] [--portable] "
                 "[--threads N] [--runs R] [--clock cpu|wall]\n",
                 argv[0]);
    return 2;
  }
  if (o.portable) tgc::codegen::setLossIsa(tgc::codegen::LossIsa::Portable);
  return o.f64 ? run<double>(o) : run<float>(o);
}
