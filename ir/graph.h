// Graph IR: SSA values produced by nodes, kept in a topological order.
#pragma once

#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ir/attr.h"
#include "ir/dtype.h"
#include "ir/op_table.h"

namespace tgc {

class Node;
class Graph;

// One SSA value: result `index` of node `def`. Its name is its provenance
// ("enc.2.attn.softmax") and is unique in the graph.
class Value {
 public:
  Node* def() const { return def_; }
  int index() const { return index_; }
  const TensorType& type() const { return type_; }
  const std::string& name() const { return name_; }

 private:
  friend class Graph;
  friend class Node;
  Value(Node* def, int index, TensorType type, std::string name)
      : def_(def), index_(index), type_(std::move(type)), name_(std::move(name)) {}
  Node* def_;
  int index_;
  TensorType type_;
  std::string name_;
};

class Node {
 public:
  OpKind op() const { return op_; }
  const OpInfo& info() const { return opInfo(op_); }
  const std::vector<Value*>& operands() const { return operands_; }
  Value* operand(size_t i) const { return operands_.at(i); }
  size_t numResults() const { return results_.size(); }
  Value* result(size_t i = 0) const { return results_.at(i).get(); }
  const AttrMap& attrs() const { return attrs_; }

  // Typed attribute access with the op table's defaults.
  int64_t attrInt(std::string_view n) const { return tgc::attrInt(op_, attrs_, n); }
  double attrFloat(std::string_view n) const { return tgc::attrFloat(op_, attrs_, n); }
  bool attrBool(std::string_view n) const { return tgc::attrBool(op_, attrs_, n); }
  const std::string& attrString(std::string_view n) const { return tgc::attrString(op_, attrs_, n); }
  const std::vector<int64_t>& attrInts(std::string_view n) const { return tgc::attrInts(op_, attrs_, n); }
  const std::vector<double>& attrFloats(std::string_view n) const { return tgc::attrFloats(op_, attrs_, n); }
  DType attrDType(std::string_view n) const { return tgc::attrDType(op_, attrs_, n); }

  // Rewires operand i (types must match; the verifier checks).
  void setOperand(size_t i, Value* v) { operands_.at(i) = v; }

 private:
  friend class Graph;
  Node(OpKind op, std::vector<Value*> operands, AttrMap attrs)
      : op_(op), operands_(std::move(operands)), attrs_(std::move(attrs)) {}
  OpKind op_;
  std::vector<Value*> operands_;
  std::vector<std::unique_ptr<Value>> results_;
  AttrMap attrs_;
};

// A node that could not be built: an op applied to operands its shape rule rejects.
// The message names the op, the provenance name and the shapes.
struct IRError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Graph {
 public:
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::string& name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }

  // Named dims bound when the graph was made (B=16, S=64); informational, kept in order.
  const std::vector<std::pair<std::string, int64_t>>& dims() const { return dims_; }
  void setDims(std::vector<std::pair<std::string, int64_t>> d) { dims_ = std::move(d); }

  // Nodes in topological order (operands before users).
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  size_t size() const { return nodes_.size(); }

  // Creates a node at the end. `names` gives each result's provenance name (made unique;
  // empty means "t"). `declared` is required for source ops and, when given for others,
  // must equal the inferred types. Throws IRError naming op, name and shapes.
  Node* add(OpKind op, std::vector<Value*> operands, AttrMap attrs = {},
            std::vector<std::string> names = {}, std::vector<TensorType> declared = {});

  // The graph's results, in order.
  const std::vector<Value*>& outputs() const { return outputs_; }
  void setOutputs(std::vector<Value*> outs) { outputs_ = std::move(outs); }
  void addOutput(Value* v) { outputs_.push_back(v); }
  void setOutput(size_t i, Value* v) { outputs_.at(i) = v; }

  // Input nodes in graph order.
  std::vector<Node*> inputs() const;

  Value* findValue(const std::string& name) const;
  // `base` if free, else base.1, base.2, ...
  std::string uniqueName(const std::string& base) const;
  void renameValue(Value* v, const std::string& name);  // made unique

  // Every use of `from` (operands and outputs) becomes `to`; types must match.
  void replaceAllUsesWith(Value* from, Value* to);
  // Removes nodes whose results have no uses and are not outputs, repeatedly; keeps inputs.
  // Returns how many were removed.
  size_t removeDeadNodes();
  // Removes one node; its results must be unused.
  void erase(Node* n);
  // Moves n to just before `anchor` in the node order, so a rewrite can put a replacement
  // where the node it replaces was; keeping the order topological is the caller's job.
  void moveBefore(Node* n, const Node* anchor);
  // Stable reorder so every node follows its operands (after rewrites appended nodes).
  void topoSort();
  // users[v] = nodes using v as an operand (a node using v twice appears twice).
  std::unordered_map<const Value*, std::vector<Node*>> computeUsers() const;

  // A deep copy: same names, ops, attributes and order.
  std::unique_ptr<Graph> clone() const;

 private:
  std::string name_;
  std::vector<std::pair<std::string, int64_t>> dims_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> outputs_;
  std::unordered_map<std::string, Value*> by_name_;
};

// "matmul %enc.0.scores (f32[2,3], f32[4,5])": how errors name a node.
std::string describeNode(const Node& n);

}  // namespace tgc
