// fuse-norms: LayerNorm and RMSNorm written out by hand become layer_norm and rms_norm, whose
// kernels read a row once per pass instead of one kernel per step, and whose gradients are
// layer_norm_grad (one library kernel) and rms_norm's rule. Runs before autodiff.
//
// Matched, from each normalization factor outwards, over the last axis with keepdims:
//   mu  = reduce_mean(x)                          (LayerNorm only)
//   d   = x - mu                                  (LayerNorm; RMSNorm: d = x)
//   v   = reduce_mean(d * d) or reduce_mean(pow(d, 2))
//   n   = d * rsqrt(v + eps), rsqrt(v + eps) * d, or d / sqrt(v + eps)   (eps a constant >= 0)
//   y   = n * g or g * n                           optional, g of shape [D] or [1, ..., 1, D]
//   z   = y + b or b + y                           optional, LayerNorm only, b likewise
// Every intermediate must be used only inside the pattern (d by the square and by n) and not
// be a graph output; all of one float dtype. A missing g or b becomes a constant 1 or 0.
// The result differs from the graph it replaces only in rounding: the kernels accumulate the
// row sums in the compute type (f32 or f64) in one pass each, as the unfused reductions do.
#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tgc {
namespace {

// reduce_mean over the last axis with keepdims: its operand.
Value* lastAxisMean(const Value* v) {
  const Node& n = *v->def();
  if (n.op() != OpKind::ReduceMean || !n.attrBool("keepdims")) return nullptr;
  const int64_t rank = n.operand(0)->type().rank();
  const std::vector<int64_t>& axes = n.attrInts("axes");
  if (axes.size() != 1 || (axes[0] != rank - 1 && axes[0] != -1)) return nullptr;
  return n.operand(0);
}

// Of a commutative binary node `n` of kind op: the operand other than `one`, or null.
Value* other(const Node& n, OpKind op, const Value* one) {
  if (n.op() != op) return nullptr;
  if (n.operand(0) == one) return n.operand(1);
  if (n.operand(1) == one) return n.operand(0);
  return nullptr;
}

// A per-feature operand: shape [D] or [1, ..., 1, D], of the dtype, against x [..., D].
bool perFeature(const Value* p, const TensorType& x) {
  const TensorType& t = p->type();
  if (t.dtype != x.dtype || t.rank() < 1 || t.rank() > x.rank() || t.shape.back() != x.shape.back())
    return false;
  for (int64_t i = 0; i + 1 < t.rank(); ++i)
    if (t.shape[static_cast<size_t>(i)] != 1) return false;
  return true;
}

struct Match {
  Value* x = nullptr;
  bool layer = false;  // LayerNorm (else RMSNorm)
  double eps = 0;
  Value *gamma = nullptr, *beta = nullptr;
  Node* last = nullptr;  // the node whose result the fused op replaces
  std::vector<Node*> chain;  // the pattern's other nodes, dead once `last` is replaced
};

// The normalization factor node f (rsqrt(v + eps), or sqrt(v + eps) under a division) and
// the node n that applies it.
std::optional<Match> matchAt(Node& n, const Uses& uses) {
  const TensorType& t = n.result()->type();
  if (!isFloat(t.dtype) || t.rank() < 1) return std::nullopt;
  Value *d = nullptr, *factorIn = nullptr;
  Node* factor = nullptr;
  if (n.op() == OpKind::Mul) {
    for (size_t side : {0u, 1u}) {
      Node& f = *n.operand(side)->def();
      if (f.op() == OpKind::Rsqrt && n.operand(1 - side)->type() == t) {
        if (uses.soleUser(f.result()) != &n) return std::nullopt;
        d = n.operand(1 - side);
        factor = &f;
        break;
      }
    }
  } else if (n.op() == OpKind::Div) {
    Node& f = *n.operand(1)->def();
    if (f.op() == OpKind::Sqrt && n.operand(0)->type() == t && uses.soleUser(f.result()) == &n) {
      d = n.operand(0);
      factor = &f;
    }
  }
  if (factor) factorIn = factor->operand(0);
  if (!d || uses.soleUser(factorIn) != factor) return std::nullopt;
  // v + eps
  Node& plus = *factorIn->def();
  if (plus.op() != OpKind::Add) return std::nullopt;
  Value* v = nullptr;
  std::optional<double> eps;
  for (size_t side : {0u, 1u})
    if (auto c = splatValue(plus.operand(1 - side))) {
      v = plus.operand(side);
      eps = c;
    }
  if (!v || !eps || !(*eps >= 0) || !std::isfinite(*eps) || uses.soleUser(v) != &plus) return std::nullopt;
  // v = mean(d * d) over the last axis
  Value* sq = lastAxisMean(v);
  if (!sq || uses.soleUser(sq) != v->def()) return std::nullopt;
  Node& square = *sq->def();
  const bool squares = square.op() == OpKind::Mul ? square.operand(0) == d && square.operand(1) == d
                      : square.op() == OpKind::Pow
                          ? square.operand(0) == d && splatValue(square.operand(1)) == 2.0
                          : false;
  if (!squares) return std::nullopt;

  Match m;
  m.eps = *eps;
  m.x = d;  // RMSNorm: x itself, which may have other users (a residual)
  Node& dn = *d->def();
  if (dn.op() == OpKind::Sub && dn.operand(0)->type() == t) {
    Value* mu = dn.operand(1);
    if (lastAxisMean(mu) == dn.operand(0) && uses.soleUser(mu) == &dn &&
        uses.readers(d) == std::set<Node*>{&square, &n}) {
      m.layer = true;
      m.x = dn.operand(0);
      m.chain = {mu->def(), &dn};
    }
  }
  m.chain.insert(m.chain.end(), {&square, v->def(), &plus, factor});
  m.last = &n;
  // * gamma
  if (Node* mul = uses.soleUser(n.result()); mul && mul->result()->type() == t) {
    Value* g = other(*mul, OpKind::Mul, n.result());
    if (g && g != n.result() && perFeature(g, t)) {
      m.gamma = g;
      m.chain.push_back(m.last);
      m.last = mul;
    }
  }
  // + beta (LayerNorm)
  if (m.layer)
    if (Node* add = uses.soleUser(m.last->result()); add && add->result()->type() == t) {
      Value* b = other(*add, OpKind::Add, m.last->result());
      if (b && b != m.last->result() && perFeature(b, t)) {
        m.beta = b;
        m.chain.push_back(m.last);
        m.last = add;
      }
    }
  return m;
}

void rewrite(Graph& g, const Match& m) {
  const TensorType& t = m.x->type();
  const int64_t D = t.shape.back();
  const std::string name = m.last->result()->name();
  std::vector<Node*> added;
  auto param = [&](Value* p, double fill, const char* suffix) {
    if (!p) {
      added.push_back(g.add(OpKind::Constant, {}, {{"value", std::vector<double>{fill}}}, {name + suffix},
                            {TensorType{t.dtype, {D}}}));
      return added.back()->result();
    }
    if (p->type().rank() == 1) return p;
    added.push_back(g.add(OpKind::Reshape, {p}, {{"shape", Shape{D}}}, {name + suffix}));
    return added.back()->result();
  };
  Value* gamma = param(m.gamma, 1.0, ".gamma");
  std::vector<Value*> operands{m.x, gamma};
  if (m.layer) operands.push_back(param(m.beta, 0.0, ".beta"));
  for (Node* n : added) g.moveBefore(n, m.last);
  Rewriter rw(g);
  rw.replaceWithNew(m.last, m.layer ? OpKind::LayerNorm : OpKind::RmsNorm, operands, {{"eps", m.eps}});
  // The chain's nodes, users first (each used only inside the pattern).
  for (auto it = m.chain.rbegin(); it != m.chain.rend(); ++it) g.erase(*it);
}

}  // namespace

bool runFuseNorms(Graph& g, PassContext&) {
  bool changed = false;
  for (bool again = true; again;) {
    again = false;
    const Uses uses(g);
    for (Node* n : nodeSnapshot(g)) {
      if (n->op() != OpKind::Mul && n->op() != OpKind::Div) continue;
      if (auto m = matchAt(*n, uses)) {
        rewrite(g, *m);  // invalidates `uses`: start over
        changed = again = true;
        break;
      }
    }
  }
  return changed;
}

}  // namespace tgc
