// The driver API wrapper (runtime/cuda/driver.h): without a device, one clear error; with
// one, device query, allocations, copies, fills, events and module errors.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "runtime/cuda/driver.h"
#include "tests/runtime/cuda_test_util.h"

#if TGC_HAVE_CUDA_H
#include <cuda.h>
#endif

using namespace tgc::runtime::cuda;

namespace {

TEST(CudaDriver, OpenFailsWithTheNoDeviceReasonOrSucceeds) {
  const std::string why = noDeviceReason();
  if (why.empty()) {
    auto d = Device::open();
    EXPECT_FALSE(d->info().name.empty());
    return;
  }
  EXPECT_TRUE(why.starts_with("no CUDA device: ")) << why;
  try {
    Device::open();
    FAIL() << "Device::open succeeded although " << why;
  } catch (const NoDeviceError& e) {
    EXPECT_EQ(std::string(e.what()), why);
  }
}

TEST(CudaDriver, AnOrdinalPastTheLastDeviceIsNoDevice) {
  TGC_REQUIRE_CUDA_DEVICE();
  try {
    Device::open(1 << 20);
    FAIL() << "opened device 2^20";
  } catch (const NoDeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("device 1048576 asked for"), std::string::npos)
        << e.what();
  }
}

#if TGC_HAVE_CUDA_H
// The declarations in driver.h against the toolkit's cuda.h.
namespace rc = tgc::runtime::cuda;
static_assert(sizeof(rc::CUdeviceptr) == sizeof(::CUdeviceptr));
static_assert(sizeof(rc::CUresult) == sizeof(::CUresult));
static_assert(sizeof(rc::CUdevice) == sizeof(::CUdevice));
static_assert(rc::abi::kSuccess == CUDA_SUCCESS);
static_assert(rc::abi::kErrorNoDevice == CUDA_ERROR_NO_DEVICE);
static_assert(rc::abi::kErrorStubLibrary == CUDA_ERROR_STUB_LIBRARY);
static_assert(rc::abi::kErrorSystemDriverMismatch == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH);
static_assert(rc::abi::kAttrMaxSharedPerBlock == CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
static_assert(rc::abi::kAttrMultiprocessors == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
static_assert(rc::abi::kAttrCcMajor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
static_assert(rc::abi::kAttrCcMinor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
static_assert(rc::abi::kAttrMaxSharedPerBlockOptin ==
              CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
static_assert(rc::abi::kStreamNonBlocking == CU_STREAM_NON_BLOCKING);
static_assert(rc::abi::kEventDefault == CU_EVENT_DEFAULT);
static_assert(rc::abi::kFuncAttrMaxDynamicShared == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
#endif

TEST(CudaDriver, DeviceInfoIsPlausible) {
  TGC_REQUIRE_CUDA_DEVICE();
  auto d = Device::open();
  const DeviceInfo& i = d->info();
  EXPECT_GE(i.ccMajor, 5);
  EXPECT_GT(i.multiprocessors, 0);
  EXPECT_GT(i.totalBytes, int64_t{1} << 30);
  EXPECT_GE(i.maxSharedPerBlock, 48 * 1024);
  EXPECT_GE(i.maxSharedPerBlockOptin, i.maxSharedPerBlock);
  EXPECT_GE(i.driverVersion, 11000);
  EXPECT_EQ(i.arch(), "sm_" + std::to_string(i.ccMajor * 10 + i.ccMinor));
}

TEST(CudaDriver, CopiesFillsAndEventsRoundTrip) {
  TGC_REQUIRE_CUDA_DEVICE();
  auto d = Device::open();
  Stream s(d);
  constexpr int64_t n = 1 << 20;
  std::vector<unsigned char> host(n), back(n, 0);
  for (int64_t i = 0; i < n; ++i) host[i] = static_cast<unsigned char>(i * 7 + 3);
  DeviceBuffer a(d, n, "a"), b(d, n, "b");
  Event start(d), end(d);
  start.record(s);
  s.upload(a.ptr(), host.data(), n);
  s.copy(b.ptr(), a.ptr(), n);
  s.fill(a.ptr() + 100, 0xEE, 50);
  s.download(back.data(), b.ptr(), n);
  end.record(s);
  s.synchronize();
  EXPECT_EQ(back, host);
  EXPECT_GE(Event::elapsedMs(start, end), 0.0f);
  s.download(back.data(), a.ptr(), n);
  s.synchronize();
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(back[i], i >= 100 && i < 150 ? 0xEE : host[i]) << "byte " << i;
}

TEST(CudaDriver, ErrorsNameTheCallTheCodeAndTheAction) {
  TGC_REQUIRE_CUDA_DEVICE();
  auto d = Device::open();
  try {
    Module m(d, "this is not a module", "a test image");
    FAIL() << "loaded garbage";
  } catch (const CudaError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cuModuleLoadData (loading a test image): CUDA_ERROR_"), std::string::npos)
        << msg;
    EXPECT_NE(e.code(), 0);
  }
  try {
    (void)d->alloc(int64_t{1} << 50, "a petabyte");
    FAIL() << "allocated 2^50 bytes";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("cuMemAlloc (allocating 1125899906842624 bytes for a "
                                         "petabyte on device 0): CUDA_ERROR_OUT_OF_MEMORY"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
