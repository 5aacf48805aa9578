#include "runtime/graph_walk.h"

#include <fmt/format.h>

#include <stdexcept>

#include "codegen/fusion_groups.h"
#include "codegen/lower.h"
#include "ir/interpreter.h"

namespace tgc::runtime {

std::unordered_map<const Node*, codegen::FusionGroup> kernelGroups(const Graph& g, bool fuse) {
  std::unordered_map<const Node*, codegen::FusionGroup> at;
  if (fuse) {
    for (auto& group : codegen::formFusionGroups(g)) at[group.nodes.back()] = std::move(group);
  } else {
    for (const auto& n : g.nodes())
      if (codegen::classify(*n) == codegen::NodeExecution::Kernel)
        at[n.get()] = codegen::FusionGroup{{n.get()}, {}};
  }
  return at;
}

std::vector<Tensor> sourceValues(const Node& n) {
  if (!n.operands().empty())
    throw IRError(fmt::format("{}: a source op with operands", describeNode(n)));
  return Interpreter().evalNode(n, {});
}

const Value* viewedValue(const Node& n) {
  const Value* from = n.operand(0);
  if (from->type().numel() != n.result()->type().numel() ||
      from->type().dtype != n.result()->type().dtype)
    throw IRError(fmt::format("{}: a view must keep the dtype and element count",
                              describeNode(n)));
  return from;
}

void checkInputType(const std::string& name, const TensorType& want, const Tensor& got,
                    const char* where) {
  if (got.type() != want)
    throw std::invalid_argument(fmt::format("input %{}: the graph declares {} but {} holds {}",
                                            name, want.str(), where, got.type().str()));
}

}  // namespace tgc::runtime
