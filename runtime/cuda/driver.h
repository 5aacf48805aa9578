// The CUDA driver API, opened at run time.
//
// tgc links no CUDA library: libcuda.so.1 is opened with dlopen the first time a device is
// asked for, so one `tgc` binary runs on machines with and without an NVIDIA driver. Only
// the entry points the runtime needs are looked up (device query, the primary context,
// plain device allocations, async copies, streams, modules, launches, events).
//
// The few driver types are declared here (CUresult is an int, handles are opaque
// pointers, device pointers 64-bit integers) instead of taken from the toolkit's cuda.h, so
// this file builds without the toolkit; tests/runtime/cuda_driver_test.cpp checks the
// types and constants against cuda.h when the toolkit is there.
//
// $TGC_LIBCUDA, when set, names the library to open instead of libcuda.so.1.
//
// Every failing call throws CudaError with the driver's name for the code (cuGetErrorName)
// and what was being done. Without the library, with a driver that fails to initialize or
// with no device, Device::open throws NoDeviceError, whose message starts "no CUDA device: ".
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace tgc::runtime::cuda {

// The driver API's own types, ABI-compatible with cuda.h.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;

// The constants of cuda.h the wrapper uses (checked against cuda.h by cuda_driver_test
// when the toolkit is there).
namespace abi {
inline constexpr CUresult kSuccess = 0;
inline constexpr CUresult kErrorNoDevice = 100;
inline constexpr CUresult kErrorStubLibrary = 34;
inline constexpr CUresult kErrorSystemDriverMismatch = 803;
inline constexpr int kAttrMaxSharedPerBlock = 8;
inline constexpr int kAttrMultiprocessors = 16;
inline constexpr int kAttrCcMajor = 75;
inline constexpr int kAttrCcMinor = 76;
inline constexpr int kAttrMaxSharedPerBlockOptin = 97;
inline constexpr unsigned kStreamNonBlocking = 0x1;
inline constexpr unsigned kEventDefault = 0x0;
inline constexpr int kFuncAttrMaxDynamicShared = 8;
}  // namespace abi

class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& what, CUresult code)
      : std::runtime_error(what), code_(code) {}
  CUresult code() const { return code_; }

 private:
  CUresult code_;
};

// No usable device: the library is missing, cuInit failed, or there are no devices.
class NoDeviceError : public CudaError {
 public:
  NoDeviceError(const std::string& why, CUresult code)
      : CudaError("no CUDA device: " + why, code) {}
};

// Empty when a CUDA device can be opened; otherwise why not (the NoDeviceError message).
// Never throws: tests use it to skip with the reason.
std::string noDeviceReason();

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int ccMajor = 0, ccMinor = 0;      // compute capability
  int multiprocessors = 0;
  int64_t totalBytes = 0;
  int maxSharedPerBlock = 0;         // bytes without opting in
  int maxSharedPerBlockOptin = 0;    // bytes with cuFuncSetAttribute
  int driverVersion = 0;             // 13000 for 13.0
  // "sm_90" for compute capability 9.0: NVRTC's --gpu-architecture for CUBIN.
  std::string arch() const { return "sm_" + std::to_string(ccMajor * 10 + ccMinor); }
};

class Stream;

// A device with its primary context (shared with the runtime API, so cuBLAS in the same
// process sees the same memory). Each method makes the context current on the calling
// thread first.
class Device {
 public:
  // Throws NoDeviceError (see above) or CudaError.
  static std::shared_ptr<Device> open(int ordinal = 0);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }
  void makeCurrent() const;

  // Plain device memory (cuMemAlloc, 256-byte aligned); `what` names it in errors.
  CUdeviceptr alloc(int64_t bytes, const std::string& what) const;
  void free(CUdeviceptr p) const noexcept;

  void synchronize() const;  // cuCtxSynchronize

 private:
  Device(int ordinal, CUdevice dev, CUcontext ctx, DeviceInfo info);
  int ordinal_;
  CUdevice dev_;
  CUcontext ctx_;
  DeviceInfo info_;
};

// Owned device memory.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::shared_ptr<Device> device, int64_t bytes, const std::string& what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  int64_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<Device> device_;
  CUdeviceptr ptr_ = 0;
  int64_t bytes_ = 0;
};

// A non-blocking stream; work on it runs in order.
class Stream {
 public:
  explicit Stream(std::shared_ptr<Device> device);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  CUstream handle() const { return stream_; }
  const std::shared_ptr<Device>& device() const { return device_; }

  // Async copies: host memory must stay valid (and unchanged, for uploads) until
  // synchronize(). With pageable host memory the driver stages the copy.
  void upload(CUdeviceptr dst, const void* src, int64_t bytes);
  void download(void* dst, CUdeviceptr src, int64_t bytes);
  void copy(CUdeviceptr dst, CUdeviceptr src, int64_t bytes);
  void fill(CUdeviceptr dst, unsigned char byte, int64_t bytes);  // cuMemsetD8Async
  void synchronize();

 private:
  std::shared_ptr<Device> device_;
  CUstream stream_ = nullptr;
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// A loaded CUBIN or PTX image and its kernels.
class Module {
 public:
  // `image`: a CUBIN (ELF) or NUL-terminated PTX text; `what` names it in errors.
  Module(std::shared_ptr<Device> device, const std::string& image, const std::string& what);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Throws CudaError when the module has no kernel of that (extern "C") name.
  CUfunction function(const std::string& name) const;
  // Lets `f` use up to `bytes` of dynamic shared memory (above 48 KiB needs opting in).
  void setMaxDynamicShared(CUfunction f, int bytes) const;

 private:
  std::shared_ptr<Device> device_;
  CUmodule module_ = nullptr;
  std::string what_;
};

// cuLaunchKernel: `args` holds one pointer per kernel parameter, to its value.
void launch(CUfunction f, Dim3 grid, Dim3 block, unsigned sharedBytes, Stream& stream,
            void** args, const std::string& what);

// A timing event.
class Event {
 public:
  explicit Event(std::shared_ptr<Device> device);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(Stream& stream);
  void synchronize();
  // Milliseconds between two recorded events (both complete).
  static float elapsedMs(const Event& start, const Event& end);

 private:
  std::shared_ptr<Device> device_;
  CUevent event_ = nullptr;
};

}  // namespace tgc::runtime::cuda
