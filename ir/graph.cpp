#include "ir/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

namespace tgc {

std::string describeNode(const Node& n) {
  std::string s = fmt::format("{} %{}", n.info().name, n.numResults() ? n.result()->name() : "?");
  s += " (";
  for (size_t i = 0; i < n.operands().size(); ++i)
    s += (i ? ", " : "") + n.operand(i)->type().str();
  return s + ")";
}

Node* Graph::add(OpKind op, std::vector<Value*> operands, AttrMap attrs,
                 std::vector<std::string> names, std::vector<TensorType> declared) {
  std::vector<TensorType> opTypes;
  for (Value* v : operands) {
    if (!v) throw IRError(fmt::format("{}: null operand", opName(op)));
    opTypes.push_back(v->type());
  }
  std::string shownName = names.empty() || names[0].empty() ? "t" : names[0];
  auto where = [&] {
    std::string s = fmt::format("{} %{}", opName(op), shownName);
    if (!opTypes.empty()) {
      s += " (";
      for (size_t i = 0; i < opTypes.size(); ++i) s += (i ? ", " : "") + opTypes[i].str();
      s += ")";
    }
    return s;
  };
  std::vector<TensorType> types;
  try {
    types = inferResultTypes(op, opTypes, attrs, declared);
  } catch (const ShapeError& e) {
    throw IRError(fmt::format("{}: {}", where(), e.what()));
  }
  if (!declared.empty() && !opInfo(op).isSource() && declared != types) {
    std::string d, t;
    for (size_t i = 0; i < declared.size(); ++i) d += (i ? ", " : "") + declared[i].str();
    for (size_t i = 0; i < types.size(); ++i) t += (i ? ", " : "") + types[i].str();
    throw IRError(fmt::format("{}: declared result type {} but the op gives {}", where(), d, t));
  }
  auto node = std::unique_ptr<Node>(new Node(op, std::move(operands), std::move(attrs)));
  for (size_t i = 0; i < types.size(); ++i) {
    std::string base = i < names.size() && !names[i].empty() ? names[i] : "t";
    std::string name = uniqueName(base);
    node->results_.push_back(
        std::unique_ptr<Value>(new Value(node.get(), static_cast<int>(i), types[i], name)));
    by_name_[name] = node->results_.back().get();
  }
  nodes_.push_back(std::move(node));
  return nodes_.back().get();
}

std::vector<Node*> Graph::inputs() const {
  std::vector<Node*> r;
  for (const auto& n : nodes_)
    if (n->op() == OpKind::Input) r.push_back(n.get());
  return r;
}

Value* Graph::findValue(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::string Graph::uniqueName(const std::string& base) const {
  if (!by_name_.count(base)) return base;
  for (int i = 1;; ++i) {
    std::string n = fmt::format("{}.{}", base, i);
    if (!by_name_.count(n)) return n;
  }
}

void Graph::renameValue(Value* v, const std::string& name) {
  if (v->name_ == name) return;
  by_name_.erase(v->name_);
  v->name_ = uniqueName(name);
  by_name_[v->name_] = v;
}

void Graph::replaceAllUsesWith(Value* from, Value* to) {
  if (from == to) return;
  if (from->type() != to->type())
    throw IRError(fmt::format("replacing %{} ({}) with %{} ({}): types differ", from->name(),
                              from->type().str(), to->name(), to->type().str()));
  for (auto& n : nodes_)
    for (auto& o : n->operands_)
      if (o == from) o = to;
  for (auto& o : outputs_)
    if (o == from) o = to;
}

std::unordered_map<const Value*, std::vector<Node*>> Graph::computeUsers() const {
  std::unordered_map<const Value*, std::vector<Node*>> users;
  for (const auto& n : nodes_)
    for (Value* o : n->operands_) users[o].push_back(n.get());
  return users;
}

void Graph::erase(Node* n) {
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](auto& p) { return p.get() == n; });
  if (it == nodes_.end()) throw IRError("erase: node is not in this graph");
  for (auto& r : n->results_) by_name_.erase(r->name_);
  nodes_.erase(it);
}

void Graph::moveBefore(Node* n, const Node* anchor) {
  auto find = [&](const Node* x) {
    return std::find_if(nodes_.begin(), nodes_.end(), [&](auto& p) { return p.get() == x; });
  };
  auto from = find(n), to = find(anchor);
  if (from == nodes_.end() || to == nodes_.end())
    throw IRError("moveBefore: node is not in this graph");
  if (from < to) std::rotate(from, from + 1, to);  // n ends just before anchor
  else if (to < from) std::rotate(to, from, from + 1);
}

size_t Graph::removeDeadNodes() {
  std::unordered_set<const Value*> live(outputs_.begin(), outputs_.end());
  std::vector<bool> keep(nodes_.size(), false);
  // Walk backwards: a node is live if it is an input or any result is live.
  for (size_t i = nodes_.size(); i-- > 0;) {
    Node* n = nodes_[i].get();
    bool used = n->op() == OpKind::Input;
    for (auto& r : n->results_) used = used || live.count(r.get());
    if (!used) continue;
    keep[i] = true;
    for (Value* o : n->operands_) live.insert(o);
  }
  size_t removed = 0;
  std::vector<std::unique_ptr<Node>> kept;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (keep[i]) {
      kept.push_back(std::move(nodes_[i]));
    } else {
      for (auto& r : nodes_[i]->results_) by_name_.erase(r->name_);
      ++removed;
    }
  }
  nodes_ = std::move(kept);
  return removed;
}

void Graph::topoSort() {
  std::unordered_map<const Node*, size_t> index;
  for (size_t i = 0; i < nodes_.size(); ++i) index[nodes_[i].get()] = i;
  std::vector<uint8_t> state(nodes_.size(), 0);  // 0 new, 1 on stack, 2 placed
  std::vector<std::unique_ptr<Node>> order;
  order.reserve(nodes_.size());
  // Iterative DFS over operands, starting from each node in the current order.
  for (size_t root = 0; root < nodes_.size(); ++root) {
    if (state[root]) continue;
    std::vector<std::pair<size_t, size_t>> stack{{root, 0}};
    state[root] = 1;
    while (!stack.empty()) {
      auto& [i, next] = stack.back();
      Node* n = nodes_[i].get();
      if (next < n->operands_.size()) {
        Node* d = n->operands_[next++]->def();
        auto it = index.find(d);
        if (it == index.end()) throw IRError("topoSort: operand defined outside the graph");
        size_t j = it->second;
        if (state[j] == 1)
          throw IRError(fmt::format("topoSort: cycle through %{}", d->result()->name()));
        if (state[j] == 0) {
          state[j] = 1;
          stack.push_back({j, 0});
        }
        continue;
      }
      state[i] = 2;
      order.push_back(std::move(nodes_[i]));
      stack.pop_back();
    }
  }
  nodes_ = std::move(order);
}

std::unique_ptr<Graph> Graph::clone() const {
  auto g = std::make_unique<Graph>(name_);
  g->dims_ = dims_;
  std::unordered_map<const Value*, Value*> map;
  for (const auto& n : nodes_) {
    std::vector<Value*> ops;
    for (Value* o : n->operands_) ops.push_back(map.at(o));
    std::vector<std::string> names;
    std::vector<TensorType> types;
    for (auto& r : n->results_) {
      names.push_back(r->name_);
      types.push_back(r->type_);
    }
    Node* c = g->add(n->op_, ops, n->attrs_, names, types);
    for (size_t i = 0; i < n->results_.size(); ++i) map[n->results_[i].get()] = c->result(i);
  }
  for (Value* o : outputs_) g->outputs_.push_back(map.at(o));
  return g;
}

}  // namespace tgc
