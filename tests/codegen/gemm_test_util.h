// Helpers shared by the GEMM tests (gemm, gemm_epilogue, gemm_batched).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace tgc::codegen::testing {

// n values uniform in [lo, hi), the same for a given seed.
template <class T>
std::vector<T> randomVector(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(rng));
  return v;
}

}  // namespace tgc::codegen::testing
