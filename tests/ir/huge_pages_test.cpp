// ir/huge_pages.h: large buffers (tensors, the executable's arena) 2 MiB aligned and marked
// for 2 MiB pages, small ones 64-byte aligned; a tensor keeps its values either way.
#include "ir/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "ir/tensor.h"

namespace tgc {
namespace {

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(HugePages, LargeBuffersAre2MiBAlignedSmallOnes64) {
  if (!hugePagesEnabled()) GTEST_SKIP() << "TGC_NO_HUGE_PAGES is set";
  for (size_t bytes : {kHugePageBytes, 3 * kHugePageBytes + 4096, 40 * kHugePageBytes}) {
    void* p = allocateLarge(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(addr(p) % kHugePageBytes, 0u) << bytes;
    std::memset(p, 0x5A, bytes);  // all of it is ours
    EXPECT_EQ(static_cast<unsigned char*>(p)[bytes - 1], 0x5A);
    std::free(p);
  }
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, kHugePageBytes - 1}) {
    void* p = allocateLarge(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(addr(p) % 64, 0u) << bytes;
    std::free(p);
  }
}

TEST(HugePages, TensorsUseThem) {
  Tensor big(TensorType{DType::f32, {1024, 1024}});  // 4 MiB
  Tensor small(TensorType{DType::f32, {7, 3}});
  if (hugePagesEnabled()) {
    EXPECT_EQ(addr(big.data()) % kHugePageBytes, 0u);
  }
  EXPECT_EQ(addr(small.data()) % 64, 0u);
  for (int64_t i = 0; i < big.numel(); i += 4099) big.setF(i, 0.5 * static_cast<double>(i));
  Tensor copy = big;
  for (int64_t i = 0; i < big.numel(); i += 4099) EXPECT_EQ(copy.getF(i), 0.5 * static_cast<double>(i));
  EXPECT_EQ(small.getF(20), 0.0);  // zero-filled as before
}

}  // namespace
}  // namespace tgc
