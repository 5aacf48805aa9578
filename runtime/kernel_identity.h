#pragma once

#include <set>
#include <string>

#include "codegen/kernel_ir.h"

namespace tgc::runtime {

// Shared by the CPU and CUDA executables: how a graph's kernels are told apart.

// A kernel's structure without its names: two kernels with equal keys compute the same
// function of their buffers, so one compiled copy serves both (a Transformer repeats each
// layer's kernels per layer, and AdamW's per parameter shape). Shared subexpressions print
// once and are referred to by number, so the key grows with the kernel's DAG, not its tree.
std::string structuralKernelKey(const codegen::kir::Kernel& k);

// Kernel (launch) names unique within one executable: the second "x" becomes "x_2", and so
// on. A JIT requires it; profiles and dumps read better with it.
class KernelNameUniquer {
 public:
  std::string operator()(const std::string& base);

 private:
  std::set<std::string> used_;
};

}  // namespace tgc::runtime
