// gemm_int8_bench: the int8 GEMM (codegen/gemm_int8.h: dynamic per-row activations, per-
// column weights, VPDPBUSD) against tgc's f32 GEMM on the same shapes and threads,
// alternating the two, the best of --runs each; prints GOP/s and the int8 / f32 speedup.
// The int8 time includes quantizing A and dequantizing C, as a quantized linear layer pays.
//
//   build/bench/gemm_int8_bench                      # the decoder's shapes, 1 and 2 threads
//   build/bench/gemm_int8_bench --shape 256x2048x512 --runs 50
//   build/bench/gemm_int8_bench --kernel avxvnni      # the 256-bit kernels (AVX-VNNI hosts)
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codegen/gemm.h"
#include "codegen/gemm_int8.h"
#include "support/thread_pool.h"

using namespace tgc;
using namespace tgc::codegen;

int main(int argc, char** argv) {
  std::vector<std::array<int64_t, 3>> shapes = {
      {32, 512, 512}, {256, 512, 512}, {256, 2048, 512}, {256, 512, 2048}, {32, 8000, 512}};
  int runs = 20;
  Int8Kernel kernel = Int8Kernel::best;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--kernel") && i + 1 < argc) {
      const std::string k = argv[++i];
      kernel = k == "avx512vnni" ? Int8Kernel::avx512vnni
               : k == "avxvnni"  ? Int8Kernel::avxvnni
               : k == "avx2"     ? Int8Kernel::avx2
               : k == "portable" ? Int8Kernel::portable
                                 : Int8Kernel::best;
    } else if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) {
      std::array<int64_t, 3> s{};
      if (std::sscanf(argv[++i], "%ldx%ldx%ld", &s[0], &s[1], &s[2]) != 3) {
        std::fprintf(stderr, "--shape MxNxK\n");
        return 1;
      }
      shapes = {s};
    } else {
      std::fprintf(stderr, "usage: gemm_int8_bench [--shape MxNxK] [--runs N] [--kernel best|avx512vnni|avxvnni|avx2|portable]\n");
      return 1;
    }
  }
  const Int8Kernel best = kernel == Int8Kernel::best ? hostInt8Kernel() : kernel;
  fmt::print("int8 kernels: {}\n", best == Int8Kernel::avx512vnni ? "AVX512-VNNI (512-bit VPDPBUSD)"
                                   : best == Int8Kernel::avxvnni  ? "AVX-VNNI (256-bit VPDPBUSD)"
                                   : best == Int8Kernel::avx2     ? "AVX2 (VPMADDWD on 16-bit operands)"
                                                                  : "the portable loops");
  fmt::print("{:>16} {:>8} {:>12} {:>12} {:>9}\n", "MxNxK", "threads", "f32 GFLOP/s", "int8 GOP/s", "int8/f32");
  for (const auto& [m, n, k] : shapes) {
    std::mt19937 rng(1);
    std::normal_distribution<float> d;
    std::vector<float> a(static_cast<size_t>(m * k)), w(static_cast<size_t>(k * n)), c(static_cast<size_t>(m * n));
    for (auto& x : a) x = d(rng);
    for (auto& x : w) x = d(rng);
    const Int8Weights q = quantizeWeights(w.data(), k, n, n);
    const GemmDesc desc = GemmDesc::contiguous(DType::f32, m, n, k);
    const GemmEngine& engine = GemmEngine::host(DType::f32);
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      double f32 = 1e30, i8 = 1e30;
      for (int r = 0; r < runs; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        engine.run(desc, a.data(), w.data(), c.data(), &pool);
        auto t1 = std::chrono::steady_clock::now();
        int8Gemm(a.data(), m, k, q, nullptr, c.data(), n, &pool, kernel);
        auto t2 = std::chrono::steady_clock::now();
        f32 = std::min(f32, std::chrono::duration<double>(t1 - t0).count());
        i8 = std::min(i8, std::chrono::duration<double>(t2 - t1).count());
      }
      const double ops = 2.0 * static_cast<double>(m * n * k);
      fmt::print("{:>16} {:>8} {:>12.1f} {:>12.1f} {:>9.2f}\n", fmt::format("{}x{}x{}", m, n, k),
                 threads, ops / f32 / 1e9, ops / i8 / 1e9, f32 / i8);
    }
  }
  return 0;
}
