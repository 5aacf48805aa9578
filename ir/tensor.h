// A dense row-major host tensor: the values that flow in and out of graphs.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "ir/dtype.h"
#include "ir/huge_pages.h"

namespace tgc {

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(TensorType type);  // zero-filled
  // Contents unspecified: for a buffer that is written whole before it is read (the
  // executable's outputs, which a kernel writes). Skips the zero fill, a full pass over
  // memory that a 32 MB logits output paid on every training step.
  static Tensor uninitialized(TensorType type);
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

  // Takes `type` over the same storage when it holds that many bytes: the bytes it held stay
  // (reinterpreted), any beyond them are zero. False, changing nothing, when it is too
  // small. A buffer pool reuses a tensor for another shape this way without allocating.
  bool retype(const TensorType& type);
  size_t capacityBytes() const { return storage_.capacity() * sizeof(Block); }

  std::vector<double> toDoubles() const;
  // Same dtype, shape and bytes.
  bool bitwiseEqual(const Tensor& o) const;

 private:
  struct alignas(64) Block { unsigned char b[64]; };
  // Default-initializes on resize (leaves the bytes as they are) instead of value-
  // initializing (zeroing) them: the constructors decide whether to fill. Large storage
  // goes on 2 MiB pages (ir/huge_pages.h).
  template <class T>
  struct NoFillAllocator : std::allocator<T> {
    template <class U>
    struct rebind { using other = NoFillAllocator<U>; };
    T* allocate(size_t n) {
      if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
      void* p = allocateLarge(n * sizeof(T));
      if (!p) throw std::bad_alloc();
      return static_cast<T*>(p);
    }
    void deallocate(T* p, size_t) noexcept { std::free(p); }
    template <class U>
    void construct(U* p) { ::new (static_cast<void*>(p)) U; }
    template <class U, class... Args>
    void construct(U* p, Args&&... args) { ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...); }
  };
  struct Uninitialized {};
  Tensor(TensorType type, Uninitialized);

  TensorType type_;
  std::vector<Block, NoFillAllocator<Block>> storage_;
};

// Row-major strides of a shape, in elements.
std::vector<int64_t> stridesOf(const Shape& s);

}  // namespace tgc
