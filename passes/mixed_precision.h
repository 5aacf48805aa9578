// Mixed precision (autocast to bf16) for training steps: see passes/mixed_precision.cpp.
#pragma once

#include "ir/graph.h"

namespace tgc {

// Every f32 matmul takes bf16 operands and casts its product back to f32. With castPerUse
// every matmul operand gets its own cast and widened values are not looked through, so that
// autodiff, which sums a value's gradients in the value's dtype, sums the gradients of the
// matmul operands in f32 (after the cast back). Without it (the registered pass) a value is
// cast once however many matmuls read it. Returns the number of matmuls rewritten.
int autocastMatmuls(Graph& g, bool castPerUse);

// After autodiff: identical casts become one, and cast(cast(x, f32), bf16) of a bf16 x is x
// (widening is exact), so a value read by several matmuls is saved once, in bf16, and each
// weight is cast once per step. Returns the number of casts removed.
int mergeCasts(Graph& g);

}  // namespace tgc
