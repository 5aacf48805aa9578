// The kernel templates, one per kind of group anchor (the group's last node); each fills
// the Ctx's kernel. Shared by lower.cpp (dispatch) and the files that implement them.
#pragma once

#include "codegen/lower_expr.h"

namespace tgc::codegen::lower {

// Elementwise, layout (transpose, broadcast, slice, concat, gather), iota, philox_uniform:
// one store per output element, parallel over the leading dims, vectorized over the last.
void lowerPointwise(Ctx& c);
// transpose: tiled when the contiguous dim moves; concat: a copy per operand and row.
void lowerTranspose(Ctx& c);
void lowerConcat(Ctx& c);
// reduce_sum / reduce_max / reduce_mean over any axes.
void lowerReduce(Ctx& c);
// softmax / log_softmax along any axis: one row per parallel iteration.
void lowerSoftmax(Ctx& c);
// layer_norm over the last axis: one row per parallel iteration.
void lowerLayerNorm(Ctx& c);
void lowerRmsNorm(Ctx& c);
// scatter_add: parallel over blocks of output rows (each owned by one iteration).
void lowerScatterAdd(Ctx& c);

}  // namespace tgc::codegen::lower
