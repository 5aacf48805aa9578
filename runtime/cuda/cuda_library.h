// The fused library ops (ir/fused_ops.h) on the GPU: hand-written kernels
// (runtime/cuda/library_kernels.cu) compiled by NVRTC for the device, bound per node.
//
// layer_norm_grad, softmax_cross_entropy and softmax_cross_entropy_grad run in f32 and
// f64 (targets i32 or i64). fused_attention(+_grad) go to CudaAttention
// (runtime/cuda/cuda_attention.h), loaded on the first attention node.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/cuda/driver.h"

namespace tgc::runtime::cuda {

class CudaAttention;

// The CUDA source of the library kernels, and their names (for compile tests).
const std::string& librarySource();
std::vector<std::string> libraryKernelNames();

// The kernels that run `n`; throws IRError naming the node for an op or dtype without
// a GPU kernel (non-float data, attention head dims above 128). Needs no device.
std::vector<std::string> libraryKernelsFor(const Node& n);

// Enqueues a bound node: device pointers per operand and per result, in order.
using CudaLibraryLaunch =
    std::function<void(const CUdeviceptr* operands, const CUdeviceptr* results, Stream& stream)>;

class CudaLibrary {
 public:
  // Compiles librarySource() to CUBIN for the device (NVRTC's disk cache) and loads it.
  explicit CudaLibrary(std::shared_ptr<Device> device);
  ~CudaLibrary();

  // Checks the node (op, dtypes) and binds its shapes and attributes; scratch memory the
  // kernels need is allocated here and owned by the returned launch.
  CudaLibraryLaunch bind(const Node& n) const;

 private:
  std::shared_ptr<Device> device_;
  std::unique_ptr<Module> module_;
  mutable std::unique_ptr<CudaAttention> attention_;  // the first attention node loads it
};

}  // namespace tgc::runtime::cuda
