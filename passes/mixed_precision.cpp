// mixed-precision: autocast for bf16. Every f32 matmul becomes
//
//   %a.bf16 = cast(%a, bf16)
//   %b.bf16 = cast(%b, bf16)
//   %y.bf16 = matmul(%a.bf16, %b.bf16)  products summed in f32 (every backend), C rounded to bf16
//   %y      = cast(%y.bf16, f32)      the old value's name and users
//
// and nothing else changes: layer_norm, softmax, the fused ops (fused_attention and its softmax
// statistics, softmax_cross_entropy), every reduction, the losses and, after autodiff, the
// optimizer stay f32. Parameters stay f32 inputs (the master weights, what checkpoints store).
//
// buildTrainStep (precision = bf16) runs it before autodiff, so the backward is mixed too: the
// gradient of cast is a cast back, so dY reaches the matmul's two backward products as bf16
// (two bf16 GEMMs) and their results are cast to f32 before they are summed; the weight
// gradients the optimizer reads are f32. There the casts are made per use (castPerUse) so that
// every gradient sum happens in f32, and mergeCasts afterwards makes the forward's identical
// casts one again: the operands autodiff saves for the backward are single bf16 copies, half
// the bytes of the f32 values, and a weight is cast once per step.
//
// The registered pass (`tgc opt --passes=mixed-precision`, forward graphs) casts each value
// once and uses a widened bf16 value (the output of one bf16 matmul feeding another) directly.
// Matmuls of other dtypes (f64 for gradcheck, bf16 already) are left alone: it is idempotent.
#include "passes/mixed_precision.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tgc {

namespace {

bool isCastTo(const Node* n, DType to) {
  return n->op() == OpKind::Cast && n->result()->type().dtype == to;
}

class Autocast {
 public:
  Autocast(Graph& g, bool castPerUse) : g_(g), perUse_(castPerUse) {}

  int run() {
    int rewritten = 0;
    for (Node* n : nodeSnapshot(g_)) {
      if (n->op() != OpKind::MatMul || n->result()->type().dtype != DType::f32) continue;
      rewrite(n);
      ++rewritten;
    }
    return rewritten;
  }

 private:
  void rewrite(Node* mm) {
    Value* a = narrow(mm->operand(0), mm);
    Value* b = narrow(mm->operand(1), mm);
    const std::string name = mm->result()->name();
    Node* low = g_.add(OpKind::MatMul, {a, b}, mm->attrs(), {name + ".bf16"});
    g_.moveBefore(low, mm);
    Node* wide = g_.add(OpKind::Cast, {low->result()}, {{"dtype", DType::f32}}, {name});
    g_.moveBefore(wide, mm);
    g_.replaceAllUsesWith(mm->result(), wide->result());
    g_.erase(mm);
    g_.renameValue(wide->result(), name);  // free again now that the old matmul is gone
  }

  // v as bf16, placed before its first matmul (`user`), which keeps the copy's lifetime short.
  Value* narrow(Value* v, const Node* user) {
    const Node* d = v->def();
    if (!perUse_ && isCastTo(d, DType::f32) && d->operand(0)->type().dtype == DType::bf16)
      return d->operand(0);
    Value*& cached = casts_[v];
    if (cached && !perUse_) return cached;
    Node* c = g_.add(OpKind::Cast, {v}, {{"dtype", DType::bf16}}, {v->name() + ".bf16"});
    g_.moveBefore(c, user);
    cached = c->result();
    return cached;
  }

  Graph& g_;
  bool perUse_;
  std::unordered_map<Value*, Value*> casts_;
};

}  // namespace

int autocastMatmuls(Graph& g, bool castPerUse) { return Autocast(g, castPerUse).run(); }

int mergeCasts(Graph& g) {
  int removed = 0;
  std::map<std::pair<Value*, DType>, Value*> first;  // (operand, dtype) -> the first cast
  for (Node* n : nodeSnapshot(g)) {
    if (n->op() != OpKind::Cast) continue;
    Value* x = n->operand(0);
    const DType to = n->result()->type().dtype;
    Value* same = nullptr;
    if (isCastTo(x->def(), DType::f32) && x->def()->operand(0)->type().dtype == to &&
        isFloat(to) && dtypeSize(to) < dtypeSize(DType::f32))
      same = x->def()->operand(0);  // narrow(widen(y)) == y exactly
    else if (auto [it, fresh] = first.try_emplace({x, to}, n->result()); !fresh)
      same = it->second;
    if (!same) continue;
    g.replaceAllUsesWith(n->result(), same);
    g.erase(n);
    ++removed;
  }
  return removed;
}

namespace {

// +0 in every element (a where's -0 fill would differ in its sign in bf16 as written here).
bool isSplatZero(const Value* v) {
  auto c = splatValue(v);
  return c && *c == 0.0 && !std::signbit(*c);
}

// The bf16 cast among v's users, or nullptr.
Value* bf16CastOf(const Value* v, const std::unordered_map<const Value*, std::vector<Node*>>& users) {
  auto it = users.find(v);
  if (it == users.end()) return nullptr;
  for (Node* u : it->second)
    if (isCastTo(u, DType::bf16)) return u->result();
  return nullptr;
}

}  // namespace

int narrowReluGradients(Graph& g) {
  int rewritten = 0;
  Rewriter rw(g);
  // 1. gt(y, 0) -> gt(r, 0) with r the bf16 copy of y or of relu(y), for tests that only
  //    select gradients (every user a where(test, g, +0)): a forward mask keeps its f32 test.
  //    Matched first, rewritten after, so that no erased test is looked at.
  {
    const auto users = g.computeUsers();
    std::unordered_map<const Node*, size_t> pos;
    for (size_t i = 0; i < g.nodes().size(); ++i) pos[g.nodes()[i].get()] = i;
    auto selectsOnly = [&](const Value* test) {
      auto it = users.find(test);
      return it != users.end() && std::all_of(it->second.begin(), it->second.end(), [&](const Node* u) {
               return u->op() == OpKind::Where && u->operand(0) == test && u->operand(1) != test &&
                      isSplatZero(u->operand(2));
             });
    };
    std::vector<std::pair<Node*, Value*>> tests;  // (gt, its bf16 operand)
    for (Node* n : nodeSnapshot(g)) {
      if (n->op() != OpKind::Gt || !isSplatZero(n->operand(1))) continue;
      const Value* y = n->operand(0);
      if (y->type().dtype != DType::f32 || n->result()->type().shape != y->type().shape ||
          !selectsOnly(n->result()))
        continue;
      Value* r = bf16CastOf(y, users);
      if (!r)
        if (auto it = users.find(y); it != users.end())
          for (const Node* u : it->second)
            if (u->op() == OpKind::Relu && !r) r = bf16CastOf(u->result(), users);
      if (r && pos.at(r->def()) < pos.at(n)) tests.emplace_back(n, r);
    }
    for (auto [n, r] : tests) {
      Node* zero = g.add(OpKind::Constant, {}, {{"value", std::vector<double>{0.0}}},
                         {n->result()->name() + ".zero"}, {TensorType{DType::bf16, {}}});
      g.moveBefore(zero, n);
      rw.replaceWithNew(n, OpKind::Gt, {r, zero->result()}, {});
      ++rewritten;
    }
  }
  // 2. where(m, cast(x, f32), 0) -> cast(where(m, x, 0), f32) for a bf16 x: exact, and the
  //    cast to bf16 the gradient's matmuls read becomes cast(cast(w, f32), bf16) = w.
  std::set<Node*> widened;
  for (Node* n : nodeSnapshot(g)) {
    if (n->op() != OpKind::Where || !isSplatZero(n->operand(2))) continue;
    Node* wide = n->operand(1)->def();
    if (!isCastTo(wide, DType::f32) || wide->operand(0)->type().dtype != DType::bf16 ||
        n->operand(2)->type().rank() != 0)
      continue;
    const std::string name = n->result()->name();
    Node* zero = g.add(OpKind::Constant, {}, {{"value", std::vector<double>{0.0}}},
                       {name + ".zero"}, {TensorType{DType::bf16, {}}});
    Node* low = g.add(OpKind::Where, {n->operand(0), wide->operand(0), zero->result()}, {},
                      {name + ".bf16"});
    g.moveBefore(zero, n);
    g.moveBefore(low, n);
    rw.replaceWithNew(n, OpKind::Cast, {low->result()}, {{"dtype", DType::f32}});
    widened.insert(wide);
    ++rewritten;
  }
  // The widening casts the wheres read, when nothing else does (not a whole DCE: in a
  // training step the gradients are not outputs yet).
  const auto users = g.computeUsers();
  for (Node* n : widened)
    if (!users.count(n->result()) &&
        std::find(g.outputs().begin(), g.outputs().end(), n->result()) == g.outputs().end())
      g.erase(n);
  if (rewritten) mergeCasts(g);
  return rewritten;
}

bool runMixedPrecision(Graph& g, PassContext&) { return autocastMatmuls(g, /*castPerUse=*/true) > 0; }
bool runMergeCasts(Graph& g, PassContext&) { return mergeCasts(g) > 0; }
bool runNarrowReluGradients(Graph& g, PassContext&) { return narrowReluGradients(g) > 0; }

}  // namespace tgc
