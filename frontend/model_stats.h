// Size and cost of a graph: parameter count, ops by kind, estimated FLOPs (`tgc compile --stats`).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ir/graph.h"

namespace tgc {

struct GraphStats {
  int64_t param_tensors = 0;
  int64_t param_count = 0;  // elements of all inputs with role "param"
  int64_t node_count = 0;
  std::map<std::string, int64_t> op_counts;  // by op name
  double flops = 0;
  std::map<std::string, double> flops_by_op;
};

// FLOP estimate: matmul 2*M*N*K per batch entry; elementwise ops 1 per result element;
// reductions 1 per input element; softmax and log_softmax 5, layer_norm 8 per element; data
// movement, gathers and sources 0.
GraphStats computeStats(const Graph& g);
std::string formatStats(const GraphStats& s);

}  // namespace tgc
