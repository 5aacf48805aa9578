// A small deterministic random generator for data generation, splits and shuffles.
//
// std::uniform_int_distribution and std::shuffle differ between standard libraries, so a
// seed would not name the same data everywhere; these are specified here bit for bit.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace tgc::data {

// SplitMix64 (Steele, Lea, Flood 2014): 64-bit state, passes BigCrush, trivially seekable.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n), without modulo bias (rejects the top partial range). n > 0.
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
      x = next();
    } while (x >= limit);
    return x % n;
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// An independent stream for (seed, purpose): hashing both keeps streams for different
// purposes (held-out numbers, training samples, epoch shuffles) unrelated.
inline uint64_t mixSeed(uint64_t seed, uint64_t purpose) {
  Rng r(seed ^ (purpose * 0xD1B54A32D192ED03ull));
  r.next();
  return r.next();
}

// Fisher–Yates, the same permutation for the same generator state everywhere.
template <class T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.below(i));
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace tgc::data
