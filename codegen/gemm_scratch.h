// The GEMMs' packing buffers: one per use and thread (thread_local), kept between calls so
// that packing reuses warm memory instead of faulting in fresh pages on every product.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "ir/env_flag.h"
#include "ir/huge_pages.h"

namespace tgc::codegen {

// A 64-byte aligned buffer that grows on demand (its contents are not kept when it grows).
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(p_); }

  template <class T>
  T* get(int64_t elements) {
    size_t bytes = static_cast<size_t>(elements) * sizeof(T);
    if (bytes > size_) {
      std::free(p_);
      // Buffers of a megabyte and more (packed B panels, up to 8 MiB) on 2 MiB pages, their
      // size rounded up to whole pages: in 4 KiB pages an 8 MiB panel alone needs 2048
      // translations, all of Zen 3's L2 TLB (1024x8000x256 on one thread: 76-82 -> 80-88
      // GFLOP/s).
      static const bool noHuge = envFlag("TGC_NO_GEMM_HUGE_PAGES");  // A/B runs
      const bool huge = bytes >= (size_t{1} << 20) && !noHuge;
      const size_t align = huge ? kHugePageBytes : 4096;
      size_ = (bytes + align - 1) / align * align;
      p_ = allocateLarge(size_, huge && hugePagesEnabled());
      if (!p_) {
        size_ = 0;
        throw std::bad_alloc();
      }
    }
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tgc::codegen
