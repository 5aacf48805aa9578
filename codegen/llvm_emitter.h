// The CPU back end of Kernel IR: each kir::Kernel becomes one LLVM function with the
// kir::KernelFn ABI, JIT-compiled by codegen/jit.h.
//
//   void name(void* const* buffers, int64_t begin, int64_t end) {
//     for (p = begin; p < end; ++p) body   // p bound to kernel.parallelVar
//   }
//
// Semantics are the reference interpreter's (ir/interpreter.cpp): NaN-propagating
// max/min, ints wrap, float->int casts truncate and saturate (NaN gives 0), bool is one
// byte in memory, bf16/f16 stores round to nearest even. Float arithmetic carries only the
// `reassoc contract` fast-math flags (reductions vectorize; NaN and inf stay IEEE).
// f32 exp/log/tanh/erf are emitted inline as vectorizable polynomials (a few ulp); f64
// math calls libm through LLVM intrinsics.
#pragma once

#include <string>
#include <vector>

#include "codegen/jit.h"
#include "codegen/kernel_ir.h"

namespace llvm {
class Module;
}

namespace tgc::codegen {

// Emits `k` as a function named k.name with the kir::KernelFn ABI into `m`. Verifies `k`
// first (std::logic_error when it is malformed). `vectorBits` (TargetSpec::vectorBits())
// sets the width of LoopKind::Vector loops; 0 leaves it to LLVM's cost model.
void emitKernel(const kir::Kernel& k, llvm::Module& m, int vectorBits = 0);

// Compiles kernels with `jit`, one LLVM module per kernel so the on-disk object cache
// works per kernel; returns the function pointers in order. Kernel names must be unique
// (within the call and across everything already added to `jit`).
std::vector<kir::KernelFn> compileKernels(Jit& jit, const std::vector<const kir::Kernel*>& kernels);

// For `tgc compile --target cpu --emit=llvm|asm`: the kernel's LLVM IR after the O3
// pipeline for the target, and its assembly.
std::string kernelLLVMIR(const kir::Kernel& k, const TargetSpec& target);
std::string kernelAssembly(const kir::Kernel& k, const TargetSpec& target);

}  // namespace tgc::codegen
