// Philox4x32-10 counter-based random numbers (Salmon et al., SC'11): the same (key, counter)
// gives the same bits on every backend, so dropout masks are reproducible everywhere.
#pragma once

#include <array>
#include <cstdint>

namespace tgc {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// The value of element i of philox_uniform(seed, offset): word (i & 3) of the call with
// counter = offset + (i >> 2) as 64 bits in words 0-1, words 2-3 zero, and key = seed's two
// 32-bit halves; its top 24 bits, scaled to [0, 1). One call gives four consecutive elements,
// so a site drawing n elements uses counters [offset, offset + ceil(n / 4)).
float philoxUniformAt(uint64_t seed, uint64_t offset, uint64_t i);

// Elements 4q .. 4q + 3 of philox_uniform(seed, offset): the four words of one call.
std::array<float, 4> philoxUniformQuad(uint64_t seed, uint64_t offset, uint64_t q);

}  // namespace tgc
