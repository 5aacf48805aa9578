// Many kernels compiled as a few NVRTC programs, in parallel: what a whole graph needs
// (`tgc compile --target cuda --emit=ptx`, the CUDA executable, the PTX test). NVRTC's
// cost is mostly per program, so kernels are grouped, one translation unit per group
// (the helpers once, then each kernel function).
#pragma once

#include <string>
#include <vector>

#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/kernel_ir.h"

namespace tgc::codegen::cuda {

struct KernelModule {
  std::vector<std::string> names;  // the kernels it defines, in input order
  std::vector<LaunchGeometry> launches;
  std::string source;
  NvrtcResult compiled;  // PTX or CUBIN of the whole module
};

// Groups `kernels` (in order, at most `perModule` each) and compiles the groups on
// `threads` threads (0: std::thread::hardware_concurrency()). Kernel names must be unique.
// Throws the first NvrtcError any group raised.
std::vector<KernelModule> compileKernelModules(const std::vector<const kir::Kernel*>& kernels,
                                               Product product, const std::string& arch,
                                               int perModule = 64, int threads = 0,
                                               const NvrtcOptions& options = NvrtcOptions::fromEnv());

}  // namespace tgc::codegen::cuda
