#include "passes/attention_mask.h"

#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "ir/interpreter.h"
#include "ir/tensor.h"
#include "passes/rewrite.h"

namespace tgc {
namespace {

// Conditions whose computation holds more elements than this are not evaluated.
constexpr int64_t kEvalLimit = int64_t{1} << 22;

double roundTo(DType dt, double v) {
  Tensor t(TensorType{dt, {}});
  t.setF(0, v);
  return t.getF(0);
}

// A float value that is `ifTrue` where `when` holds and `ifFalse` elsewhere; `shape` is the
// shape of `when` (its pred after the views).
struct Indicator {
  Conjunct when;
  double ifTrue, ifFalse;
  Shape shape;
};

double arith(OpKind op, double a, double b) {
  switch (op) {
    case OpKind::Add: return a + b;
    case OpKind::Sub: return a - b;
    case OpKind::Mul: return a * b;
    default: return a / b;
  }
}

// The two values v takes as a function of one bool condition, computed as the interpreter
// computes them (each op in double, rounded to its dtype), so a NaN (0 * -inf) shows.
std::optional<Indicator> indicator(const Value* v) {
  const Node& n = *v->def();
  const DType dt = v->type().dtype;
  if (!isFloat(dt)) return std::nullopt;
  switch (n.op()) {
    case OpKind::Cast: {
      Value* x = n.operand(0);
      if (x->type().dtype == DType::boolean) return Indicator{{x, false, {}}, 1, 0, x->type().shape};
      auto in = indicator(x);
      if (!in) return std::nullopt;
      return Indicator{in->when, roundTo(dt, in->ifTrue), roundTo(dt, in->ifFalse), in->shape};
    }
    case OpKind::Where: {
      auto a = splatValue(n.operand(1)), b = splatValue(n.operand(2));
      if (!a || !b) return std::nullopt;
      Value* c = n.operand(0);
      return Indicator{{c, false, {}}, roundTo(dt, *a), roundTo(dt, *b), c->type().shape};
    }
    case OpKind::Neg: {
      auto in = indicator(n.operand(0));
      if (in) {
        in->ifTrue = -in->ifTrue;
        in->ifFalse = -in->ifFalse;
      }
      return in;
    }
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul:
    case OpKind::Div:
      for (size_t side : {0u, 1u}) {
        auto c = splatValue(n.operand(1 - side));
        auto in = c ? indicator(n.operand(side)) : std::nullopt;
        if (!in) continue;
        auto f = [&](double x) {
          return roundTo(dt, side == 0 ? arith(n.op(), x, *c) : arith(n.op(), *c, x));
        };
        return Indicator{in->when, f(in->ifTrue), f(in->ifFalse), in->shape};
      }
      return std::nullopt;
    case OpKind::Reshape:
    case OpKind::Broadcast: {
      auto in = indicator(n.operand(0));
      // The view can be replayed on the condition only if nothing broadcast it on the way.
      if (!in || in->shape != n.operand(0)->type().shape) return std::nullopt;
      in->when.views.push_back(&n);
      in->shape = v->type().shape;
      return in;
    }
    default: return std::nullopt;
  }
}

bool masks(double penalty) { return penalty <= kMaskPenalty; }  // false for NaN

}  // namespace

std::optional<std::pair<Value*, double>> scaleStep(const Node& n) {
  if (n.op() != OpKind::Mul && n.op() != OpKind::Div) return std::nullopt;
  for (size_t side : {0u, 1u}) {
    if (n.op() == OpKind::Div && side == 1) break;  // c / x is not a scale
    Value* x = n.operand(side);
    auto c = splatValue(n.operand(1 - side));
    if (x->type() != n.result()->type() || !c || !std::isfinite(*c) || *c == 0) continue;
    return std::make_pair(x, n.op() == OpKind::Div ? 1 / *c : *c);
  }
  return std::nullopt;
}

namespace {
// sign * p as a penalty added to the scores s (nullptr: not known here).
std::optional<MaskStep> signedPenalty(const Value* p, double sign, Value* s) {
  auto in = indicator(p);
  if (!in) return std::nullopt;
  const double onTrue = sign * in->ifTrue, onFalse = sign * in->ifFalse;
  if (onTrue == 0 && masks(onFalse)) return MaskStep{s, in->when, onFalse};
  if (onFalse == 0 && masks(onTrue)) {
    Conjunct c = in->when;
    c.negated = !c.negated;
    return MaskStep{s, c, onTrue};
  }
  return std::nullopt;
}
}  // namespace

std::optional<MaskStep> maskPenalty(const Value* p) { return signedPenalty(p, 1, nullptr); }

std::optional<MaskStep> maskStep(const Node& n) {
  const TensorType& t = n.result()->type();
  switch (n.op()) {
    case OpKind::Where:
      for (size_t side : {1u, 2u}) {
        Value* s = n.operand(side);
        auto k = splatValue(n.operand(3 - side));
        if (s->type() == t && k && masks(*k)) return MaskStep{s, {n.operand(0), side == 2, {}}, *k};
      }
      return std::nullopt;
    case OpKind::Add:
    case OpKind::Sub:
      for (size_t side : {0u, 1u}) {
        if (n.op() == OpKind::Sub && side == 1) break;  // s - P only
        Value* s = n.operand(side);
        if (s->type() != t) continue;
        if (auto m = signedPenalty(n.operand(1 - side), n.op() == OpKind::Sub ? -1 : 1, s)) return m;
      }
      return std::nullopt;
    default: return std::nullopt;
  }
}

void splitConjuncts(const Conjunct& allowed, std::vector<Conjunct>& out) {
  const Node& n = *allowed.pred->def();
  if (allowed.views.empty()) {
    auto part = [&](size_t i, bool negated) { splitConjuncts({n.operand(i), negated, {}}, out); };
    if (n.op() == OpKind::LogicalNot) return part(0, !allowed.negated);
    // a and b; not (a or b) = not a and not b.
    if (n.op() == (allowed.negated ? OpKind::LogicalOr : OpKind::LogicalAnd)) {
      part(0, allowed.negated);
      return part(1, allowed.negated);
    }
  }
  out.push_back(allowed);
}

ConstantMask classifyConstantMask(const Graph& g, const Conjunct& c, int64_t tq, int64_t tk) {
  // The nodes the condition is computed from: no inputs, and small enough to evaluate.
  std::unordered_set<const Node*> cone;
  std::vector<const Node*> stack{c.pred->def()};
  int64_t elements = 0;
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!cone.insert(n).second) continue;
    if (n->op() == OpKind::Input || n->numResults() != 1) return ConstantMask::NotConstant;
    elements += n->result()->type().numel();
    if (elements > kEvalLimit) return ConstantMask::NotConstant;
    for (const Value* o : n->operands()) stack.push_back(o->def());
  }
  Graph sub("mask");
  std::unordered_map<const Value*, Value*> copy;
  for (const auto& n : g.nodes()) {
    if (!cone.count(n.get())) continue;
    std::vector<Value*> ops;
    for (const Value* o : n->operands()) ops.push_back(copy.at(o));
    copy[n->result()] =
        sub.add(n->op(), ops, n->attrs(), {n->result()->name()}, {n->result()->type()})->result();
  }
  Value* v = copy.at(c.pred);
  for (const Node* view : c.views) v = sub.add(view->op(), {v}, view->attrs(), {"view"})->result();
  if (c.negated) v = sub.add(OpKind::LogicalNot, {v}, {}, {"not"})->result();
  sub.setOutputs({v});
  Tensor t;
  try {
    t = Interpreter().run(sub, {}).at(0);
  } catch (const IRError&) {
    return ConstantMask::NotConstant;  // fails at run time too (say, a division by zero)
  }

  bool allTrue = true;
  for (int64_t e = 0; e < t.numel() && allTrue; ++e) allTrue = t.getI(e) != 0;
  if (allTrue) return ConstantMask::AllTrue;
  const Shape& s = t.shape();
  if (tq != tk || s.size() < 2 || s[s.size() - 2] != tq || s.back() != tk) return ConstantMask::Other;
  for (int64_t e = 0; e < t.numel(); ++e) {
    const int64_t j = e % tk, i = (e / tk) % tq;
    if ((t.getI(e) != 0) != (j <= i)) return ConstantMask::Other;
  }
  return ConstantMask::Causal;
}

}  // namespace tgc
