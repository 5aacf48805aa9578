// fuse-activations: GELU written out by hand, 0.5 x (1 + erf(x / sqrt(2))) or the tanh form
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), becomes gelu (approximate "none" or
// "tanh"), SiLU, x * sigmoid(x) or x / (1 + exp(-x)), becomes silu, and 1 / (1 + exp(-x))
// becomes sigmoid: ops the GEMM
// epilogues fold into the product before them as they fold the builtins, and whose gradient
// is one expression. Runs before autodiff.
//
// Recognized by what the nodes compute, not by how they are written (the factors in any
// order, x^3 as x * x * x or pow(x, 3), / sqrt(2) or * 0.7071..., truncated constants): for
// each float value x, the elementwise nodes that depend on x and splat constants alone form
// its cone; a node r of the cone that reads a tanh, erf, exp or sigmoid of the cone, and whose cone
// nodes below it are used only inside it, is evaluated in float64 at 48 points in
// [-12, 12]. When it agrees with one of the two GELUs, SiLU or sigmoid to 1e-7 relative (below f32's
// rounding) everywhere, r becomes that op of x. Such a function of one variable, built of
// a handful of these ops, that agrees at 48 points is the function; what the replacement can
// change is the last bits, as another order of the same operations would.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ir/builder.h"
#include "ir/interpreter.h"
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tgc {
namespace {

constexpr int kPoints = 48;
constexpr double kTolerance = 1e-7;

std::vector<double> samplePoints() {
  std::vector<double> xs;
  for (int i = 0; i < kPoints; ++i) xs.push_back(-12.0 + 24.0 * i / (kPoints - 1));
  return xs;
}

double geluErf(double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }
double geluTanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }

bool transcendental(const Node* n) {
  const OpKind k = n->op();
  return k == OpKind::Tanh || k == OpKind::Erf || k == OpKind::Exp || k == OpKind::Sigmoid;
}

// A splat constant operand: a constant node (through reshapes and broadcasts).
bool isSplatConstant(const Value* v) { return splatValue(v).has_value(); }

// The cone of x: elementwise nodes of x's type whose operands are x, cone nodes or splat
// constants, in graph order (`position` gives each node's place in it).
std::vector<Node*> coneOf(const Value* x, const Uses& uses,
                          const std::unordered_map<const Node*, size_t>& position) {
  // Everything reachable from x through elementwise users of its type, then filtered in
  // graph order (a node's operands come before it).
  std::set<std::pair<size_t, Node*>> reach;
  std::vector<const Value*> work{x};
  while (!work.empty()) {
    const Value* v = work.back();
    work.pop_back();
    for (Node* u : uses.readers(v).value_or(std::set<Node*>{}))
      if (u->info().fusion == FusionKind::Elementwise && u->numResults() == 1 &&
          u->result()->type() == x->type() && reach.insert({position.at(u), u}).second)
        work.push_back(u->result());
  }
  std::vector<Node*> cone;
  std::unordered_set<const Value*> in{x};
  for (const auto& [pos, n] : reach) {
    bool ok = true;
    for (const Value* o : n->operands()) ok = ok && (in.count(o) || isSplatConstant(o));
    if (ok) {
      cone.push_back(n);
      in.insert(n->result());
    }
  }
  return cone;
}

// The nodes of `cone` that r depends on, r included, in graph order.
std::vector<Node*> below(const std::vector<Node*>& cone, Node* r) {
  std::unordered_set<const Value*> need{r->result()};
  std::vector<Node*> out;
  for (auto it = cone.rbegin(); it != cone.rend(); ++it) {
    Node* n = *it;
    if (!need.count(n->result())) continue;
    out.push_back(n);
    for (const Value* o : n->operands()) need.insert(o);
  }
  return std::vector<Node*>(out.rbegin(), out.rend());
}

// f(x) of the nodes `sub` (r last) at the sample points, in float64 on the interpreter.
std::optional<std::vector<double>> evaluate(const std::vector<Node*>& sub, const Value* x) {
  Graph g("probe");
  Builder b(g);
  const std::vector<double> xs = samplePoints();
  Value* in = b.input("x", TensorType{DType::f64, {kPoints}});
  std::unordered_map<const Value*, Value*> map{{x, in}};
  try {
    for (const Node* n : sub) {
      std::vector<Value*> ops;
      for (const Value* o : n->operands()) {
        auto it = map.find(o);
        ops.push_back(it != map.end() ? it->second : b.scalar(DType::f64, *splatValue(o)));
      }
      map[n->result()] = g.add(n->op(), ops, n->attrs())->result();
    }
    g.setOutputs({map.at(sub.back()->result())});
    Tensor t(TensorType{DType::f64, {kPoints}});
    for (int i = 0; i < kPoints; ++i) t.setF(i, xs[static_cast<size_t>(i)]);
    const std::vector<Tensor> out = Interpreter().run(g, {{"x", t}});
    std::vector<double> ys;
    for (int i = 0; i < kPoints; ++i) ys.push_back(out[0].getF(i));
    return ys;
  } catch (const std::exception&) {
    return std::nullopt;  // not evaluable this way (an op that needs other operands)
  }
}

bool agrees(const std::vector<double>& ys, double (*f)(double)) {
  const std::vector<double> xs = samplePoints();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = f(xs[i]);
    if (!(std::fabs(ys[i] - want) <= kTolerance * std::max(std::fabs(want), 1e-3))) return false;
  }
  return true;
}

// Whether every node of sub but r is used only by nodes of sub (and is no graph output).
bool selfContained(const std::vector<Node*>& sub, const Node* r, const Uses& uses) {
  const std::unordered_set<const Node*> inside(sub.begin(), sub.end());
  for (const Node* n : sub) {
    if (n == r) continue;
    const auto readers = uses.readers(n->result());
    if (!readers) return false;
    for (const Node* u : *readers)
      if (!inside.count(u)) return false;
  }
  return true;
}

bool fuseOne(Graph& g) {
  const Uses uses(g);
  std::unordered_map<const Node*, size_t> position;
  std::vector<Value*> candidates;
  for (const auto& n : g.nodes()) {
    position[n.get()] = position.size();
    for (size_t i = 0; i < n->numResults(); ++i)
      if (isFloat(n->result(i)->type().dtype) && n->op() != OpKind::Constant) candidates.push_back(n->result(i));
  }
  for (Value* x : candidates) {
    const std::vector<Node*> cone = coneOf(x, uses, position);
    if (std::none_of(cone.begin(), cone.end(), transcendental)) continue;
    for (auto it = cone.rbegin(); it != cone.rend(); ++it) {  // the largest function first
      Node* r = *it;
      const std::vector<Node*> sub = below(cone, r);
      if (sub.size() < 2 || std::none_of(sub.begin(), sub.end(), transcendental) ||
          !selfContained(sub, r, uses))
        continue;
      const auto ys = evaluate(sub, x);
      if (!ys) continue;
      Rewriter rw(g);
      if (agrees(*ys, silu)) {
        rw.replaceWithNew(r, OpKind::Silu, {x}, {});
      } else if (agrees(*ys, sigmoid)) {
        rw.replaceWithNew(r, OpKind::Sigmoid, {x}, {});
      } else {
        const char* form = agrees(*ys, geluErf) ? "none" : agrees(*ys, geluTanh) ? "tanh" : nullptr;
        if (!form) continue;
        rw.replaceWithNew(r, OpKind::Gelu, {x}, {{"approximate", std::string(form)}});
      }
      for (auto n = sub.rbegin(); n != sub.rend(); ++n)
        if (*n != r) g.erase(*n);
      return true;
    }
  }
  return false;
}

}  // namespace

bool runFuseActivations(Graph& g, PassContext&) {
  bool changed = false;
  while (fuseOne(g)) changed = true;
  return changed;
}

}  // namespace tgc
