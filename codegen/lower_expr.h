// The heart of lowering: the Kernel IR expression of a graph value at an index.
//
// A group's values are never materialized between its nodes: the value of an elementwise
// (or index-remapping) node at an index is an expression of its operands' values at the
// corresponding indices, down to loads from the buffers of the values the group reads.
// Templates (codegen/lower.cpp, lower_reduce.cpp, ...) build the loop nests and call at().
//
// Views: at() indexes each value through its *view* shape. By default that is the value's
// own shape; collapse() may merge adjacent dims of a purely elementwise sub-tree (dims that
// every value either has in full or broadcasts) so loops are fewer and longer.
#pragma once

#include <array>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "codegen/kernel_ir.h"
#include "ir/graph.h"

namespace tgc::codegen::lower {

using kir::ExprP;
using Stmts = std::vector<kir::StmtP>;
using Index = std::vector<ExprP>;

// The type arithmetic runs in: bf16 and f16 compute in f32; everything else in itself.
DType computeType(DType storage);

[[noreturn]] void unsupported(const Node& n, const std::string& why);

// A constant of a compute type (floats, ints, bool).
ExprP constOf(double v, DType type);

class Ctx {
 public:
  // extraOutputs: members' values the kernel stores besides the anchor's (lower.h).
  explicit Ctx(const std::vector<const Node*>& group,
               std::vector<const Value*> extraOutputs = {});

  kir::Kernel& kernel() { return k_; }
  std::vector<const Value*>& values() { return values_; }
  const std::vector<const Node*>& group() const { return group_; }
  const Node& anchor() const { return *group_.back(); }
  const std::vector<const Value*>& extraOutputs() const { return extraOutputs_; }
  bool inGroup(const Value* v) const { return producers_.count(v->def()) > 0; }

  // The buffer holding v: a Read buffer for a value the group reads (made on first use).
  int inputBuffer(const Value* v);
  // Declares a result buffer (Write, or ReadWrite when the kernel accumulates into it).
  int outputBuffer(const Value* v, kir::Access access = kir::Access::Write);

  int newVar(const std::string& name, DType type) { return k_.addVar(name, type); }
  ExprP var(int v) const { return kir::varRef(k_, v); }
  ExprP num(int64_t v) const { return kir::constInt(v, DType::i64); }  // an i64 constant

  // The shape at() indexes v with (see the file comment).
  const Shape& view(const Value* v) const;

  // Merges adjacent dims of `root`'s elementwise sub-tree where allowed; barrier[d] forbids
  // merging root dims d and d+1. Sets the views of every value of the sub-tree and returns,
  // for each root dim, the collapsed dim it went to. Without merging (a sub-tree with an
  // index-remapping op) the views stay the values' shapes and dims map to themselves.
  std::vector<int> collapse(const Value* root, const std::vector<bool>& barrier);

  // v's value at idx, in computeType(v's dtype). idx may be longer than v's view rank:
  // as in numpy broadcasting, it is aligned from the right and size-1 dims read index 0.
  // Statements the value needs first (locals of philox rounds) are appended to `pre`.
  ExprP at(const Value* v, const Index& idx, Stmts& pre);
  // v's value at row-major flat position f of its own shape: a direct load when v is read
  // from memory (no index arithmetic), else at() of the unraveled index.
  ExprP atFlat(const Value* v, ExprP f, Stmts& pre);
  // Row-major flat offset of a multi-index over a shape (size-1 dims contribute nothing).
  ExprP flat(const Index& idx, const Shape& shape) const;
  // at()'s memo is keyed by the index expressions; call this when a new loop body starts
  // so values computed into locals in another body are not reused.
  void newBody() {
    memo_.clear();
    quadWords_.clear();
  }

  // Whether the group draws random numbers (has a philox_uniform).
  bool draws() const;
  // Quad loops (lowerPointwise): while set, a body computes the elements 4j .. 4j + 3 of
  // its innermost dim, lane t indexed by lanes[t] (= 4j + t, these very expressions). A
  // draw whose last index is one of the lanes, over a last dim that is a multiple of 4 (or
  // its only dim), then runs one Philox call for its four lanes and gives each its word.
  void setQuad(ExprP j, std::array<ExprP, 4> lanes) {
    quadJ_ = std::move(j);
    quadLanes_ = std::move(lanes);
  }
  void clearQuad() { setQuad(nullptr, {}); }

  // A rough count of scalar operations per element of the group (for costPerIteration).
  int64_t opsPerElement() const;

 private:
  ExprP compute(const Node& n, const Index& idx, Stmts& pre);
  ExprP elementwise(const Node& n, const Index& idx, Stmts& pre);
  ExprP philox(const Node& n, const Index& idx, Stmts& pre);
  // The four output words of Philox4x32-10 for the i64 counter and seed, in i64 locals.
  std::array<int, 4> philoxWords(ExprP counter, ExprP seed, Stmts& pre);
  Index project(const Index& idx, const Shape& shape) const;
  // The multi-index of row-major flat position f in shape (divisions and remainders).
  Index unravel(ExprP f, const Shape& shape) const;

  std::vector<const Node*> group_;
  std::vector<const Value*> extraOutputs_;
  std::unordered_set<const Node*> producers_;
  kir::Kernel k_;
  std::vector<const Value*> values_;
  std::unordered_map<const Value*, int> buffers_;
  std::unordered_map<const Value*, Shape> views_;
  std::map<std::pair<const Value*, std::vector<const kir::Expr*>>, ExprP> memo_;
  // One shared constant 0 for the indices of size-1 dims, so equal indices are the same
  // expressions (the memos compare pointers).
  ExprP zero_ = kir::constInt(0, DType::i64);
  ExprP quadJ_;
  std::array<ExprP, 4> quadLanes_;
  // The words of each quad draw of the current body: (node, quad index) -> locals.
  std::map<std::pair<const Node*, std::vector<const kir::Expr*>>, std::array<int, 4>>
      quadWords_;
};

// The kernel name for a group: the last node's first result's name as a C identifier.
std::string kernelName(const Node& last);

}  // namespace tgc::codegen::lower
