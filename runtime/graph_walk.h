#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/lower.h"
#include "ir/graph.h"
#include "ir/tensor.h"

namespace tgc::runtime {

// Steps of turning a graph into launches that the CPU and CUDA executables share, so that
// both launch the same kernels and refuse the same graphs. Each walks the graph in order
// and switches on codegen::classify(node).

// The groups of a graph's Kernel nodes, each under its last node: one kernel launch per
// group, at that node; other members' values get no buffer unless they are extra outputs of
// a multi-output group. With `fuse` the groups are codegen::formFusionGroups', otherwise
// each Kernel node alone.
std::unordered_map<const Node*, codegen::FusionGroup> kernelGroups(const Graph& g, bool fuse);

// A Source node other than an input (constant, iota, ...): its values, computed once at
// compile time, one per result. Throws IRError for a source op with operands.
std::vector<Tensor> sourceValues(const Node& source);

// A View node: the value whose memory it reads as is. Throws IRError when the view would
// change the dtype or the element count.
const Value* viewedValue(const Node& view);

// A tensor given for graph input `name`, which declares `want`; `where` says where it came
// from ("the given tensor", "the parameter store", ...). Throws std::invalid_argument naming
// the input and both types when they differ.
void checkInputType(const std::string& name, const TensorType& want, const Tensor& got,
                    const char* where);

}  // namespace tgc::runtime
