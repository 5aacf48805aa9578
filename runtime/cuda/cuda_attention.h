// Fused attention on the GPU: fused_attention and fused_attention_grad (ir/fused_ops.h)
// as FlashAttention-2 kernels (runtime/cuda/attention_kernels.cu) compiled by NVRTC for the
// device, bound per node through CudaLibrary (runtime/cuda/cuda_library.h).
//
// f32 and f64, head dims up to 128 (q/k and v may differ), any lengths and batch dims,
// causal and broadcast bool masks, dropout from Philox (the CPU's stream bit for bit).
// The backward adds dq with atomicAdd, so its low bits vary between runs; dk and dv are
// each written by one block.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/cuda/cuda_library.h"
#include "runtime/cuda/driver.h"

namespace tgc::runtime::cuda {

// The CUDA source of the attention kernels, and their names (for compile tests).
const std::string& attentionSource();
std::vector<std::string> attentionKernelNames();

// The kernel that runs the fused_attention(_grad) node `n`; throws IRError naming the node
// for a dtype other than f32 / f64 or a head dim above 128. Needs no device.
std::string attentionKernelFor(const Node& n);

// attention_kernels.cu's AttnParams, field for field: pointers (device addresses), sizes,
// the mask's strides and per-item offsets, attributes.
struct AttnParams {
  CUdeviceptr q = 0, k = 0, v = 0, out = 0, lse = 0, dout = 0, dq = 0, dk = 0, dv = 0, mask = 0,
              maskBase = 0, seed = 0, offset = 0;
  long long batch = 0, tq = 0, tk = 0, d = 0, dvDim = 0, maskStrideI = 0, maskStrideJ = 0;
  double scale = 1, pDrop = 0, keepScale = 1;
  long long causal = 0, hasMask = 0, dropout = 0;
  long long heads = 1;  // codegen::AttentionParams::heads (layout bthd)
  CUdeviceptr bias = 0, biasBase = 0, dbias = 0;
  long long biasStrideI = 0, biasStrideJ = 0, hasBias = 0, biasGrad = 0;
};

// One node's launch, device-independent: the kernel, its parameters, the grid (blocks of
// 256 threads) and dynamic shared memory. The backward kernel adds into dq: zero it first.
struct AttentionLaunch {
  std::string kernel;
  bool forward = true;
  AttnParams params;               // addresses unset
  std::vector<long long> maskBase;  // the mask's offset per batch item (with has_mask)
  std::vector<long long> biasBase;  // the bias's (with has_bias)
  int64_t dbiasBytes = 0;           // dbias, zeroed before the backward (bias_grad)
  unsigned blocks = 0;
  unsigned sharedBytes = 0;
  size_t maskAt = 0, biasAt = 0, seedAt = 0;  // operand indices of the mask, bias and seed

  // `params` with the operand and result addresses (in the op's order) filled in; the
  // caller sets maskBase's and biasBase's addresses.
  AttnParams withPointers(const CUdeviceptr* operands, const CUdeviceptr* results) const;
};
AttentionLaunch attentionLaunchFor(const Node& n);

class CudaAttention {
 public:
  // Compiles attentionSource() to CUBIN for the device (NVRTC's disk cache) and loads it.
  explicit CudaAttention(std::shared_ptr<Device> device);
  ~CudaAttention();

  // Binds the node's shapes, attributes and mask layout (operands and results as
  // CudaLibraryLaunch passes them).
  CudaLibraryLaunch bind(const Node& n) const;

 private:
  std::shared_ptr<Device> device_;
  std::unique_ptr<Module> module_;
};

}  // namespace tgc::runtime::cuda
