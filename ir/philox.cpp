// Philox4x32-10 as defined in Salmon, Moraes, Dror, Shaw, "Parallel Random Numbers: As Easy
// as 1, 2, 3" (SC'11). Written from the paper's definition: each round multiplies words 0 and
// 2 by fixed 32-bit constants, takes the 64-bit products apart into high and low halves, and
// mixes the high halves with the other words and the round key; the key advances by the Weyl
// constants between rounds.
#include "ir/philox.h"

namespace tgc {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1
constexpr int kRounds = 10;

std::array<uint32_t, 4> round(const std::array<uint32_t, 4>& c, const std::array<uint32_t, 2>& k) {
  uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
  uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
  auto hi = [](uint64_t p) { return static_cast<uint32_t>(p >> 32); };
  auto lo = [](uint64_t p) { return static_cast<uint32_t>(p); };
  return {hi(p1) ^ c[1] ^ k[0], lo(p1), hi(p0) ^ c[3] ^ k[1], lo(p0)};
}

}  // namespace

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  for (int r = 0; r < kRounds; ++r) {
    if (r > 0) {  // the first round uses the key as given
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    counter = round(counter, key);
  }
  return counter;
}

std::array<float, 4> philoxUniformQuad(uint64_t seed, uint64_t offset, uint64_t q) {
  uint64_t ctr = offset + q;  // wraps modulo 2^64, like the 64-bit counter it is
  std::array<uint32_t, 4> out =
      philox4x32({static_cast<uint32_t>(ctr), static_cast<uint32_t>(ctr >> 32), 0u, 0u},
                 {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  // 24 bits fit a float's significand exactly, so the scaling is exact and the largest
  // value is 1 - 2^-24 < 1.
  std::array<float, 4> u;
  for (int w = 0; w < 4; ++w) u[w] = static_cast<float>(out[w] >> 8) * (1.0f / 16777216.0f);
  return u;
}

float philoxUniformAt(uint64_t seed, uint64_t offset, uint64_t i) {
  return philoxUniformQuad(seed, offset, i >> 2)[i & 3];
}

}  // namespace tgc
