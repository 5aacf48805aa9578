// Element types of tensors and the conversions the reference paths need.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tgc {

enum class DType : uint8_t { f32, f64, bf16, f16, i32, i64, boolean };

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                       DType::i32, DType::i64, DType::boolean};

// "f32", "f64", "bf16", "f16", "i32", "i64", "bool".
std::string_view dtypeName(DType t);
std::optional<DType> parseDType(std::string_view s);
// Bytes per element in memory (bool is one byte).
size_t dtypeSize(DType t);
bool isFloat(DType t);
bool isInteger(DType t);  // i32, i64 (not bool)

// Round-to-nearest-even conversions for the 16-bit float formats.
uint16_t floatToBF16(float f);
float bf16ToFloat(uint16_t h);
uint16_t floatToF16(float f);
float f16ToFloat(uint16_t h);

using Shape = std::vector<int64_t>;
int64_t numElements(const Shape& s);
// "[2,3]"; "[]" for a scalar.
std::string shapeStr(const Shape& s);

// dtype + static shape, printed "f32[2,3]".
struct TensorType {
  DType dtype = DType::f32;
  Shape shape;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const { return numElements(shape); }
  std::string str() const;
  friend bool operator==(const TensorType&, const TensorType&) = default;
};

}  // namespace tgc
