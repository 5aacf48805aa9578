// GEMM epilogues: elementwise work applied to C inside the GEMM, on each block of C once
// its whole K has been accumulated and while it is still in the L1 cache, instead of in a
// separate pass that reads C back from memory.
//
// In order, for every element (i, j) of each product's C:
//
//   v = alpha * op(A) op(B) + beta * C            (the product, codegen/gemm.h)
//   v = v + bias[j]                               bias: n values, the same for every row
//                                                 and batch item
//   v = v + addend(i, j)                          addend: m x n with its own leading dim and
//                                                 batch strides (a residual, a gradient sum)
//   v = act(v)                                    relu, gelu (erf), gelu (tanh) or silu,
//                                                 exactly as the interpreter defines them
//   v = v * scale
//   v = keep(i, j) ? v : 0                        mask: m x n with its own layout; keep is
//                                                 mask > 0 (a value of C's dtype, e.g. the
//                                                 ReLU output H for dH * (H > 0)) or
//                                                 mask != 0 (a bool byte)
//   v = v * gate(i, j)                            or, in the mask's place, a product with
//                                                 an m x n operand of C's dtype (SwiGLU's
//                                                 up projection times silu(gate))
//
// Each combination of stages is one small loop nest generated as LLVM IR (vectorized by
// LLVM's O3 loop vectorizer; f32 erf and tanh inline from codegen/llvm_math.h, f64 from
// libm) and JIT-compiled once per process on first use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/dtype.h"

namespace llvm {
class Function;
class Module;
}  // namespace llvm

namespace tgc::codegen {

enum class GemmActivation { none, relu, gelu, geluTanh, silu };
enum class GemmMask {
  none,
  positive,  // keep where mask(i, j) > 0; mask has C's dtype (NaN is not kept)
  nonzero,   // keep where the bool byte mask(i, j) != 0
  multiply,  // v * mask(i, j); mask has C's dtype
};

struct GemmEpilogue {
  bool bias = false;
  bool addend = false;
  int64_t ldAddend = 0;                // row stride of the addend, in elements
  std::vector<int64_t> strideAddend;   // per batch dimension of the GemmDesc
  GemmActivation activation = GemmActivation::none;
  double scale = 1.0;
  GemmMask mask = GemmMask::none;
  int64_t ldMask = 0;
  std::vector<int64_t> strideMask;

  bool empty() const {
    return !bias && !addend && activation == GemmActivation::none && scale == 1.0 &&
           mask == GemmMask::none;
  }
  // The stages present, as a short tag ("b_a_relu_s_mpos"): part of the kernel's name and
  // of its slot in the engine's table.
  std::string tag() const;
  // Index of this stage combination in [0, kVariants).
  int variant() const;
  static constexpr int kVariants = 2 * 2 * 5 * 2 * 4;
};

// The epilogue's operands for one GEMM call (null where the stage is absent); the addend
// and mask point at batch item 0, element (0, 0).
struct GemmEpilogueOperands {
  const void* bias = nullptr;
  const void* addend = nullptr;
  const void* mask = nullptr;
  // GemmDesc::sumB: receives sum over k of op(B)(k, j) for j < n (a bias gradient).
  void* sumB = nullptr;
};

// The generated function: applies the epilogue's stages after the product to a rows x cols
// block of C, for T = float or double. bias points at the block's first column, addend and
// mask at its (0, 0) element.
template <class T>
using GemmEpilogueKernel = void(T* c, int64_t ldc, int64_t rows, int64_t cols, const T* bias,
                                const T* addend, int64_t ldAddend, const void* mask,
                                int64_t ldMask, T scale);

// Adds the epilogue kernel of `epi`'s stages for `dtype` (f32 or f64) to `module` as an
// external function named `name`, vectorized by `lanes` elements (one vector register, as
// the micro-kernel's GemmKernelConfig::lanes).
llvm::Function* emitGemmEpilogue(llvm::Module& module, const GemmEpilogue& epi, DType dtype,
                                 int lanes, std::string_view name);

}  // namespace tgc::codegen
