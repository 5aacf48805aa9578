// Small helpers the rewriting passes share: reading constants and replacing nodes while
// keeping provenance names and topological order.
#pragma once

#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace tgc {

// The node's current order, so a pass can erase the node it is looking at.
std::vector<Node*> nodeSnapshot(const Graph& g);

// The single value every element of `v` has, when `v` is a constant whose elements are all
// equal (looking through broadcast and reshape, which keep that property). NaN never matches.
std::optional<double> splatValue(const Value* v);
// A constant node's value as a tensor of its type (a one-element value fills every element).
Tensor constantTensor(const Node& constant);

// Who reads each value of a graph, as it is when taken (a rewrite makes it stale): what the
// fusion passes ask to know that an intermediate is used only inside their pattern.
class Uses {
 public:
  explicit Uses(const Graph& g);
  // v is read by exactly one operand of one node and is not a graph output.
  bool single(const Value* v) const;
  // That node, else null.
  Node* soleUser(const Value* v) const { return single(v) ? users_.at(v)[0] : nullptr; }
  // The distinct nodes that read v (a node reading it twice counts once); nullopt when v is
  // a graph output.
  std::optional<std::set<Node*>> readers(const Value* v) const;

 private:
  std::unordered_map<const Value*, std::vector<Node*>> users_;
  std::unordered_set<const Value*> outputs_;
};

// Replaces whole nodes. Every method erases the replaced node; a node it creates takes the
// replaced node's place in the order, so dumps read in the same order before and after.
class Rewriter {
 public:
  explicit Rewriter(Graph& g) : g_(g) {}

  // Uses of n's single result (outputs included) go to `v`, and n is erased.
  void replace(Node* n, Value* v);
  // A new node (op, operands, attrs, declared types as for Graph::add) takes n's place and
  // its provenance name. Its operands must be defined before n.
  Value* replaceWithNew(Node* n, OpKind op, std::vector<Value*> operands, AttrMap attrs,
                        std::vector<TensorType> declared = {});
  // Records a change made in place (Node::setOperand).
  void noteChanged() { changed_ = true; }

  bool changed() const { return changed_; }

 private:
  Graph& g_;
  bool changed_ = false;
};

}  // namespace tgc
