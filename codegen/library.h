// The library-kernel registry: which hand-written C++ kernel runs each node that
// codegen::classify marks NodeExecution::Library (the fused ops of ir/fused_ops.h).
//
// bindLibraryKernel(node) checks the node once, at compile time (f32 or f64 only: the
// kernels are templates over those two; other dtypes are an IRError naming the node), and
// returns a LibraryKernel bound to the node's shapes and attributes. The runtime calls it
// once per run with a pointer per operand (in operand order, read-only) and a pointer per
// result (in result order; each its own buffer, never overlapping an operand), and the
// executable's ThreadPool. Kernels allocate their own scratch (sized by the shapes, freed on
// return) and may use the pool (parallelFor and friends) but must not keep pointers across
// calls.
//
// Adding an op: write `LibraryKernel bindMyOp(const Node&)` next to its kernel, and make its
// case of the switch in bindLibraryKernel (codegen/library.cpp) return it.
#pragma once

#include <functional>

#include "ir/graph.h"

namespace tgc {
class ThreadPool;
}

namespace tgc::codegen {

using LibraryKernel =
    std::function<void(const void* const* operands, void* const* results, ThreadPool& pool)>;

// The kernel of a Library node; throws IRError naming the node when none exists for its
// op or dtype.
LibraryKernel bindLibraryKernel(const Node& n);

// The float dtype shared by n's float operands and results when it is f32 or f64; throws
// IRError naming the node otherwise (for binders' dtype checks).
DType libraryFloatType(const Node& n);

}  // namespace tgc::codegen
