// Lowering Graph IR to Kernel IR: one kernel per group of graph nodes.
//
// The runtime (runtime/executable.h) walks a graph in order and asks, for each node, how it
// executes (classify): most ops become a generated kernel; matmul calls the packed GEMM
// (codegen/gemm.h); reshape of a contiguous value is a view of its operand's memory; inputs
// and constants are placed by the runtime itself.
//
// A group is a list of nodes in topological order whose last node's result(s) are the
// group's outputs; values produced inside the group and used only there never reach
// memory. Today every group holds one node; fusion passes will hand over bigger ones.
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

struct LoweredKernel {
  kir::Kernel kernel;
  // For each kernel buffer (same order as kernel.buffers), the graph value it holds:
  // operands read by the group and the results it writes.
  std::vector<const Value*> values;
};

// Lowers a group (see above) to one kernel named after the last node's provenance.
// Throws IRError naming the op when an op of the group cannot be lowered.
LoweredKernel lowerGroup(const std::vector<const Node*>& group);

}  // namespace tgc::codegen
