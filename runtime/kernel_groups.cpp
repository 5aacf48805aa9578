#include "runtime/kernel_groups.h"

#include "codegen/fusion_groups.h"
#include "codegen/lower.h"

namespace tgc::runtime {

std::unordered_map<const Node*, std::vector<const Node*>> kernelGroups(const Graph& g,
                                                                       bool fuse) {
  std::unordered_map<const Node*, std::vector<const Node*>> at;
  if (fuse) {
    for (auto& group : codegen::formFusionGroups(g)) at[group.back()] = std::move(group);
  } else {
    for (const auto& n : g.nodes())
      if (codegen::classify(*n) == codegen::NodeExecution::Kernel) at[n.get()] = {n.get()};
  }
  return at;
}

}  // namespace tgc::runtime
