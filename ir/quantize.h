// Symmetric int8 quantization, one rule for the reference interpreter and the kernels
// (codegen/gemm_int8.h): a group of values (a row of activations, a column of weights) with
// largest magnitude m gets the scale s = m / 127 (1 when m is 0), and x becomes
// round-to-nearest-even(x * (1 / s)) clamped to [-127, 127], all in f32.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace tgc {

inline float int8Scale(float maxAbs) { return maxAbs > 0 ? maxAbs / 127.0f : 1.0f; }

inline int8_t quantizeInt8(float x, float invScale) {
  return static_cast<int8_t>(std::clamp(std::nearbyint(x * invScale), -127.0f, 127.0f));
}

}  // namespace tgc
