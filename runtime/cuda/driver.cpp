#include "runtime/cuda/driver.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <initializer_list>
#include <utility>

namespace tgc::runtime::cuda {

namespace {

using namespace abi;

// The entry points, by their versioned symbol names (cuda.h maps cuMemAlloc to
// cuMemAlloc_v2 and so on; the unversioned symbols are the old ABI).
struct Api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void**, void**);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
};

// The library, loaded and initialized once per process; `failure` says why not.
struct Loaded {
  Api api{};
  bool ok = false;
  CUresult code = kErrorNoDevice;
  std::string failure;
};

template <class F>
bool lookup(void* lib, F& fn, std::initializer_list<const char*> names, std::string& missing) {
  for (const char* name : names)
    if (void* p = dlsym(lib, name)) {
      fn = reinterpret_cast<F>(p);
      return true;
    }
  missing = *names.begin();
  return false;
}

// cuInit's failures that mean "no usable driver", named even when cuGetErrorName cannot
// answer (the toolkit's stub library answers every call with CUDA_ERROR_STUB_LIBRARY).
std::string initErrorName(CUresult r) {
  switch (r) {
    case kErrorStubLibrary: return "CUDA_ERROR_STUB_LIBRARY (the toolkit's stub, not a driver)";
    case kErrorNoDevice: return "CUDA_ERROR_NO_DEVICE";
    case kErrorSystemDriverMismatch: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    default: return fmt::format("CUresult {}", r);
  }
}

Loaded load() {
  Loaded l;
  // $TGC_LIBCUDA names another driver library (an unusual install; tests use the
  // toolkit's stub). RTLD_LOCAL: the symbols stay ours; libcuda is never unloaded (the
  // driver keeps threads).
  const char* env = std::getenv("TGC_LIBCUDA");
  const std::string path = env && *env ? env : "libcuda.so.1";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    l.failure = fmt::format("cannot load the CUDA driver library {} ({})", path,
                            err ? err : "not found");
    return l;
  }
  Api& a = l.api;
  std::string missing;
  const bool all =
      lookup(lib, a.cuInit, {"cuInit"}, missing) &&
      lookup(lib, a.cuDriverGetVersion, {"cuDriverGetVersion"}, missing) &&
      lookup(lib, a.cuGetErrorName, {"cuGetErrorName"}, missing) &&
      lookup(lib, a.cuGetErrorString, {"cuGetErrorString"}, missing) &&
      lookup(lib, a.cuDeviceGetCount, {"cuDeviceGetCount"}, missing) &&
      lookup(lib, a.cuDeviceGet, {"cuDeviceGet"}, missing) &&
      lookup(lib, a.cuDeviceGetName, {"cuDeviceGetName"}, missing) &&
      lookup(lib, a.cuDeviceGetAttribute, {"cuDeviceGetAttribute"}, missing) &&
      lookup(lib, a.cuDeviceTotalMem, {"cuDeviceTotalMem_v2"}, missing) &&
      lookup(lib, a.cuDevicePrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"}, missing) &&
      lookup(lib, a.cuDevicePrimaryCtxRelease, {"cuDevicePrimaryCtxRelease_v2"}, missing) &&
      lookup(lib, a.cuCtxSetCurrent, {"cuCtxSetCurrent"}, missing) &&
      lookup(lib, a.cuCtxSynchronize, {"cuCtxSynchronize"}, missing) &&
      lookup(lib, a.cuMemAlloc, {"cuMemAlloc_v2"}, missing) &&
      lookup(lib, a.cuMemFree, {"cuMemFree_v2"}, missing) &&
      lookup(lib, a.cuMemcpyHtoDAsync, {"cuMemcpyHtoDAsync_v2"}, missing) &&
      lookup(lib, a.cuMemcpyDtoHAsync, {"cuMemcpyDtoHAsync_v2"}, missing) &&
      lookup(lib, a.cuMemcpyDtoDAsync, {"cuMemcpyDtoDAsync_v2"}, missing) &&
      lookup(lib, a.cuMemsetD8Async, {"cuMemsetD8Async"}, missing) &&
      lookup(lib, a.cuStreamCreate, {"cuStreamCreate"}, missing) &&
      lookup(lib, a.cuStreamDestroy, {"cuStreamDestroy_v2"}, missing) &&
      lookup(lib, a.cuStreamSynchronize, {"cuStreamSynchronize"}, missing) &&
      lookup(lib, a.cuModuleLoadData, {"cuModuleLoadData"}, missing) &&
      lookup(lib, a.cuModuleUnload, {"cuModuleUnload"}, missing) &&
      lookup(lib, a.cuModuleGetFunction, {"cuModuleGetFunction"}, missing) &&
      lookup(lib, a.cuFuncSetAttribute, {"cuFuncSetAttribute"}, missing) &&
      lookup(lib, a.cuLaunchKernel, {"cuLaunchKernel"}, missing) &&
      lookup(lib, a.cuEventCreate, {"cuEventCreate"}, missing) &&
      lookup(lib, a.cuEventDestroy, {"cuEventDestroy_v2"}, missing) &&
      lookup(lib, a.cuEventRecord, {"cuEventRecord"}, missing) &&
      lookup(lib, a.cuEventSynchronize, {"cuEventSynchronize"}, missing) &&
      // _v2 (CUDA 12.8+) and the original agree for two completed events.
      lookup(lib, a.cuEventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"},
             missing);
  if (!all) {
    l.failure = fmt::format("{} has no {} (driver too old)", path, missing);
    return l;
  }
  if (CUresult r = a.cuInit(0); r != kSuccess) {
    const char* name = nullptr;
    if (a.cuGetErrorName(r, &name) != kSuccess) name = nullptr;  // a stub answers nothing
    l.code = r;
    l.failure = fmt::format("cuInit failed with {}", name ? name : initErrorName(r));
    return l;
  }
  int count = 0;
  if (a.cuDeviceGetCount(&count) != kSuccess || count == 0) {
    l.failure = "the driver reports no devices";
    return l;
  }
  l.ok = true;
  l.code = kSuccess;
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

const Api& api() { return loaded().api; }  // only after Device::open succeeded

std::string errorText(CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api().cuGetErrorName(r, &name) != kSuccess) name = nullptr;
  if (api().cuGetErrorString(r, &text) != kSuccess) text = nullptr;
  return fmt::format("{} ({})", name ? name : fmt::format("CUresult {}", r),
                     text ? text : "no description");
}

void check(CUresult r, const char* call, const std::string& what) {
  if (r == kSuccess) return;
  throw CudaError(fmt::format("{} ({}): {}", call, what, errorText(r)), r);
}

}  // namespace

std::string noDeviceReason() {
  const Loaded& l = loaded();
  return l.ok ? std::string() : "no CUDA device: " + l.failure;
}

// ---- Device ----------------------------------------------------------------------------------

std::shared_ptr<Device> Device::open(int ordinal) {
  const Loaded& l = loaded();
  if (!l.ok) throw NoDeviceError(l.failure, l.code);
  const Api& a = l.api;
  int count = 0;
  check(a.cuDeviceGetCount(&count), "cuDeviceGetCount", "counting devices");
  if (ordinal < 0 || ordinal >= count)
    throw NoDeviceError(fmt::format("device {} asked for, the driver has {}", ordinal, count),
                        kErrorNoDevice);
  CUdevice dev = 0;
  const std::string what = fmt::format("device {}", ordinal);
  check(a.cuDeviceGet(&dev, ordinal), "cuDeviceGet", what);
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  check(a.cuDeviceGetName(name, sizeof name, dev), "cuDeviceGetName", what);
  info.name = name;
  auto attr = [&](int which) {
    int v = 0;
    check(a.cuDeviceGetAttribute(&v, which, dev), "cuDeviceGetAttribute", what);
    return v;
  };
  info.ccMajor = attr(kAttrCcMajor);
  info.ccMinor = attr(kAttrCcMinor);
  info.multiprocessors = attr(kAttrMultiprocessors);
  info.maxSharedPerBlock = attr(kAttrMaxSharedPerBlock);
  info.maxSharedPerBlockOptin = attr(kAttrMaxSharedPerBlockOptin);
  size_t total = 0;
  check(a.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem", what);
  info.totalBytes = static_cast<int64_t>(total);
  check(a.cuDriverGetVersion(&info.driverVersion), "cuDriverGetVersion", what);
  CUcontext ctx = nullptr;
  check(a.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain", what);
  std::shared_ptr<Device> d(new Device(ordinal, dev, ctx, std::move(info)));
  d->makeCurrent();
  return d;
}

Device::Device(int ordinal, CUdevice dev, CUcontext ctx, DeviceInfo info)
    : ordinal_(ordinal), dev_(dev), ctx_(ctx), info_(std::move(info)) {}

Device::~Device() { api().cuDevicePrimaryCtxRelease(dev_); }

void Device::makeCurrent() const {
  check(api().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent",
        fmt::format("making device {}'s primary context current", ordinal_));
}

CUdeviceptr Device::alloc(int64_t bytes, const std::string& what) const {
  makeCurrent();
  CUdeviceptr p = 0;
  if (bytes == 0) return 0;
  check(api().cuMemAlloc(&p, static_cast<size_t>(bytes)), "cuMemAlloc",
        fmt::format("allocating {} bytes for {} on device {}", bytes, what, ordinal_));
  return p;
}

void Device::free(CUdeviceptr p) const noexcept {
  if (!p) return;
  api().cuCtxSetCurrent(ctx_);
  api().cuMemFree(p);  // a failure here can only be reported by an earlier call's error
}

void Device::synchronize() const {
  makeCurrent();
  check(api().cuCtxSynchronize(), "cuCtxSynchronize",
        fmt::format("waiting for device {}", ordinal_));
}

// ---- DeviceBuffer ----------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(std::shared_ptr<Device> device, int64_t bytes, const std::string& what)
    : device_(std::move(device)), ptr_(device_->alloc(bytes, what)), bytes_(bytes) {}

DeviceBuffer::~DeviceBuffer() {
  if (device_) device_->free(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : device_(std::move(o.device_)), ptr_(std::exchange(o.ptr_, 0)),
      bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (device_) device_->free(ptr_);
    device_ = std::move(o.device_);
    ptr_ = std::exchange(o.ptr_, 0);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

// ---- Stream ----------------------------------------------------------------------------------

Stream::Stream(std::shared_ptr<Device> device) : device_(std::move(device)) {
  device_->makeCurrent();
  check(api().cuStreamCreate(&stream_, kStreamNonBlocking), "cuStreamCreate",
        "creating a stream");
}

Stream::~Stream() {
  if (!stream_) return;
  device_->makeCurrent();
  api().cuStreamDestroy(stream_);
}

void Stream::upload(CUdeviceptr dst, const void* src, int64_t bytes) {
  if (bytes == 0) return;
  device_->makeCurrent();
  check(api().cuMemcpyHtoDAsync(dst, src, static_cast<size_t>(bytes), stream_),
        "cuMemcpyHtoDAsync", fmt::format("copying {} bytes to the device", bytes));
}

void Stream::download(void* dst, CUdeviceptr src, int64_t bytes) {
  if (bytes == 0) return;
  device_->makeCurrent();
  check(api().cuMemcpyDtoHAsync(dst, src, static_cast<size_t>(bytes), stream_),
        "cuMemcpyDtoHAsync", fmt::format("copying {} bytes from the device", bytes));
}

void Stream::copy(CUdeviceptr dst, CUdeviceptr src, int64_t bytes) {
  if (bytes == 0 || dst == src) return;
  device_->makeCurrent();
  check(api().cuMemcpyDtoDAsync(dst, src, static_cast<size_t>(bytes), stream_),
        "cuMemcpyDtoDAsync", fmt::format("copying {} bytes on the device", bytes));
}

void Stream::fill(CUdeviceptr dst, unsigned char byte, int64_t bytes) {
  if (bytes == 0) return;
  device_->makeCurrent();
  check(api().cuMemsetD8Async(dst, byte, static_cast<size_t>(bytes), stream_),
        "cuMemsetD8Async", fmt::format("filling {} bytes on the device", bytes));
}

void Stream::synchronize() {
  device_->makeCurrent();
  check(api().cuStreamSynchronize(stream_), "cuStreamSynchronize",
        "waiting for the stream (an error here may come from any earlier launch)");
}

// ---- Module and launches ---------------------------------------------------------------------

Module::Module(std::shared_ptr<Device> device, const std::string& image, const std::string& what)
    : device_(std::move(device)), what_(what) {
  device_->makeCurrent();
  check(api().cuModuleLoadData(&module_, image.c_str()), "cuModuleLoadData",
        fmt::format("loading {}", what));
}

Module::~Module() {
  if (!module_) return;
  device_->makeCurrent();
  api().cuModuleUnload(module_);
}

CUfunction Module::function(const std::string& name) const {
  device_->makeCurrent();
  CUfunction f = nullptr;
  check(api().cuModuleGetFunction(&f, module_, name.c_str()), "cuModuleGetFunction",
        fmt::format("kernel {} in {}", name, what_));
  return f;
}

void Module::setMaxDynamicShared(CUfunction f, int bytes) const {
  device_->makeCurrent();
  check(api().cuFuncSetAttribute(f, kFuncAttrMaxDynamicShared, bytes), "cuFuncSetAttribute",
        fmt::format("allowing {} bytes of dynamic shared memory in {}", bytes, what_));
}

void launch(CUfunction f, Dim3 grid, Dim3 block, unsigned sharedBytes, Stream& stream,
            void** args, const std::string& what) {
  stream.device()->makeCurrent();
  check(api().cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, sharedBytes,
                             stream.handle(), args, nullptr),
        "cuLaunchKernel",
        fmt::format("launching {} on grid ({},{},{}) x block ({},{},{}), {} bytes shared", what,
                    grid.x, grid.y, grid.z, block.x, block.y, block.z, sharedBytes));
}

// ---- Event -----------------------------------------------------------------------------------

Event::Event(std::shared_ptr<Device> device) : device_(std::move(device)) {
  device_->makeCurrent();
  check(api().cuEventCreate(&event_, kEventDefault), "cuEventCreate", "creating an event");
}

Event::~Event() {
  if (!event_) return;
  device_->makeCurrent();
  api().cuEventDestroy(event_);
}

void Event::record(Stream& stream) {
  device_->makeCurrent();
  check(api().cuEventRecord(event_, stream.handle()), "cuEventRecord", "recording an event");
}

void Event::synchronize() {
  device_->makeCurrent();
  check(api().cuEventSynchronize(event_), "cuEventSynchronize", "waiting for an event");
}

float Event::elapsedMs(const Event& start, const Event& end) {
  start.device_->makeCurrent();
  float ms = 0;
  check(api().cuEventElapsedTime(&ms, start.event_, end.event_), "cuEventElapsedTime",
        "timing between two events");
  return ms;
}

}  // namespace tgc::runtime::cuda
