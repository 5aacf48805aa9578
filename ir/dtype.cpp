#include "ir/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>

namespace tgc {

std::string_view dtypeName(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::boolean: return "bool";
  }
  return "?";
}

std::optional<DType> parseDType(std::string_view s) {
  for (DType t : kAllDTypes)
    if (dtypeName(t) == s) return t;
  return std::nullopt;
}

size_t dtypeSize(DType t) {
  switch (t) {
    case DType::f64:
    case DType::i64: return 8;
    case DType::f32:
    case DType::i32: return 4;
    case DType::bf16:
    case DType::f16: return 2;
    case DType::boolean: return 1;
  }
  return 0;
}

bool isFloat(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}
bool isInteger(DType t) { return t == DType::i32 || t == DType::i64; }

uint16_t floatToBF16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);  // keep it a quiet NaN
  uint32_t rounding = 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float bf16ToFloat(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t floatToF16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  uint32_t absu = u & 0x7FFFFFFF;
  if (absu >= 0x7F800000)  // inf or NaN
    return sign | 0x7C00 | (absu > 0x7F800000 ? 0x200 : 0);
  if (absu >= 0x477FF000)  // rounds to >= 65520: overflow to inf
    return sign | 0x7C00;
  if (absu < 0x38800000) {  // result is subnormal or zero: scale by 2^24 and round
    float a = std::bit_cast<float>(absu);
    // a * 2^24 is the subnormal's integer mantissa; nearbyint rounds to nearest even.
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped bits to nearest even.
  uint32_t mant_odd = (absu >> 13) & 1;
  absu += 0xFFF + mant_odd;
  return sign | static_cast<uint16_t>((absu - 0x38000000) >> 13);
}

float f16ToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000 | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

int64_t numElements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shapeStr(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ",";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

std::string TensorType::str() const { return std::string(dtypeName(dtype)) + shapeStr(shape); }

}  // namespace tgc
