// mixed-precision: autocast for bf16. Every f32 matmul becomes
//
//   %a.bf16 = cast(%a, bf16)          one cast per source value (a weight used by several
//   %b.bf16 = cast(%b, bf16)          matmuls, tied embeddings, is cast once per step)
//   %y.bf16 = matmul(%a.bf16, %b.bf16)  products summed in f32 (every backend), C rounded to bf16
//   %y      = cast(%y.bf16, f32)      the old value's name and users
//
// and nothing else changes: layer_norm, softmax, the fused ops (fused_attention and its softmax
// statistics, softmax_cross_entropy), every reduction, the losses and, after autodiff, the
// optimizer stay f32. Parameters stay f32 inputs (the master weights, what checkpoints store).
//
// It runs before autodiff (buildTrainStep with precision = bf16), so the backward is mixed too:
// the gradient of cast is a cast back, so dY reaches the matmul's two backward products as
// bf16 (two bf16 GEMMs), their results are cast to f32 before they are accumulated, and the
// weight gradients the optimizer reads are f32. The operands autodiff saves for the backward
// are the bf16 casts: half the bytes of the f32 values.
//
// A cast(x_bf16, f32) operand is widening and so exact: it is looked through instead of being
// narrowed again (the output of one bf16 matmul feeding another). Matmuls of other dtypes
// (f64 for gradcheck, bf16 already) are left alone, so the pass is idempotent.
#include <unordered_map>

#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tgc {

namespace {

class Autocast {
 public:
  explicit Autocast(Graph& g) : g_(g) {}

  bool run() {
    for (Node* n : nodeSnapshot(g_)) {
      if (n->op() != OpKind::MatMul || n->result()->type().dtype != DType::f32) continue;
      rewrite(n);
    }
    return changed_;
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
    changed_ = true;
  }

  // v as bf16: the value a widening cast started from, or one cast per value, placed before
  // its first matmul (`user`), which keeps the bf16 copy's lifetime short.
  Value* narrow(Value* v, const Node* user) {
    const Node* d = v->def();
    if (d->op() == OpKind::Cast && d->operand(0)->type().dtype == DType::bf16) return d->operand(0);
    auto [it, fresh] = casts_.try_emplace(v, nullptr);
    if (fresh) {
      Node* c = g_.add(OpKind::Cast, {v}, {{"dtype", DType::bf16}}, {v->name() + ".bf16"});
      g_.moveBefore(c, user);
      it->second = c->result();
    }
    return it->second;
  }

  Graph& g_;
  std::unordered_map<Value*, Value*> casts_;
  bool changed_ = false;
};

}  // namespace

bool runMixedPrecision(Graph& g, PassContext&) { return Autocast(g).run(); }

}  // namespace tgc
