// Initial parameter values, deterministic in (seed, parameter name).
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "frontend/frontend.h"

namespace tgc {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and the same sequence on every platform.
class SplitMix {
 public:
  explicit SplitMix(uint64_t s) : s_(s) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Standard normal by Box-Muller (u1 in (0, 1] so the log is finite).
  double normal() {
    double u1 = 1.0 - uniform();
    double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t s_;
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

Tensor initParam(const ParamInit& p, uint64_t seed) {
  Tensor t(p.type);
  const Shape& s = p.type.shape;
  double fanIn = 1, fanOut = 1;
  if (s.size() >= 2) {
    double receptive = 1;
    for (size_t i = 0; i + 2 < s.size(); ++i) receptive *= static_cast<double>(s[i]);
    fanIn = static_cast<double>(s[s.size() - 2]) * receptive;
    fanOut = static_cast<double>(s[s.size() - 1]) * receptive;
  } else if (s.size() == 1) {
    fanIn = fanOut = static_cast<double>(s[0]);
  }
  double fanSum = std::max(fanIn + fanOut, 1.0);
  SplitMix rng(seed ^ fnv1a(p.name));
  int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    double v;
    if (p.kind == "xavier_uniform") {
      double bound = p.arg * std::sqrt(6.0 / fanSum);
      v = (2.0 * rng.uniform() - 1.0) * bound;
    } else if (p.kind == "xavier_normal") {
      v = rng.normal() * p.arg * std::sqrt(2.0 / fanSum);
    } else if (p.kind == "normal") {
      v = rng.normal() * p.arg;
    } else if (p.kind == "uniform") {
      v = (2.0 * rng.uniform() - 1.0) * p.arg;
    } else if (p.kind == "zeros") {
      v = 0;
    } else if (p.kind == "ones") {
      v = 1;
    } else if (p.kind == "constant") {
      v = p.arg;
    } else {
      throw std::invalid_argument(fmt::format("parameter '{}': unknown initializer '{}'", p.name, p.kind));
    }
    t.setF(i, v);
  }
  return t;
}

std::map<std::string, Tensor> initParams(const std::vector<ParamInit>& params, uint64_t seed) {
  std::map<std::string, Tensor> r;
  for (const auto& p : params) r.emplace(p.name, initParam(p, seed));
  return r;
}

}  // namespace tgc
