// fuse-ffn: the backward of Linear -> ReLU -> dropout -> Linear reads only the dropout's
// output D, so neither the ReLU's input y nor the keep mask is saved for the backward (nor
// recomputed in it). Runs after autodiff, on the joint graph.
//
// The forward (the frontend's dropout, ReLU before it):
//   R = relu(y)
//   D = where(keep, mul(R, s), 0)          s a splat constant >= 1 (1 / (1 - p)), either
//                                          operand order; keep any bool of D's shape
// and the backward autodiff emits for y:
//   dy = where(gt(y, 0), mul(where(keep, X, 0), c), 0)      (gt(R, 0) is accepted too)
// become
//   dy = where(gt(D, 0), mul(X, c), 0)
//
// Exact, bit for bit: with s >= 1, R * s > 0 exactly when y > 0 (NaN and -0 included:
// relu(NaN) = NaN fails both tests), so D > 0 exactly when keep and y > 0; where either
// fails both forms give +0 (+0 * c = +0 for a finite c), and where both hold both give
// X * c, the same multiply. X is whatever reaches D (a sum if D has several users), so that
// may vary; R and mul(R, s) must have no other users, since their gradients would then be
// sums that the form above does not show (and a ReLU gradient that is a sum does not match).
// GELU, dropout before the activation, a keep mask that differs between the directions,
// s < 1 and signed or non-zero fill constants are left alone. The gradient nodes the rewrite
// leaves unused are removed.
#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tgc {
namespace {

using Users = std::unordered_map<const Value*, std::vector<Node*>>;

bool isPositiveZero(const Value* v) {
  auto c = splatValue(v);
  return c && *c == 0.0 && !std::signbit(*c);
}

// The operand of binary n other than `v`, or nullptr (also when both are v).
Value* otherOperand(const Node& n, const Value* v) {
  if (n.operand(0) == v && n.operand(1) != v) return n.operand(1);
  if (n.operand(1) == v && n.operand(0) != v) return n.operand(0);
  return nullptr;
}

struct Match {
  Node* reluGrad;  // where(gt(y, 0), mul(where(keep, X, 0), c), 0)
  Value* d;        // the dropout's output
  Value* x;        // the gradient reaching D
  Value* c;        // the backward's scale constant
};

class Matcher {
 public:
  Matcher(const Graph& g, const Users& users) : users_(users) {
    outputs_.insert(g.outputs().begin(), g.outputs().end());
  }

  std::optional<Match> match(Node* w) const {
    // dy = where(gt(a, 0), g2, +0), a = y or R.
    if (w->op() != OpKind::Where || !isPositiveZero(w->operand(2))) return {};
    const Node* test = w->operand(0)->def();
    if (test->op() != OpKind::Gt || !isZeroOf(test->operand(1))) return {};
    const Node* relu = reluOf(test->operand(0));
    if (!relu) return {};
    const Value* r = relu->result();
    // g2 = mul(g1, c), g1 = where(keep, X, +0).
    const Node* g2 = w->operand(1)->def();
    if (g2->op() != OpKind::Mul || g2->result()->type() != r->type()) return {};
    Value* g1 = nullptr;
    Value* c = nullptr;
    for (int i = 0; i < 2 && !g1; ++i) {
      const Node* cand = g2->operand(i)->def();
      Value* k = g2->operand(1 - i);
      if (cand->op() == OpKind::Where && isPositiveZero(cand->operand(2)) && finiteSplat(k)) {
        g1 = g2->operand(i);
        c = k;
      }
    }
    if (!g1) return {};
    const Node* g1n = g1->def();
    Value* keep = g1n->operand(0);
    // The forward: S = mul(R, s), D = where(keep, S, 0), R and S used by nothing else.
    Node* scaled = soleUser(r);
    if (!scaled || scaled->op() != OpKind::Mul || scaled->result()->type() != r->type()) return {};
    const Value* factor = otherOperand(*scaled, r);
    auto s = factor ? splatValue(factor) : std::nullopt;
    if (!s || !(*s >= 1) || std::isinf(*s)) return {};
    Node* drop = soleUser(scaled->result());
    if (!drop || drop->op() != OpKind::Where || drop->operand(0) != keep ||
        drop->operand(1) != scaled->result() || !isZeroOf(drop->operand(2)) ||
        drop->result()->type() != r->type() || g1n->operand(1)->type() != r->type())
      return {};
    return Match{w, drop->result(), g1n->operand(1), c};
  }

 private:
  // relu(y) where v is y (with the ReLU among y's users) or the ReLU's result.
  const Node* reluOf(const Value* v) const {
    if (v->def()->op() == OpKind::Relu) return v->def();
    for (const Node* u : usersOf(v))
      if (u->op() == OpKind::Relu) return u;
    return nullptr;
  }
  static bool isZeroOf(const Value* v) {
    auto c = splatValue(v);
    return c && *c == 0.0;
  }
  static bool finiteSplat(const Value* v) {
    auto c = splatValue(v);
    return c && std::isfinite(*c);
  }
  const std::vector<Node*>& usersOf(const Value* v) const {
    static const std::vector<Node*> none;
    auto it = users_.find(v);
    return it == users_.end() ? none : it->second;
  }
  // The single user of v, not counting tests gt(v, 0): a bool takes no gradient, and the
  // backward's ReLU test may read R.
  Node* soleUser(const Value* v) const {
    if (outputs_.count(v)) return nullptr;
    Node* only = nullptr;
    for (Node* u : usersOf(v)) {
      if (u->op() == OpKind::Gt && isZeroOf(u->operand(1))) continue;
      if (only) return nullptr;
      only = u;
    }
    return only;
  }

  const Users& users_;
  std::unordered_set<const Value*> outputs_;
};

// Erases the nodes in `work`, and then their operands' producers, while they are left
// without users (inputs and constants stay: dce's job).
void eraseDead(Graph& g, std::vector<Node*> work) {
  Users users = g.computeUsers();
  std::unordered_set<const Value*> outputs(g.outputs().begin(), g.outputs().end());
  std::unordered_set<const Node*> erased;
  while (!work.empty()) {
    Node* n = work.back();
    work.pop_back();
    if (erased.count(n) || n->op() == OpKind::Input || n->op() == OpKind::Constant ||
        n->numResults() != 1 || outputs.count(n->result()) || !users[n->result()].empty())
      continue;
    for (Value* o : n->operands()) {
      auto& us = users[o];
      if (auto it = std::find(us.begin(), us.end(), n); it != us.end()) us.erase(it);
      work.push_back(o->def());
    }
    erased.insert(n);
    g.erase(n);
  }
}

}  // namespace

bool runFuseFFN(Graph& g, PassContext&) {
  std::vector<Match> matches;
  {
    const Users users = g.computeUsers();
    Matcher matcher(g, users);
    for (Node* n : nodeSnapshot(g))
      if (auto m = matcher.match(n)) matches.push_back(*m);
  }
  std::vector<Node*> replaced;
  for (const Match& m : matches) {
    Node* w = m.reluGrad;
    replaced.push_back(w->operand(0)->def());
    replaced.push_back(w->operand(1)->def());
    const std::string& base = w->result()->name();
    Node* test = g.add(OpKind::Gt, {m.d, w->operand(2)}, {}, {base + ".kept"});
    Node* value = g.add(OpKind::Mul, {m.x, m.c}, {}, {base + ".scaled"});
    g.moveBefore(test, w);
    g.moveBefore(value, w);
    w->setOperand(0, test->result());
    w->setOperand(1, value->result());
  }
  eraseDead(g, std::move(replaced));
  g.topoSort();  // D may come after the ReLU gradient in a hand-written order
  return !matches.empty();
}

}  // namespace tgc
