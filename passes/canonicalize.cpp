// canonicalize: local rewrites that remove work without changing results.
//
//   x*1, 1*x, x+0, 0+x, x-0, x/1 -> x   when the constant is a splat of that value and the
//                                       result type is x's (no broadcast grows the shape)
//   neg(neg(x))                 -> x
//   transpose(transpose(x))     -> one transpose with the composed perm; an identity perm
//                                  disappears
//   reshape(reshape(x))         -> reshape(x);  reshape to x's own shape -> x
//   broadcast(broadcast(x))     -> broadcast(x); broadcast to x's own shape -> x
//   cast to x's own dtype       -> x
//   slice that keeps the whole axis -> x
//
// x + 0 -> x is the usual compiler choice even though IEEE gives -0 + 0 = +0: the sign of a
// zero never changes what a Transformer computes. A rewritten node takes the provenance
// name of the value it replaces; forwarding to an existing value keeps that value's name.
// Nodes left without users (the constant 1 in x*1) are dce's to remove.
#include <numeric>

#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tgc {
namespace {

enum class Outcome { None, Modified, Replaced };

bool isSplatOf(const Value* v, double want) {
  auto s = splatValue(v);
  return s && *s == want;
}

// The identity element an operand must be for op(x, e) or op(e, x) to equal x.
struct Identity {
  double value;
  bool left_ok;  // e op x == x (false for sub and div)
};

std::optional<Identity> identityOf(OpKind op) {
  switch (op) {
    case OpKind::Add: return Identity{0.0, true};
    case OpKind::Sub: return Identity{0.0, false};
    case OpKind::Mul: return Identity{1.0, true};
    case OpKind::Div: return Identity{1.0, false};
    default: return std::nullopt;
  }
}

Outcome simplifyBinary(Node* n, Rewriter& rw) {
  auto id = identityOf(n->op());
  if (!id) return Outcome::None;
  Value* a = n->operand(0);
  Value* b = n->operand(1);
  const TensorType& out = n->result()->type();
  if (a->type() == out && isSplatOf(b, id->value)) {
    rw.replace(n, a);
    return Outcome::Replaced;
  }
  if (id->left_ok && b->type() == out && isSplatOf(a, id->value)) {
    rw.replace(n, b);
    return Outcome::Replaced;
  }
  return Outcome::None;
}

Outcome simplifyTranspose(Node* n, Rewriter& rw) {
  Value* x = n->operand(0);
  std::vector<int64_t> perm = n->attrInts("perm");
  Node* inner = x->def();
  if (inner->op() == OpKind::Transpose) {
    // Result dim i is inner dim perm[i], which is source dim innerPerm[perm[i]].
    const auto& innerPerm = inner->attrInts("perm");
    for (auto& p : perm) p = innerPerm[static_cast<size_t>(p)];
    x = inner->operand(0);
  }
  std::vector<int64_t> identity(perm.size());
  std::iota(identity.begin(), identity.end(), 0);
  if (perm == identity) {
    rw.replace(n, x);
    return Outcome::Replaced;
  }
  if (x == n->operand(0)) return Outcome::None;
  rw.replaceWithNew(n, OpKind::Transpose, {x}, {{"perm", perm}});
  return Outcome::Replaced;
}

// reshape and broadcast: an inner op of the same kind can be skipped (the outer one fixes
// the final shape), and an op that keeps the type does nothing.
Outcome simplifyShapeOp(Node* n, Rewriter& rw) {
  Value* x = n->operand(0);
  if (x->type() == n->result()->type()) {
    rw.replace(n, x);
    return Outcome::Replaced;
  }
  if (x->def()->op() == n->op()) {
    n->setOperand(0, x->def()->operand(0));
    rw.noteChanged();
    return Outcome::Modified;
  }
  return Outcome::None;
}

Outcome simplifySameType(Node* n, Rewriter& rw) {
  Value* x = n->operand(0);
  if (x->type() != n->result()->type()) return Outcome::None;
  rw.replace(n, x);
  return Outcome::Replaced;
}

Outcome simplify(Node* n, Rewriter& rw) {
  switch (n->op()) {
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul:
    case OpKind::Div: return simplifyBinary(n, rw);
    case OpKind::Neg:
      if (n->operand(0)->def()->op() != OpKind::Neg) return Outcome::None;
      rw.replace(n, n->operand(0)->def()->operand(0));
      return Outcome::Replaced;
    case OpKind::Transpose: return simplifyTranspose(n, rw);
    case OpKind::Reshape:
    case OpKind::Broadcast: return simplifyShapeOp(n, rw);
    case OpKind::Cast:
    case OpKind::Slice: return simplifySameType(n, rw);
    default: return Outcome::None;
  }
}

}  // namespace

bool runCanonicalize(Graph& g, PassContext&) {
  Rewriter rw(g);
  // Topological order: operands are already simplified when their users are looked at.
  for (Node* n : nodeSnapshot(g)) {
    Outcome o;
    do o = simplify(n, rw);
    while (o == Outcome::Modified);
  }
  return rw.changed();
}

}  // namespace tgc
