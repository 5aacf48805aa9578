// bf16 GEMM at the Transformer's shapes: the AVX512-BF16 kernel (codegen/gemm_bf16_native.h)
// against the widening path it replaces and against the f32 GEMM on the same shapes, with
// the measured VDPBF16PS peak. Runs alternate between the kernels; figures are medians.
//
//   gemm_bf16_bench [--threads N] [--runs R] [--min-ms T] [--shape [BATCHx]MxNxK[:ab]]
//
// ":a" / ":b" mark a transposed A / B (as stored: A k x m, B n x k); a fourth number in
// front is a batch of that many products stored one after another (attention's per-head
// matmuls: 128x64x64x64). Exits 2 on a CPU without AVX512-BF16.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codegen/gemm.h"
#include "codegen/gemm_bf16.h"
#include "ir/dtype.h"
#include "support/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace tgc;
using namespace tgc::codegen;

namespace {

struct Product {
  int64_t m, n, k;
  bool ta = false, tb = false;
  int64_t batch = 1;
};

Product parseShape(const std::string& s) {
  int64_t x[4] = {};
  const int got = std::sscanf(s.c_str(), "%" SCNd64 "x%" SCNd64 "x%" SCNd64 "x%" SCNd64, &x[0],
                              &x[1], &x[2], &x[3]);
  Product r{};
  if (got == 4) r = {x[1], x[2], x[3], false, false, x[0]};
  else if (got == 3) r = {x[0], x[1], x[2], false, false, 1};
  if (got < 3 || r.m <= 0 || r.n <= 0 || r.k <= 0 || r.batch <= 0) {
    fmt::print(stderr, "gemm_bf16_bench: --shape wants [BATCHx]MxNxK[:ab], not '{}'\n", s);
    std::exit(2);
  }
  const size_t colon = s.find(':');
  const std::string flags = colon == std::string::npos ? "" : s.substr(colon + 1);
  r.ta = flags.find('a') != std::string::npos;
  r.tb = flags.find('b') != std::string::npos;
  return r;
}

using Clock = std::chrono::steady_clock;

// Seconds per call: calls repeated until minMs has passed.
template <class F>
double timeCall(F f, double minMs) {
  f();  // warm up
  int reps = 0;
  const auto t0 = Clock::now();
  double s = 0;
  do {
    f();
    ++reps;
    s = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (s * 1e3 < minMs);
  return s / reps;
}

#if defined(__x86_64__)
// VDPBF16PS's rate: 24 independent accumulator chains per thread (more than latency x
// throughput), 2 x 16 multiply-adds per instruction.
__attribute__((target("avx512f,avx512bf16"), noinline)) double dpbf16Loop(int64_t iters) {
  __m512 acc[24];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3F803F80));  // (1, 1)
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 24
    for (int r = 0; r < 24; ++r) acc[r] = _mm512_dpbf16_ps(acc[r], x, x);
  alignas(64) float lanes[16];
  __m512 sum = _mm512_setzero_ps();
  for (auto& a : acc) sum = _mm512_add_ps(sum, a);
  _mm512_store_ps(lanes, sum);
  return lanes[0];
}
#endif

double bf16Peak(ThreadPool& pool) {
#if defined(__x86_64__)
  const int64_t iters = 4'000'000;
  const double flopsPerThread = 2.0 * 32 * 24 * static_cast<double>(iters);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    pool.runOnThreads(pool.numThreads(), [&](int) {
      volatile double sink = dpbf16Loop(iters);
      (void)sink;
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, flopsPerThread * pool.numThreads() / s / 1e9);
  }
  return best;
#else
  (void)pool;
  return 0;
#endif
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, runs = 7;
  double minMs = 40;
  std::vector<Product> shapes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        fmt::print(stderr, "gemm_bf16_bench: {} needs a value\n", a);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--threads") threads = std::max(1, std::atoi(value().c_str()));
    else if (a == "--runs") runs = std::max(1, std::atoi(value().c_str()));
    else if (a == "--min-ms") minMs = std::max(1.0, std::atof(value().c_str()));
    else if (a == "--shape") shapes.push_back(parseShape(value()));
    else {
      fmt::print(stderr, "usage: gemm_bf16_bench [--threads N] [--runs R] [--min-ms T] [--shape MxNxK[:ab]]...\n");
      return 2;
    }
  }
  if (!bf16GemmHasNative()) {
    fmt::print("gemm_bf16_bench: this CPU has no AVX512-BF16; nothing to compare\n");
    return 2;
  }
  if (shapes.empty())  // the small/base steps' products: projections, FFN, vocabulary
    shapes = {{1024, 512, 512},        {1024, 2048, 512},       {1024, 512, 2048},
              {512, 512, 1024, true},  {512, 2048, 1024, true}, {1024, 512, 512, false, true},
              {1024, 8000, 256},       {1024, 256, 8000},       {8000, 256, 1024, true},
              {1024, 8000, 512, false, true}};
  ThreadPool pool(threads);
  const double peak = bf16Peak(pool);
  fmt::print("{} threads; measured VDPBF16PS peak {:.1f} GFLOP/s; medians of {} alternating runs\n\n",
             threads, peak, runs);
  fmt::print("{:<26} {:>12} {:>12} {:>12} {:>10} {:>10} {:>9}\n", "shape (MxNxK)", "native GF/s",
             "widen GF/s", "f32 GF/s", "nat/widen", "nat/f32", "of peak");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  double logSumWiden = 0, logSumF32 = 0;
  for (const Product& s : shapes) {
    const int64_t aElems = s.batch * s.m * s.k, bElems = s.batch * s.k * s.n,
                  cElems = s.batch * s.m * s.n;
    std::vector<float> af(static_cast<size_t>(aElems)), bf(static_cast<size_t>(bElems)),
        cf(static_cast<size_t>(cElems));
    for (auto& x : af) x = dist(rng);
    for (auto& x : bf) x = dist(rng);
    std::vector<uint16_t> ah(af.size()), bh(bf.size()), ch(cf.size());
    for (size_t i = 0; i < af.size(); ++i) ah[i] = floatToBF16(af[i]);
    for (size_t i = 0; i < bf.size(); ++i) bh[i] = floatToBF16(bf[i]);
    GemmDesc dh = GemmDesc::contiguous(DType::bf16, s.m, s.n, s.k, s.ta, s.tb);
    GemmDesc df = GemmDesc::contiguous(DType::f32, s.m, s.n, s.k, s.ta, s.tb);
    if (s.batch > 1) {
      dh.addBatch(s.batch);
      df.addBatch(s.batch);
    }
    const GemmEngine& f32 = GemmEngine::host(DType::f32);
    auto withPath = [&](Bf16GemmPath p) {
      return [&, p] {
        setBf16GemmPath(p);
        gemmBf16(dh, ah.data(), bh.data(), ch.data(), &pool);
      };
    };
    std::vector<double> nat, wid, f;
    for (int r = 0; r < runs; ++r) {
      nat.push_back(timeCall(withPath(Bf16GemmPath::Native), minMs));
      wid.push_back(timeCall(withPath(Bf16GemmPath::Widen), minMs));
      f.push_back(timeCall([&] { f32.run(df, af.data(), bf.data(), cf.data(), &pool); }, minMs));
    }
    const double flops = 2.0 * static_cast<double>(s.batch * s.m * s.n * s.k) / 1e9;
    const double gn = flops / median(nat), gw = flops / median(wid), gf = flops / median(f);
    logSumWiden += std::log(gn / gw);
    logSumF32 += std::log(gn / gf);
    fmt::print("{:<26} {:>12.1f} {:>12.1f} {:>12.1f} {:>10.2f} {:>10.2f} {:>8.0f}%\n",
               fmt::format("{}{}x{}x{}{}{}", s.batch > 1 ? fmt::format("{} x ", s.batch) : "", s.m,
                           s.n, s.k, s.ta ? " A^T" : "", s.tb ? " B^T" : ""),
               gn, gw, gf, gn / gw, gn / gf, 100 * gn / peak);
  }
  setBf16GemmPath(Bf16GemmPath::Native);
  const double count = static_cast<double>(shapes.size());
  fmt::print("\ngeometric mean: native/widen {:.2f}, native/f32 {:.2f}\n",
             std::exp(logSumWiden / count), std::exp(logSumF32 / count));
  return 0;
}
