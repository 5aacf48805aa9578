// cse: common subexpression elimination. Two nodes are the same computation when they have
// the same op, the same operand values, the same attributes and the same result types;
// the later one is removed and its uses (outputs included) go to the first, whose
// provenance name survives.
//
// Every op in the table is pure, so any such pair may be merged, with one exception:
// `input` nodes are distinct graph arguments even when their types match. philox_uniform
// is merged too: it is a pure function of (seed, offset, type), so two nodes with the same
// operands produce the same bits; dropout masks that must differ use different offsets.
#include <fmt/format.h>

#include <string>
#include <unordered_map>

#include "passes/passes.h"

namespace tgc {
namespace {

// A text key that is equal exactly when the nodes are interchangeable. Operands are keyed
// by identity; attributes by their printed form, which tells every distinct double apart
// (shortest round-trip digits, -0.0, inf) and treats NaN as equal to NaN, as merging wants.
std::string nodeKey(const Node& n) {
  std::string k(n.info().name);
  k += '(';
  for (const Value* v : n.operands()) k += fmt::format("{},", fmt::ptr(v));
  k += "){";
  for (const auto& [name, a] : n.attrs()) k += name + '=' + attrToString(a) + ';';
  k += "}:";
  for (size_t i = 0; i < n.numResults(); ++i) k += n.result(i)->type().str() + ';';
  return k;
}

}  // namespace

bool runCSE(Graph& g, PassContext&) {
  std::unordered_map<std::string, Node*> first;
  std::unordered_map<Value*, Value*> replacement;
  std::vector<Node*> duplicates;
  // Nodes are in topological order, so a node's operands are already redirected to their
  // surviving copies when it is keyed; chains of duplicates collapse in one sweep.
  for (const auto& np : g.nodes()) {
    Node* n = np.get();
    for (size_t i = 0; i < n->operands().size(); ++i) {
      auto it = replacement.find(n->operand(i));
      if (it != replacement.end()) n->setOperand(i, it->second);
    }
    if (n->op() == OpKind::Input) continue;
    auto [it, inserted] = first.try_emplace(nodeKey(*n), n);
    if (inserted) continue;
    for (size_t i = 0; i < n->numResults(); ++i) replacement[n->result(i)] = it->second->result(i);
    duplicates.push_back(n);
  }
  if (duplicates.empty()) return false;
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    auto it = replacement.find(g.outputs()[i]);
    if (it != replacement.end()) g.setOutput(i, it->second);
  }
  for (Node* d : duplicates) g.erase(d);
  return true;
}

}  // namespace tgc
