// constant-fold: a node whose operands are all constants is evaluated with the reference
// interpreter and replaced by a constant carrying its provenance name.
//
// Limits keep graphs small and the pass fast:
//  - results are stored only as a splat (one value) or with at most ctx.fold_limit elements;
//  - operands and results are materialized only up to 16 * fold_limit elements, except on
//    splats: an elementwise op over splats is evaluated once on scalars, and reshape,
//    transpose, broadcast, slice and concat of equal splats are splats of the result type,
//    so broadcast(constant 0.5) to [512, 2048] folds for free;
//  - i64 results beyond 2^53 stay unfolded, since constants hold doubles.
// Source ops (input, constant, iota) are never folded, and iota does not count as a
// constant: a causal mask built from iota stays an expression that kernels generate
// instead of load. philox_uniform is left alone for the same reason. A node the
// interpreter rejects (integer division by zero, gather out of range) is left for run
// time, which reports it with the inputs in hand.
#include <cstring>

#include "ir/interpreter.h"
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tgc {
namespace {

constexpr int64_t kEvalFactor = 16;

bool allSplatsEqual(const Node& n, double& value) {
  std::optional<double> first;
  for (const Value* v : n.operands()) {
    auto s = splatValue(v);
    if (!s || (first && std::memcmp(&*s, &*first, sizeof(double)) != 0)) return false;
    first = s;
  }
  value = *first;
  return true;
}

bool allSplats(const Node& n) {
  for (const Value* v : n.operands())
    if (!splatValue(v)) return false;
  return true;
}

std::optional<std::vector<double>> constantValues(const Tensor& t, int64_t limit);

// The node's result as a one-value constant when its operands are splats and the op
// keeps that property; nullopt otherwise.
std::optional<std::vector<double>> foldSplat(const Node& n, const Interpreter& interp) {
  double v = 0;
  switch (n.info().fusion) {
    case FusionKind::Layout:  // reshape, transpose, broadcast, slice, concat
      if (!allSplatsEqual(n, v)) return std::nullopt;
      return std::vector<double>{v};
    case FusionKind::Elementwise: {
      if (!allSplats(n)) return std::nullopt;
      // The same op on rank-0 operands gives the value every element has.
      Graph scratch;
      std::vector<Value*> scalars;
      std::vector<Tensor> values;
      for (const Value* o : n.operands()) {
        TensorType t{o->type().dtype, {}};
        scalars.push_back(scratch.add(OpKind::Input, {}, {}, {}, {t})->result());
        values.emplace_back(t, std::vector<double>{*splatValue(o)});
      }
      Node* s = scratch.add(n.op(), scalars, n.attrs());
      std::vector<const Tensor*> ptrs;
      for (const auto& t : values) ptrs.push_back(&t);
      return constantValues(interp.evalNode(*s, ptrs).at(0), 1);
    }
    default: return std::nullopt;
  }
}

// Constant values for `t`: one value when all elements are bitwise equal, else all of them.
// nullopt when the tensor is too large to store or an i64 would not survive a double.
std::optional<std::vector<double>> constantValues(const Tensor& t, int64_t limit) {
  std::vector<double> vals = t.toDoubles();
  constexpr int64_t kExact = int64_t{1} << 53;  // every integer up to here is a double
  if (t.dtype() == DType::i64)
    for (int64_t i = 0; i < t.numel(); ++i)
      if (t.getI(i) > kExact || t.getI(i) < -kExact) return std::nullopt;
  bool splat = !vals.empty();
  for (double v : vals) splat = splat && std::memcmp(&v, &vals[0], sizeof(double)) == 0;
  if (splat) return std::vector<double>{vals[0]};
  if (t.numel() > limit) return std::nullopt;
  return vals;
}

std::optional<std::vector<double>> fold(const Node& n, const Interpreter& interp, int64_t limit) {
  if (auto s = foldSplat(n, interp)) return s;
  int64_t evalLimit = limit * kEvalFactor;
  if (n.result()->type().numel() > evalLimit) return std::nullopt;
  std::vector<Tensor> operands;
  for (const Value* v : n.operands()) {
    if (v->type().numel() > evalLimit) return std::nullopt;
    operands.push_back(constantTensor(*v->def()));
  }
  std::vector<const Tensor*> ptrs;
  for (const auto& t : operands) ptrs.push_back(&t);
  auto results = interp.evalNode(n, ptrs);
  return constantValues(results.at(0), limit);
}

bool foldable(const Node& n) {
  if (n.info().isSource() || n.op() == OpKind::PhiloxUniform || n.numResults() != 1)
    return false;
  for (const Value* v : n.operands())
    if (v->def()->op() != OpKind::Constant) return false;
  return true;
}

}  // namespace

bool runConstantFold(Graph& g, PassContext& ctx) {
  Interpreter interp;
  Rewriter rw(g);
  for (Node* n : nodeSnapshot(g)) {
    if (!foldable(*n)) continue;
    std::optional<std::vector<double>> vals;
    try {
      vals = fold(*n, interp, ctx.fold_limit);
    } catch (const IRError&) {
      continue;  // left for run time; see the comment at the top
    }
    if (!vals) continue;
    rw.replaceWithNew(n, OpKind::Constant, {}, {{"value", std::move(*vals)}},
                      {n->result()->type()});
  }
  return rw.changed();
}

}  // namespace tgc
