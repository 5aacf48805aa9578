#include "runtime/gemm_cast_fold.h"

#include <algorithm>

#include "codegen/lower.h"
#include "ir/env_flag.h"

namespace tgc::runtime {
namespace {

// Whether v is in memory as it is: not a member of some kernel's fusion group.
bool inMemory(const Value* v) {
  for (;;) {
    const Node* def = v->def();
    switch (codegen::classify(*def)) {
      case codegen::NodeExecution::Source:
      case codegen::NodeExecution::Gemm:
      case codegen::NodeExecution::Library: return true;
      case codegen::NodeExecution::View: v = def->operand(0); continue;
      case codegen::NodeExecution::Kernel: return false;
    }
    return false;
  }
}

}  // namespace

std::unordered_set<const Node*> foldableGemmCasts(
    const Graph& g, const std::unordered_map<const Node*, codegen::FusionGroup>& groups) {
  std::unordered_set<const Node*> out;
  if (envFlag("TGC_NO_GEMM_CAST_FOLD")) return out;
  const auto users = g.computeUsers();
  const auto& outputs = g.outputs();
  for (const auto& node : g.nodes()) {
    const Node& n = *node;
    if (n.op() != OpKind::Cast || n.result()->type().dtype != DType::bf16 ||
        n.operand(0)->type().dtype != DType::f32 || !inMemory(n.operand(0)))
      continue;
    const auto group = groups.find(&n);
    if (group == groups.end() || group->second.nodes.size() != 1) continue;
    if (std::find(outputs.begin(), outputs.end(), n.result()) != outputs.end()) continue;
    const auto u = users.find(n.result());
    if (u == users.end() || u->second.empty()) continue;
    const bool onlyB = std::all_of(u->second.begin(), u->second.end(), [&](const Node* m) {
      return m->op() == OpKind::MatMul && m->operand(0) != n.result() &&
             m->operand(1) == n.result();
    });
    if (onlyB) out.insert(&n);
  }
  return out;
}

}  // namespace tgc::runtime
