#include "ir/tensor.h"

#include <cmath>
#include <limits>

namespace tgc {

Tensor::Tensor(TensorType type, Uninitialized) : type_(std::move(type)) {
  storage_.resize((nbytes() + sizeof(Block) - 1) / sizeof(Block));
}

Tensor Tensor::uninitialized(TensorType type) { return Tensor(std::move(type), Uninitialized{}); }

bool Tensor::retype(const TensorType& type) {
  const size_t bytes = static_cast<size_t>(type.numel()) * dtypeSize(type.dtype), had = nbytes();
  if (bytes > capacityBytes()) return false;
  storage_.resize((bytes + sizeof(Block) - 1) / sizeof(Block));  // within capacity: no allocation
  if (bytes > had) std::memset(static_cast<char*>(data()) + had, 0, bytes - had);
  type_ = type;
  return true;
}

Tensor::Tensor(TensorType type) : Tensor(std::move(type), Uninitialized{}) {
  // An empty tensor has no storage: memset of a null pointer is undefined even for 0 bytes.
  if (!storage_.empty()) std::memset(storage_.data(), 0, storage_.size() * sizeof(Block));
}

Tensor::Tensor(TensorType type, const std::vector<double>& values) : Tensor(std::move(type)) {
  for (int64_t i = 0; i < numel() && i < static_cast<int64_t>(values.size()); ++i)
    setF(i, values[i]);
}

static int64_t truncToInt(double v, int64_t lo, int64_t hi) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(lo)) return lo;
  if (v >= static_cast<double>(hi)) return hi;
  return static_cast<int64_t>(v);
}

double Tensor::getF(int64_t i) const {
  switch (type_.dtype) {
    case DType::f32: return as<float>()[i];
    case DType::f64: return as<double>()[i];
    case DType::bf16: return bf16ToFloat(as<uint16_t>()[i]);
    case DType::f16: return f16ToFloat(as<uint16_t>()[i]);
    case DType::i32: return as<int32_t>()[i];
    case DType::i64: return static_cast<double>(as<int64_t>()[i]);
    case DType::boolean: return as<uint8_t>()[i] ? 1.0 : 0.0;
  }
  return 0;
}

void Tensor::setF(int64_t i, double v) {
  switch (type_.dtype) {
    case DType::f32: as<float>()[i] = static_cast<float>(v); break;
    case DType::f64: as<double>()[i] = v; break;
    case DType::bf16: as<uint16_t>()[i] = floatToBF16(static_cast<float>(v)); break;
    case DType::f16: as<uint16_t>()[i] = floatToF16(static_cast<float>(v)); break;
    case DType::i32:
      as<int32_t>()[i] = static_cast<int32_t>(truncToInt(v, std::numeric_limits<int32_t>::min(),
                                                         std::numeric_limits<int32_t>::max()));
      break;
    case DType::i64:
      as<int64_t>()[i] = truncToInt(v, std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<int64_t>::max());
      break;
    case DType::boolean: as<uint8_t>()[i] = v != 0.0; break;
  }
}

int64_t Tensor::getI(int64_t i) const {
  switch (type_.dtype) {
    case DType::i32: return as<int32_t>()[i];
    case DType::i64: return as<int64_t>()[i];
    case DType::boolean: return as<uint8_t>()[i];
    default:
      return truncToInt(getF(i), std::numeric_limits<int64_t>::min(),
                        std::numeric_limits<int64_t>::max());
  }
}

void Tensor::setI(int64_t i, int64_t v) {
  switch (type_.dtype) {
    case DType::i32: as<int32_t>()[i] = static_cast<int32_t>(v); break;
    case DType::i64: as<int64_t>()[i] = v; break;
    case DType::boolean: as<uint8_t>()[i] = v != 0; break;
    default: setF(i, static_cast<double>(v));
  }
}

std::vector<double> Tensor::toDoubles() const {
  std::vector<double> r(numel());
  for (int64_t i = 0; i < numel(); ++i) r[i] = getF(i);
  return r;
}

bool Tensor::bitwiseEqual(const Tensor& o) const {
  return type_ == o.type_ && std::memcmp(data(), o.data(), nbytes()) == 0;
}

std::vector<int64_t> stridesOf(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

}  // namespace tgc
