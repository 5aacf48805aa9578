// Philox4x32-10 counter-based random numbers (Salmon et al., SC'11): the same (key, counter)
// gives the same bits on every backend, so dropout masks are reproducible everywhere.
#pragma once

#include <array>
#include <cstdint>

namespace tgc {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// The value of element i of philox_uniform(seed, offset): counter = (offset + i) as 64 bits in
// words 0-1, words 2-3 zero; key = seed's two 32-bit halves; word 0 of the output, top 24 bits,
// scaled to [0, 1).
float philoxUniformAt(uint64_t seed, uint64_t offset, uint64_t i);

}  // namespace tgc
