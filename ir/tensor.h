// A dense row-major host tensor: the values that flow in and out of graphs.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace tgc {

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(TensorType type);  // zero-filled
  Tensor(TensorType type, const std::vector<double>& values);  // numel values, rounded to dtype

  const TensorType& type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }
  int64_t numel() const { return type_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtypeSize(type_.dtype); }

  // Element i (row-major) as a double, and stored from a double rounded to the dtype
  // (ints truncate toward zero; bool is v != 0).
  double getF(int64_t i) const;
  void setF(int64_t i, double v);
  // Exact integer access (i64 values beyond 2^53 survive).
  int64_t getI(int64_t i) const;
  void setI(int64_t i, int64_t v);

  // Raw storage, 64-byte aligned.
  void* data() { return storage_.data(); }
  const void* data() const { return storage_.data(); }
  template <class T> T* as() { return reinterpret_cast<T*>(storage_.data()); }
  template <class T> const T* as() const { return reinterpret_cast<const T*>(storage_.data()); }

  std::vector<double> toDoubles() const;
  // Same dtype, shape and bytes.
  bool bitwiseEqual(const Tensor& o) const;

 private:
  struct alignas(64) Block { unsigned char b[64]; };
  TensorType type_;
  std::vector<Block> storage_;
};

// Row-major strides of a shape, in elements.
std::vector<int64_t> stridesOf(const Shape& s);

}  // namespace tgc
