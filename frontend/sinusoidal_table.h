// The sinusoidal position table of "Attention Is All You Need" (section 3.5), row-major
// [length, d]: PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)),
// computed in double. The builtin sinusoidal_table makes it a graph constant, and the
// CTranslate2 export writes the same table (CTranslate2's own puts the sines and cosines in
// two halves instead of interleaving them).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace tgc {

inline std::vector<double> sinusoidalTable(int64_t length, int64_t d) {
  std::vector<double> v(static_cast<size_t>(length * d));
  for (int64_t pos = 0; pos < length; ++pos)
    for (int64_t j = 0; j < d; ++j) {
      const double freq = std::pow(10000.0, -static_cast<double>(j - j % 2) / static_cast<double>(d));
      const double angle = static_cast<double>(pos) * freq;
      v[static_cast<size_t>(pos * d + j)] = j % 2 == 0 ? std::sin(angle) : std::cos(angle);
    }
  return v;
}

}  // namespace tgc
