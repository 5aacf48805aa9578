#pragma once

#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace tgc::runtime {

// The groups of a graph's Kernel nodes (codegen::classify), each under its last node: one
// kernel launch per group, at that node; the other members' values get no buffer. With
// `fuse` the groups are codegen::formFusionGroups', otherwise each Kernel node alone.
// Shared by the CPU and CUDA executables, so that both launch the same kernels.
std::unordered_map<const Node*, std::vector<const Node*>> kernelGroups(const Graph& g, bool fuse);

}  // namespace tgc::runtime
