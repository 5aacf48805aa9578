// The range check of integer graph inputs used as indices, for the compiled backends.
//
// The interpreter checks every index an op reads (ir/interpreter.cpp, ir/interp_losses.cpp);
// the compiled kernels do not: the CPU's gather reads an index outside its table as a row of
// zeros, its softmax_cross_entropy gives a target outside the logits a loss of 0. So the
// executables (runtime/executable.h, runtime/cuda/cuda_executable.h) find at compile time
// which elements of each i32/i64 graph input reach an index operand, and scan those elements
// before every run:
//
//   gather(table, indices)                indices in [0, rows of table)
//   scatter_add(indices, updates)         indices in [0, rows)
//   softmax_cross_entropy(logits, targets)        targets in [0, V), V the last dim of
//   softmax_cross_entropy_grad(logits, targets, ...)  the logits (no ignore index: padding
//                                                     is the graph's mask, and pad is a class)
//
// An input reaches an index operand directly or through ops that move its elements without
// changing them: reshape, transpose, broadcast, slice, concat (each operand on its own) and
// casts i32 -> i64. Any other op in between (arithmetic, where, a narrowing cast) ends the
// trace, and what it computes is not checked. The check is a linear scan of the elements
// that reach each index operand (every element of the input, or the positions a slice
// keeps).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace tgc::runtime {

struct IndexBound {
  enum class Kind { Row, Target };  // an index into a table (gather, scatter_add), a class
  std::string input;                // the graph input's value name
  TensorType type;                  // its type (i32 or i64)
  int64_t hi = 0;                   // valid values: [0, hi)
  Kind kind = Kind::Row;
  std::string op;                   // describeNode of the op that indexes with it
  // Flat positions of the input that reach the op, ascending; empty: every element.
  std::vector<int64_t> positions;
  int slot = -1;                    // for the executable: where it keeps the input
};

// The bounds on g's integer inputs, in the order of the ops that impose them; one bound per
// input and op (identical ones, such as a gather's and its gradient's scatter_add, once).
std::vector<IndexBound> findIndexBounds(const Graph& g);

// Throws IRError for the first element of `data` (the bound's input, of its type) outside
// the bound, naming the op, the value, the input and its position, and the valid range:
//   gather %x (f32[24,8], i64[2,5]): index 57 (at position [1, 3] of input %src) is out of
//     range for a table of 24 rows; valid indices are [0, 24)
//   softmax_cross_entropy %l (f32[2,5,24], i64[2,5]): target 57 (at position [1, 3] of
//     input %tgt_out) is outside [0, 24)
void checkIndexBound(const IndexBound& b, const void* data);

}  // namespace tgc::runtime
