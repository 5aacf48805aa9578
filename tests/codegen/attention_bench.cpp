// The CPU FlashAttention kernels (codegen/attention_cpu.h) called directly at one shape:
// forward and backward time per call, without a graph around them. Not a test:
//   build/tests/codegen/attention_bench [--batch 32] [--heads 4] [--len 32] [--dim 64]
//       [--causal] [--mask] [--dropout 0.1] [--threads 1] [--runs 300] [--clock cpu|wall]
//       [--min-len N] [--mask-per-query] [--produce] [--bthd] [--huge-pages]
// --mask adds a key-padding mask [batch, 1, 1, len] (item b drops its last b % 5 keys, or with
// --min-len N keeps N + (len - N) * b / (batch - 1) keys: padded sentences), as the
// Transformer's padding masks; --mask-per-query stores the same mask once per query,
// [batch, 1, len, len], which the kernels do not take for a key-padding mask (the A/B of
// their cut at the last allowed key; the results are equal). The figures are the median and
// the minimum over the runs (the minimum is the steadier one on a shared machine); --clock cpu (the default) is the
// process's CPU time divided by the threads, which only means something when they all stay
// busy, so compare at --threads 1. GFLOP/s counts the dense products (4 L^2 D per head
// forward, 10 L^2 D backward), also under causal. The checksum of the results lets two
// builds be checked for the same output. --produce rewrites q, k, v (before the forward) and
// dout (before the backward) from copies with the pool's parallelFor before every call,
// untimed, as the training step's head-split transposes do: the kernels then find their
// operands where the step leaves them (partly in each thread's L2, the rest in L3). --bthd
// reads and writes q, k, v, out and the gradients as [batch, len, heads, dim] (layout bthd:
// each head's rows heads * dim apart, as the projection GEMMs leave them). --huge-pages puts
// every operand on its own 2 MiB-aligned run of transparent huge pages (madvise), as the
// executable's arena does: physical addresses then keep the strides' low bits, which the
// caches' set indices use.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "codegen/attention_cpu.h"
#include <sys/mman.h>

#include "support/thread_pool.h"
#include "tests/bench_clock.h"

namespace {

struct Options {
  int64_t batch = 32, heads = 4, len = 32, dim = 64, minLen = -1;
  bool causal = false, mask = false, perQuery = false, cpuClock = true, produce = false;
  bool bthd = false, huge = false;
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
    } else if (a == "--mask-per-query") {
      o.perQuery = o.mask = true;
    } else if (a == "--produce") {
      o.produce = true;
    } else if (a == "--bthd") {
      o.bthd = true;
    } else if (a == "--huge-pages") {
      o.huge = true;
    } else if (a == "--clock" && hasValue) {
      const std::string c = argv[++i];
      if (c != "cpu" && c != "wall") return false;
      o.cpuClock = c == "cpu";
    } else if (hasValue && (a == "--batch" || a == "--heads" || a == "--len" || a == "--dim" ||
                            a == "--threads" || a == "--runs" || a == "--dropout" ||
                            a == "--min-len")) {
      const char* v = argv[++i];
      if (a == "--batch") o.batch = std::atoll(v);
      if (a == "--heads") o.heads = std::atoll(v);
      if (a == "--len") o.len = std::atoll(v);
      if (a == "--dim") o.dim = std::atoll(v);
      if (a == "--threads") o.threads = std::atoi(v);
      if (a == "--runs") o.runs = std::atoi(v);
      if (a == "--dropout") o.dropout = std::atof(v);
      if (a == "--min-len") o.minLen = std::atoll(v);
    } else {
      return false;
    }
  }
  return o.batch > 0 && o.heads > 0 && o.len > 0 && o.dim > 0 && o.threads > 0 && o.runs > 0 &&
         o.dropout >= 0 && o.dropout < 1 && o.minLen <= o.len;
}

// Operand storage: each buffer 2 MiB-aligned, on huge pages when hugePages is set.
bool hugePages = false;
template <class T>
struct HugeAlloc {
  using value_type = T;
  HugeAlloc() = default;
  template <class U>
  explicit HugeAlloc(const HugeAlloc<U>&) {}
  T* allocate(size_t n) {
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t bytes = (n * sizeof(T) + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, bytes);
    if (!p) throw std::bad_alloc();
    if (hugePages) madvise(p, bytes, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  bool operator==(const HugeAlloc&) const { return true; }
};
using Buffer = std::vector<float, HugeAlloc<float>>;

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
                 "[--dropout P] [--threads N] [--runs R] [--clock cpu|wall] [--min-len N] "
                 "[--mask-per-query] [--produce] [--bthd] [--huge-pages]\n",
                 argv[0]);
    return 2;
  }
  const int64_t heads = o.batch * o.heads, n = heads * o.len * o.dim;
  codegen::AttentionParams p;
  p.batch = heads;
  p.heads = o.bthd ? o.heads : 1;
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
    p.maskStrideI = o.perQuery ? o.len : 0;
    const int64_t rows = o.perQuery ? o.len : 1;
    mask.resize(static_cast<size_t>(o.batch * rows * o.len));
    for (int64_t b = 0; b < o.batch; ++b) {
      const int64_t keep =
          o.minLen < 0 ? o.len - b % 5
                       : o.minLen + (o.len - o.minLen) * b / std::max<int64_t>(1, o.batch - 1);
      for (int64_t e = 0; e < rows * o.len; ++e)
        mask[static_cast<size_t>(b * rows * o.len + e)] = e % o.len < keep ? 1 : 0;
    }
    for (int64_t h = 0; h < heads; ++h) p.maskBase.push_back(h / o.heads * rows * o.len);
  }
  const auto size = static_cast<size_t>(n);
  hugePages = o.huge;
  Buffer q(size), k(size), v(size), dout(size), out(size), dq(size), dk(size), dv(size),
      lse(static_cast<size_t>(heads * o.len));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (Buffer* t : {&q, &k, &v, &dout})
    for (float& x : *t) x = uniform(rng);
  ThreadPool pool(o.threads);
  const Buffer q0 = q, k0 = k, v0 = v, dout0 = dout;
  auto produce = [&](std::vector<std::pair<const Buffer*, Buffer*>> ts) {
    if (!o.produce) return;
    for (auto [from, to] : ts)
      pool.parallelFor(n, [&](int64_t b, int64_t e) {
        std::copy(from->begin() + b, from->begin() + e, to->begin() + b);
      });
  };
  const uint8_t* m = o.mask ? mask.data() : nullptr;
  const double per = o.cpuClock ? o.threads : 1;
  std::vector<double> tf, tb;
  for (int r = 0; r < o.runs; ++r) {
    produce({{&q0, &q}, {&k0, &k}, {&v0, &v}});
    const double t0 = now(o.cpuClock);
    codegen::attentionForward(p, q.data(), k.data(), v.data(), m, out.data(), lse.data(), pool);
    const double t1 = now(o.cpuClock);
    produce({{&dout0, &dout}});
    const double t1b = now(o.cpuClock);
    codegen::attentionBackward(p, q.data(), k.data(), v.data(), out.data(), lse.data(),
                               dout.data(), m, dq.data(), dk.data(), dv.data(), pool);
    const double t2 = now(o.cpuClock);
    tf.push_back((t1 - t0) / per);
    tb.push_back((t2 - t1b) / per);
  }
  double checksum = 0;
  for (const Buffer* t : {&out, &dq, &dk, &dv})
    for (float x : *t) checksum += x;
  const double dense = static_cast<double>(heads * o.len * o.len * o.dim);
  const Stat f = stat(tf), b = stat(tb);
  std::printf(
      "B%lld H%lld L%lld D%lld%s%s%s%s%s%s, %d thread(s), %s clock, %d runs\n"
      "  forward  median %.3f ms  min %.3f ms  (%.1f GFLOP/s at the min)\n"
      "  backward median %.3f ms  min %.3f ms  (%.1f GFLOP/s at the min)\n"
      "  checksum %.9g\n",
      static_cast<long long>(o.batch), static_cast<long long>(o.heads),
      static_cast<long long>(o.len), static_cast<long long>(o.dim), o.causal ? " causal" : "",
      o.perQuery ? " key-padding mask (per query)" : o.mask ? " key-padding mask" : "", o.dropout > 0 ? " dropout" : "", o.produce ? " produced" : "", o.bthd ? " bthd" : "", o.huge ? " huge pages" : "",
      o.threads,
      o.cpuClock ? "cpu" : "wall", o.runs, f.median * 1e3, f.min * 1e3,
      4 * dense / f.min * 1e-9, b.median * 1e3, b.min * 1e3, 10 * dense / b.min * 1e-9,
      checksum);
  return 0;
}
