#include "passes/rewrite.h"

#include <cmath>

namespace tgc {

Uses::Uses(const Graph& g) : users_(g.computeUsers()), outputs_(g.outputs().begin(), g.outputs().end()) {}

bool Uses::single(const Value* v) const {
  auto it = users_.find(v);
  return it != users_.end() && it->second.size() == 1 && !outputs_.count(v);
}

std::optional<std::set<Node*>> Uses::readers(const Value* v) const {
  if (outputs_.count(v)) return std::nullopt;
  auto it = users_.find(v);
  if (it == users_.end()) return std::set<Node*>{};
  return std::set<Node*>(it->second.begin(), it->second.end());
}

std::vector<Node*> nodeSnapshot(const Graph& g) {
  std::vector<Node*> nodes;
  nodes.reserve(g.size());
  for (const auto& n : g.nodes()) nodes.push_back(n.get());
  return nodes;
}

std::optional<double> splatValue(const Value* v) {
  const Node* n = v->def();
  switch (n->op()) {
    case OpKind::Constant: {
      const auto& vals = n->attrFloats("value");
      if (vals.empty() || std::isnan(vals[0])) return std::nullopt;
      for (double x : vals)
        if (x != vals[0]) return std::nullopt;
      return vals[0];
    }
    case OpKind::Broadcast:
    case OpKind::Reshape: return splatValue(n->operand(0));
    default: return std::nullopt;
  }
}

Tensor constantTensor(const Node& constant) {
  const TensorType& t = constant.result()->type();
  const auto& vals = constant.attrFloats("value");
  if (vals.size() == 1 && t.numel() != 1)
    return Tensor(t, std::vector<double>(static_cast<size_t>(t.numel()), vals[0]));
  return Tensor(t, vals);
}

void Rewriter::replace(Node* n, Value* v) {
  g_.replaceAllUsesWith(n->result(), v);
  g_.erase(n);
  changed_ = true;
}

Value* Rewriter::replaceWithNew(Node* n, OpKind op, std::vector<Value*> operands, AttrMap attrs,
                                std::vector<TensorType> declared) {
  std::string name = n->result()->name();
  Node* added = g_.add(op, std::move(operands), std::move(attrs), {name}, std::move(declared));
  g_.moveBefore(added, n);
  replace(n, added->result());
  g_.renameValue(added->result(), name);  // the old name is free now that n is gone
  return added->result();
}

}  // namespace tgc
