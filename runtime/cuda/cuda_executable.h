// A graph compiled for an NVIDIA GPU: the CUDA counterpart of runtime::Executable.
//
// compile() walks the graph as the CPU executable does (codegen::classify per node, the
// same fusion groups, the same Kernel IR from codegen::lowerGroup), and
//  - prints each distinct kernel as CUDA C++ (codegen/cuda/cuda_emitter.h) and compiles it
//    to CUBIN for the device through NVRTC (codegen/cuda/nvrtc.h, cached on disk);
//  - runs matmul with the CUDA GEMM (runtime/cuda/cuda_gemm.h: f32/f64 on CUDA cores,
//    bf16/f16 on tensor cores) and the fused library ops with hand-written kernels
//    (runtime/cuda/cuda_library.h);
//  - places every intermediate, input and output in one device arena laid out by the CPU's
//    memory planner (runtime/memory_plan.h) over the launch order; reshapes are views;
//    constants are uploaded once, into their own allocation.
// A run checks the integer inputs used as indices on the host (runtime/index_bounds.h: an
// index outside its table, a target outside the logits is an IRError naming the input),
// uploads the inputs, enqueues every launch in order on one stream, downloads the outputs
// and waits once at the end.
//
// Training state stays on the device: with CudaExecOptions::updateInPlace, each input X
// paired with an output new.X of the same type (a parameter or an optimizer moment) lives
// in a persistent device buffer. loadState() uploads it from a ParamStore, runStep() runs
// one step (new.X computed in the arena and copied over X on the device after the last
// launch) and saveState() downloads it again, so a training loop moves only batches and
// metrics across PCIe.
//
// A training run with several length buckets compiles one executable per bucket over the
// same parameters: with CudaExecOptions::sharedState the state lives in a DeviceTensors
// (named device tensors that outlive executables) instead, bound with bindTensors(); any
// other input found there (the parameters an averaging graph reads) is read in place too.
//
// Fused attention runs the FlashAttention kernels of runtime/cuda/attention_kernels.cu
// (through cuda_library), which so far are proved only by ptxas and a CPU emulation.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "runtime/cuda/driver.h"
#include "runtime/executable.h"

namespace tgc::runtime {
class ParamStore;
}

namespace tgc::runtime::cuda {

struct CudaExecOptions {
  int device = 0;               // ordinal
  bool fuse = true;             // generic fusion; TGC_NO_FUSION=1: one kernel per node
  bool updateInPlace = false;   // the stateful mode (loadState / runStep / saveState)
  bool poisonArena = false;     // TGC_POISON=1: the arena starts as NaN bytes every run
  bool useCache = true;         // NVRTC's disk cache; TGC_NO_CACHE=1: off
  bool profile = false;         // TGC_PROFILE=1: time every launch with events (profile())
  // With updateInPlace: no state allocation of its own; the state is bound with
  // bindTensors() before runStep (loadState/saveState refuse).
  bool sharedState = false;

  static CudaExecOptions fromEnv();
};

struct CudaExecStats {
  int kernels = 0;           // generated kernel launches
  int distinctKernels = 0;   // compiled kernels (identical launches share one)
  int nvrtcCacheHits = 0;    // distinct kernels whose CUBIN came from the disk cache
  int gemms = 0;
  int libraryLaunches = 0;   // fused ops run by hand-written kernels (cuda_library.h)
  int views = 0;
  int stateCopies = 0;       // new.X copied over X on the device per step
  int64_t arenaBytes = 0;
  int64_t bufferBytes = 0;   // the arena without reuse
  int64_t constantBytes = 0;
  int64_t stateBytes = 0;
  double compileSeconds = 0;
};

// Named tensors resident on one device across runs and executables (a training run's
// parameters, optimizer moments and averages, shared by the steps of every bucket). Copies
// run on the collection's own stream and are asynchronous: synchronize() before the host
// memory of an upload changes or a download is read, and before an executable uses them.
class DeviceTensors {
 public:
  explicit DeviceTensors(std::shared_ptr<Device> device);
  ~DeviceTensors();
  DeviceTensors(const DeviceTensors&) = delete;
  DeviceTensors& operator=(const DeviceTensors&) = delete;

  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  std::vector<std::string> names() const;
  // Throws std::out_of_range naming the tensor when it is not there.
  const TensorType& type(const std::string& name) const;
  CUdeviceptr ptr(const std::string& name) const;
  int64_t bytes() const;  // all tensors

  // Uploads `t` as `name`, allocated on first use; a later upload must keep its type.
  void upload(const std::string& name, const Tensor& t);
  // Downloads `name` into `into` (allocated with its type).
  void download(const std::string& name, Tensor& into);
  // `to` becomes a copy of `from` (allocated on first use).
  void copy(const std::string& to, const std::string& from);
  void synchronize();
  const std::shared_ptr<Device>& device() const { return device_; }

 private:
  struct Entry {
    TensorType type;
    DeviceBuffer mem;
  };
  Entry& entry(const std::string& name, const TensorType& type);  // allocates when missing
  const Entry& at(const std::string& name) const;
  std::shared_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
  std::map<std::string, Entry> entries_;
};

class CudaExecutable {
 public:
  // Opens the device first, so that without one this throws NoDeviceError before any
  // other work. Throws IRError for a node the CUDA backend cannot run, NvrtcError when a
  // kernel does not compile, CudaError for driver failures.
  static std::unique_ptr<CudaExecutable> compile(
      const Graph& g, const CudaExecOptions& opts = CudaExecOptions::fromEnv());
  ~CudaExecutable();
  CudaExecutable(const CudaExecutable&) = delete;

  // What compile() would launch and allocate, found without a device and without
  // compiling a kernel: the launch names in order and the stats' counts and sizes (no
  // compile time or cache hits). Throws what compile() throws for the graph.
  struct Layout {
    CudaExecStats stats;
    std::vector<std::string> launches;
  };
  static Layout layout(const Graph& g, const CudaExecOptions& opts = CudaExecOptions::fromEnv());
  CudaExecutable& operator=(const CudaExecutable&) = delete;

  // Every graph input by name with its exact type; returns the outputs in order. Not for
  // stateful executables.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs);

  // The stateful mode. loadState uploads every state input from `store` (throws naming
  // the missing or mistyped ones); runStep takes the other inputs and returns the
  // non-state outputs by name; saveState downloads the state into `store`.
  void loadState(const ParamStore& store);
  std::map<std::string, Tensor> runStep(const std::map<std::string, Tensor>& batch);
  void saveState(ParamStore& store);

  // Reads every input that `tensors` holds from there (no upload per run); with
  // sharedState every state input must be there, and runStep updates it there. Throws
  // naming the missing or mistyped tensors. `tensors` must outlive the executable's runs
  // and live on the same device; call its synchronize() after changing it from the host.
  void bindTensors(const DeviceTensors& tensors);

  const std::vector<std::string>& stateNames() const;
  const CudaExecStats& stats() const;
  const DeviceInfo& device() const;
  // Launch names in order ("gemm:<value>" for GEMMs).
  std::vector<std::string> launchNames() const;
  // With CudaExecOptions::profile: device time per launch (between events recorded around
  // it) summed over the runs so far, in launch order; `gemm` marks GEMM launches.
  std::vector<Executable::LaunchTime> profile() const;
  // The CUDA source of each distinct kernel (for dumps and tests).
  std::vector<std::string> kernelSources() const;

  struct Impl;

 private:
  explicit CudaExecutable(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tgc::runtime::cuda
