// Lowering Graph IR to Kernel IR: one kernel per group of graph nodes.
//
// The runtime (runtime/executable.h) walks a graph in order and asks, for each node, how it
// executes (classify): most ops become a generated kernel; matmul calls the packed GEMM
// (codegen/gemm.h); reshape of a contiguous value is a view of its operand's memory; inputs
// and constants are placed by the runtime itself.
//
// A group is a list of nodes in topological order whose last node's result(s) are the
// group's outputs, with, for an elementwise last node, other members' values of its shape
// (multi-output groups); values produced inside the group and used only there never reach
// memory. codegen/fusion_groups.h forms the groups.
#pragma once

#include <vector>

#include "codegen/kernel_ir.h"
#include "ir/graph.h"

namespace tgc::codegen {

enum class NodeExecution {
  Source,  // input, constant: placed by the runtime
  Kernel,  // a generated kernel (lowerGroup)
  Gemm,    // matmul: the library GEMM
  View,    // reshape: the operand's memory, reinterpreted
  Library, // fused ops (ir/fused_ops.h): hand-written library kernels (codegen/library.h)
};

NodeExecution classify(const Node& node);

// Ops whose value at an index is a function of their operands at the same (numpy
// broadcast) index: arithmetic, comparisons, where, cast, broadcast. Lowering may merge
// dims across them; fusion may share their values between outputs of one kernel.
bool isElementwise(OpKind op);

struct LoweredKernel {
  kir::Kernel kernel;
  // For each kernel buffer (same order as kernel.buffers), the graph value it holds:
  // operands read by the group and the results it writes.
  std::vector<const Value*> values;
};

struct FusionGroup {
  std::vector<const Node*> nodes;  // in topological order; the last one is the anchor
  // Members' results, other than the last node's, that the kernel stores too (graph
  // order): each has the last node's shape, and the last node is elementwise.
  std::vector<const Value*> extraOutputs;
};

// Lowers a group (see above) to one kernel named after the last node's provenance. Each
// element's iteration stores the last node's result first, then the extra outputs in
// reverse graph order: a value is stored after the outputs computed from it, so that
// stored in place of its own operand (runtime/executable.cpp), the old operand has been
// read by all of them. Throws IRError naming the op when an op cannot be lowered.
LoweredKernel lowerGroup(const FusionGroup& group);
// A group whose only outputs are the last node's results.
LoweredKernel lowerGroup(const std::vector<const Node*>& group);

}  // namespace tgc::codegen
