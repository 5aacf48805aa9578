// The CPU FlashAttention kernels (codegen/attention_cpu.h) called directly at one shape:
// forward and backward time per call, without a graph around them. Not a test:
//   build/tests/codegen/attention_bench [--batch 32] [--heads 4] [--len 32] [--dim 64]
//       [--causal] [--mask] [--dropout 0.1] [--threads 1] [--runs 300] [--clock cpu|wall]
// --mask adds a key-padding mask [batch, 1, 1, len] (item b drops its last b % 5 keys), as
// the Transformer's padding masks. The figures are the median and the minimum over the runs
// (the minimum is the steadier one on a shared machine); --clock cpu (the default) is the
// process's CPU time divided by the threads, which only means something when they all stay
// busy, so compare at --threads 1. GFLOP/s counts the dense products (4 L^2 D per head
// forward, 10 L^2 D backward), also under causal. The checksum of the results lets two
// builds be checked for the same output.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codegen/attention_cpu.h"
#include "runtime/thread_pool.h"
#include "tests/bench_clock.h"

namespace {

struct Options {
  int64_t batch = 32, heads = 4, len = 32, dim = 64;
  bool causal = false, mask = false, cpuClock = true;
  double dropout = 0;
  int threads = 1, runs = 300;
};

double now(bool cpu) { return tgc::bench::seconds(cpu); }

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool hasValue = i + 1 < argc;
    if (a == "--causal") {
      o.causal = true;
    } else if (a == "--mask") {
      o.mask = true;
    } else if (a == "--clock" && hasValue) {
      const std::string c = argv[++i];
      if (c != "cpu" && c != "wall") return false;
      o.cpuClock = c == "cpu";
    } else if (hasValue && (a == "--batch" || a == "--heads" || a == "--len" || a == "--dim" ||
                            a == "--threads" || a == "--runs" || a == "--dropout")) {
      const char* v = argv[++i];
      if (a == "--batch") o.batch = std::atoll(v);
      if (a == "--heads") o.heads = std::atoll(v);
      if (a == "--len") o.len = std::atoll(v);
      if (a == "--dim") o.dim = std::atoll(v);
      if (a == "--threads") o.threads = std::atoi(v);
      if (a == "--runs") o.runs = std::atoi(v);
      if (a == "--dropout") o.dropout = std::atof(v);
    } else {
      return false;
    }
  }
  return o.batch > 0 && o.heads > 0 && o.len > 0 && o.dim > 0 && o.threads > 0 && o.runs > 0 &&
         o.dropout >= 0 && o.dropout < 1;
}

struct Stat {
  double median, min;
};
Stat stat(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front()};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tgc;
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: %s [--batch B] [--heads H] [--len L] [--dim D] [--causal] [--mask] "
                 "[--dropout P] [--threads N] [--runs R] [--clock cpu|wall]\n",
                 argv[0]);
    return 2;
  }
  const int64_t heads = o.batch * o.heads, n = heads * o.len * o.dim;
  codegen::AttentionParams p;
  p.batch = heads;
  p.tq = p.tk = o.len;
  p.d = p.dv = o.dim;
  p.scale = 1.0 / std::sqrt(static_cast<double>(o.dim));
  p.causal = o.causal;
  p.pDrop = o.dropout;
  p.seed = 42;
  p.offset = 7;
  std::vector<uint8_t> mask;
  if (o.mask) {
    p.hasMask = true;
    p.maskStrideJ = 1;
    mask.resize(static_cast<size_t>(o.batch * o.len));
    for (int64_t b = 0; b < o.batch; ++b)
      for (int64_t j = 0; j < o.len; ++j)
        mask[static_cast<size_t>(b * o.len + j)] = j < o.len - b % 5 ? 1 : 0;
    for (int64_t h = 0; h < heads; ++h) p.maskBase.push_back(h / o.heads * o.len);
  }
  const auto size = static_cast<size_t>(n);
  std::vector<float> q(size), k(size), v(size), dout(size), out(size), dq(size), dk(size),
      dv(size), lse(static_cast<size_t>(heads * o.len));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (std::vector<float>* t : {&q, &k, &v, &dout})
    for (float& x : *t) x = uniform(rng);
  ThreadPool pool(o.threads);
  const uint8_t* m = o.mask ? mask.data() : nullptr;
  const double per = o.cpuClock ? o.threads : 1;
  std::vector<double> tf, tb;
  for (int r = 0; r < o.runs; ++r) {
    const double t0 = now(o.cpuClock);
    codegen::attentionForward(p, q.data(), k.data(), v.data(), m, out.data(), lse.data(), pool);
    const double t1 = now(o.cpuClock);
    codegen::attentionBackward(p, q.data(), k.data(), v.data(), out.data(), lse.data(),
                               dout.data(), m, dq.data(), dk.data(), dv.data(), pool);
    const double t2 = now(o.cpuClock);
    tf.push_back((t1 - t0) / per);
    tb.push_back((t2 - t1) / per);
  }
  double checksum = 0;
  for (const std::vector<float>* t : {&out, &dq, &dk, &dv})
    for (float x : *t) checksum += x;
  const double dense = static_cast<double>(heads * o.len * o.len * o.dim);
  const Stat f = stat(tf), b = stat(tb);
  std::printf(
      "B%lld H%lld L%lld D%lld%s%s%s, %d thread(s), %s clock, %d runs\n"
      "  forward  median %.3f ms  min %.3f ms  (%.1f GFLOP/s at the min)\n"
      "  backward median %.3f ms  min %.3f ms  (%.1f GFLOP/s at the min)\n"
      "  checksum %.9g\n",
      static_cast<long long>(o.batch), static_cast<long long>(o.heads),
      static_cast<long long>(o.len), static_cast<long long>(o.dim), o.causal ? " causal" : "",
      o.mask ? " key-padding mask" : "", o.dropout > 0 ? " dropout" : "", o.threads,
      o.cpuClock ? "cpu" : "wall", o.runs, f.median * 1e3, f.min * 1e3,
      4 * dense / f.min * 1e-9, b.median * 1e3, b.min * 1e3, 10 * dense / b.min * 1e-9,
      checksum);
  return 0;
}
