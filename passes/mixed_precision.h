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

// After mergeCasts: the ReLU gradients of a bf16 step read the bf16 copies the matmuls keep
// and run in bf16. A test gt(y, 0) that only selects gradients (every user a where(test, g,
// 0)) becomes gt(r, 0) with r the bf16 copy of y or of relu(y) (the ReLU's f32 input is no
// longer saved for the backward: 8 MiB a layer on base),
// and where(m, cast(x, f32), 0) of a bf16 gradient x becomes cast(where(m, x, 0), f32), so
// the bf16 cast the weight gradients' matmuls read is the where itself. Exact except that an
// f32 y in (0, 2^-134] rounds to a bf16 0: there the gradient is 0, as at y = 0 (the native
// bf16 GEMM reads such a y as 0 anyway). Returns the number of nodes rewritten.
int narrowReluGradients(Graph& g);

}  // namespace tgc
