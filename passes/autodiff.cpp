#include "passes/autodiff.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>
#include <unordered_map>
#include <unordered_set>

#include "ir/builder.h"
#include "passes/passes.h"

namespace tgc {
namespace {

class Differentiator {
 public:
  explicit Differentiator(Graph& g) : g_(g), b_(g) {}

  std::vector<Value*> run(Value* loss, const std::vector<Value*>& wrt) {
    if (!isFloat(loss->type().dtype) || loss->type().numel() != 1)
      throw IRError(fmt::format("autodiff: the loss %{} must be a single float value, got {}",
                                loss->name(), loss->type().str()));
    markNeeded(wrt);
    // Walk the forward nodes (those present before we append) backwards.
    std::vector<Node*> forward;
    for (const auto& n : g_.nodes()) forward.push_back(n.get());
    Builder::Scope scope(b_, "grad");
    adjoint_[loss] = b_.constant(loss->type(), {1.0}, loss->name());
    for (size_t i = forward.size(); i-- > 0;) {
      Node* n = forward[i];
      // Multi-result ops (fused_attention: out, lse) are differentiated through result 0;
      // their other results are saved for the backward op, not differentiable outputs.
      for (size_t r = 1; r < n->numResults(); ++r)
        if (adjoint_.count(n->result(r)))
          throw IRError(fmt::format("autodiff: no gradient flows through result {} of {}", r,
                                    describeNode(*n)));
      auto it = adjoint_.find(n->result());
      if (it == adjoint_.end()) continue;
      differentiate(*n, it->second);
    }
    std::vector<Value*> grads;
    std::unordered_set<const Value*> named;
    for (Value* w : wrt) {
      auto it = adjoint_.find(w);
      Value* gw = it != adjoint_.end() ? it->second : zeros(w->type(), w->name());
      // Name each gradient after its parameter, unless one value serves two parameters.
      if (named.insert(gw).second) g_.renameValue(gw, "grad." + w->name());
      grads.push_back(gw);
    }
    return grads;
  }

 private:
  // Only values on a path to some `wrt` need gradients; skipping the rest keeps the backward
  // graph small (e.g. no gradient for the positional-encoding constants).
  void markNeeded(const std::vector<Value*>& wrt) {
    std::unordered_set<const Value*> targets(wrt.begin(), wrt.end());
    for (const auto& n : g_.nodes()) {
      bool need = false;
      for (Value* o : n->operands()) need = need || needed_.count(o);
      for (size_t r = 0; r < n->numResults(); ++r) {
        Value* v = n->result(r);
        if ((need || targets.count(v)) && isFloat(v->type().dtype)) needed_.insert(v);
      }
    }
  }

  bool wants(Value* v) const { return needed_.count(v) && isFloat(v->type().dtype); }

  // Adds `grad` into v's adjoint, reducing broadcast dims first.
  void accumulate(Value* v, Value* grad) {
    if (!wants(v)) return;
    grad = unbroadcast(grad, v->type().shape);
    if (grad->type().dtype != v->type().dtype) grad = b_.cast(grad, v->type().dtype, v->name());
    auto [it, fresh] = adjoint_.emplace(v, grad);
    if (!fresh) it->second = b_.add(it->second, grad, v->name());
  }

  Value* unbroadcast(Value* gr, const Shape& shape) {
    const Shape& gs = gr->type().shape;
    if (gs == shape) return gr;
    size_t lead = gs.size() - shape.size();
    std::vector<int64_t> axes;
    for (size_t i = 0; i < gs.size(); ++i)
      if (i < lead || (shape[i - lead] == 1 && gs[i] != 1)) axes.push_back(static_cast<int64_t>(i));
    Value* s = axes.empty() ? gr : b_.reduce(OpKind::ReduceSum, gr, axes, false, "unbroadcast");
    return s->type().shape == shape ? s : b_.reshape(s, shape, "unbroadcast");
  }

  Value* scalar(Value* like, double v) { return b_.scalar(like->type().dtype, v, "c"); }
  Value* zeros(const TensorType& t, const std::string& name) {
    return b_.constant(t, {0.0}, name + ".zero");
  }
  Value* zerosLike(Value* v) { return zeros(v->type(), v->name()); }

  // Reduced-axes helpers for reductions: the keepdims shape of the result.
  static Shape keptShape(const Shape& in, const std::vector<int64_t>& axes) {
    Shape s = in;
    for (int64_t a : axes) s[normalizeAxis(a, static_cast<int64_t>(in.size()))] = 1;
    return s;
  }
  Value* expandBack(Value* g, const Node& n) {  // reduction result grad -> input shape
    const Shape& in = n.operand(0)->type().shape;
    Value* k = b_.reshape(g, keptShape(in, n.attrInts("axes")), "expand");
    return k->type().shape == in ? k : b_.broadcast(k, in, "expand");
  }

  void differentiate(const Node& n, Value* g) {
    const std::string& nm = n.result()->name();
    Value* y = n.result();
    auto x = [&](size_t i) { return n.operand(i); };
    Builder::Scope s(b_, nm);
    switch (n.op()) {
      case OpKind::Input:
      case OpKind::Constant:
      case OpKind::Iota:
      case OpKind::PhiloxUniform:  // random bits do not depend on anything differentiable
      case OpKind::LogicalNot:
      case OpKind::Eq:
      case OpKind::Ne:
      case OpKind::Lt:
      case OpKind::Le:
      case OpKind::Gt:
      case OpKind::Ge:
      case OpKind::LogicalAnd:
      case OpKind::LogicalOr:
        return;
      case OpKind::Neg: return accumulate(x(0), b_.neg(g));
      case OpKind::Abs: {
        // d|x| = sign(x); 0 at x == 0 (the subgradient torch also picks).
        Value* zero = scalar(g, 0);
        Value* pos = b_.binary(OpKind::Gt, x(0), zero);
        Value* neg = b_.binary(OpKind::Lt, x(0), zero);
        Value* r = b_.where(pos, g, b_.where(neg, b_.neg(g), zero));
        return accumulate(x(0), r);
      }
      case OpKind::Exp: return accumulate(x(0), b_.mul(g, y));
      case OpKind::Log: return accumulate(x(0), b_.div(g, x(0)));
      case OpKind::Sqrt: return accumulate(x(0), b_.div(b_.mul(g, scalar(g, 0.5)), y));
      case OpKind::Rsqrt:  // d x^-1/2 = -1/2 x^-3/2 = -1/2 * y / x
        return accumulate(x(0), b_.mul(g, b_.div(b_.mul(y, scalar(g, -0.5)), x(0))));
      case OpKind::Tanh:
        return accumulate(x(0), b_.mul(g, b_.sub(scalar(g, 1), b_.mul(y, y))));
      case OpKind::Erf: {
        Value* e = b_.exp(b_.neg(b_.mul(x(0), x(0))));
        return accumulate(x(0), b_.mul(g, b_.mul(e, scalar(g, 2 / std::sqrt(std::numbers::pi)))));
      }
      case OpKind::Sigmoid:
        return accumulate(x(0), b_.mul(g, b_.mul(y, b_.sub(scalar(g, 1), y))));
      case OpKind::Silu: {  // sg (1 + x (1 - sg)), sg = sigmoid(x)
        Value* sg = b_.unary(OpKind::Sigmoid, x(0));
        Value* one = scalar(g, 1);
        return accumulate(x(0), b_.mul(g, b_.mul(sg, b_.add(one, b_.mul(x(0), b_.sub(one, sg))))));
      }
      case OpKind::Relu:  // relu'(0) = 0, deliberately (as torch)
        return accumulate(x(0), b_.where(b_.binary(OpKind::Gt, x(0), scalar(g, 0)), g, scalar(g, 0)));
      case OpKind::Gelu: return accumulate(x(0), b_.mul(g, geluDerivative(x(0), n.attrString("approximate") == "tanh")));
      case OpKind::Cast:
        if (isFloat(x(0)->type().dtype)) accumulate(x(0), b_.cast(g, x(0)->type().dtype));
        return;
      case OpKind::Add:
        accumulate(x(0), g);
        return accumulate(x(1), g);
      case OpKind::Sub:
        accumulate(x(0), g);
        if (wants(x(1))) accumulate(x(1), b_.neg(g));
        return;
      case OpKind::Mul:
        if (wants(x(0))) accumulate(x(0), b_.mul(g, x(1)));
        if (wants(x(1))) accumulate(x(1), b_.mul(g, x(0)));
        return;
      case OpKind::Div:
        if (wants(x(0))) accumulate(x(0), b_.div(g, x(1)));
        if (wants(x(1))) accumulate(x(1), b_.neg(b_.div(b_.mul(g, y), x(1))));
        return;
      case OpKind::Pow:
        if (wants(x(0))) {  // b * a^(b-1)
          Value* d = b_.mul(x(1), b_.binary(OpKind::Pow, x(0), b_.sub(x(1), scalar(g, 1))));
          accumulate(x(0), b_.mul(g, d));
        }
        if (wants(x(1))) {  // a^b * log(a), taken as 0 where a <= 0
          Value* pos = b_.binary(OpKind::Gt, x(0), scalar(g, 0));
          Value* safe = b_.where(pos, x(0), scalar(g, 1));
          accumulate(x(1), b_.mul(g, b_.where(pos, b_.mul(y, b_.log(safe)), scalar(g, 0))));
        }
        return;
      case OpKind::Maximum:
      case OpKind::Minimum: {
        // The winner takes the gradient; ties split it equally (as torch does).
        OpKind beats = n.op() == OpKind::Maximum ? OpKind::Gt : OpKind::Lt;
        Value* one = scalar(g, 1), *half = scalar(g, 0.5), *zero = scalar(g, 0);
        Value* tie = b_.binary(OpKind::Eq, x(0), x(1));
        Value* wa = b_.where(b_.binary(beats, x(0), x(1)), one, b_.where(tie, half, zero));
        Value* wb = b_.where(b_.binary(beats, x(1), x(0)), one, b_.where(tie, half, zero));
        if (wants(x(0))) accumulate(x(0), b_.mul(g, wa));
        if (wants(x(1))) accumulate(x(1), b_.mul(g, wb));
        return;
      }
      case OpKind::Where: {
        Value* zero = scalar(g, 0);
        if (wants(x(1))) accumulate(x(1), b_.where(x(0), g, zero));
        if (wants(x(2))) accumulate(x(2), b_.where(x(0), zero, g));
        return;
      }
      case OpKind::ReduceSum: return accumulate(x(0), expandBack(g, n));
      case OpKind::ReduceMean: {
        int64_t count = x(0)->type().numel() / std::max<int64_t>(1, y->type().numel());
        return accumulate(x(0), b_.div(expandBack(g, n), scalar(g, static_cast<double>(count))));
      }
      case OpKind::ReduceMax: {
        // Ties share the gradient equally.
        Value* ymax = expandBack(y, n);
        Value* hit = b_.cast(b_.binary(OpKind::Eq, x(0), ymax), g->type().dtype);
        Value* count = b_.reduce(OpKind::ReduceSum, hit, n.attrInts("axes"), true);
        Value* share = b_.div(hit, count);
        return accumulate(x(0), b_.mul(expandBack(g, n), share));
      }
      case OpKind::Softmax: {  // dx = y * (g - sum(g*y))
        int64_t axis = n.attrInt("axis");
        Value* dot = b_.reduce(OpKind::ReduceSum, b_.mul(g, y), {axis}, true);
        return accumulate(x(0), b_.mul(y, b_.sub(g, dot)));
      }
      case OpKind::LogSoftmax: {  // dx = g - softmax(x) * sum(g)
        int64_t axis = n.attrInt("axis");
        Value* sum = b_.reduce(OpKind::ReduceSum, g, {axis}, true);
        return accumulate(x(0), b_.sub(g, b_.mul(b_.exp(y), sum)));
      }
      case OpKind::LayerNorm: return layerNormGrad(n, g);
      case OpKind::RmsNorm: return rmsNormGrad(n, g);
      case OpKind::MatMul: return matmulGrad(n, g);
      case OpKind::Reshape: return accumulate(x(0), b_.reshape(g, x(0)->type().shape));
      case OpKind::Transpose: {
        const auto& perm = n.attrInts("perm");
        std::vector<int64_t> inv(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
        return accumulate(x(0), b_.transpose(g, inv));
      }
      case OpKind::Broadcast: return accumulate(x(0), g);  // accumulate reduces it back
      case OpKind::Slice: return sliceGrad(n, g);
      case OpKind::Concat: {
        int64_t axis = normalizeAxis(n.attrInt("axis"), y->type().rank());
        int64_t at = 0;
        for (Value* o : n.operands()) {
          int64_t len = o->type().shape[axis];
          if (wants(o)) accumulate(o, b_.slice(g, axis, at, at + len));
          at += len;
        }
        return;
      }
      case OpKind::Gather:
        return accumulate(x(0), b_.scatterAdd(x(1), g, x(0)->type().shape[0]));
      case OpKind::ScatterAdd: return accumulate(x(1), b_.gather(g, x(0)));
      case OpKind::FusedAttention: {
        // One backward op that recomputes the probabilities from the saved lse (result 1);
        // the mask, seed and offset operands are passed through, not differentiated. A bias
        // that needs a gradient gets dbias, the fourth result (bias_grad).
        const bool hasBias = n.attrBool("has_bias");
        Value* bias = hasBias ? x(3 + (n.attrBool("has_mask") ? 1 : 0)) : nullptr;
        const bool biasGrad = bias && wants(bias);
        if (!wants(x(0)) && !wants(x(1)) && !wants(x(2)) && !biasGrad) return;
        std::vector<Value*> ops = {x(0), x(1), x(2), y, n.result(1), g};
        for (size_t i = 3; i < n.operands().size(); ++i) ops.push_back(x(i));
        AttrMap attrs = n.attrs();
        std::vector<std::string> names{b_.qualify("dq"), b_.qualify("dk"), b_.qualify("dv")};
        if (biasGrad) {
          attrs["bias_grad"] = true;
          names.push_back(b_.qualify("dbias"));
        }
        Node* grad = g_.add(OpKind::FusedAttentionGrad, ops, attrs, names);
        for (size_t i = 0; i < 3; ++i) accumulate(x(i), grad->result(i));
        if (biasGrad) accumulate(bias, grad->result(3));
        return;
      }
      case OpKind::SoftmaxCrossEntropy: {
        // Gradient of result 0 only; result 1 (lse) is saved for the backward kernel.
        Value* d = b_.op(OpKind::SoftmaxCrossEntropyGrad, {x(0), x(1), n.result(1), g},
                         {{"smoothing", n.attrFloat("smoothing")}}, "dlogits");
        return accumulate(x(0), d);
      }
      // The backward ops themselves: no second derivatives.
      case OpKind::FusedAttentionGrad:
      case OpKind::SoftmaxCrossEntropyGrad:
      case OpKind::LayerNormGrad: case OpKind::QuantizedMatmul:
      case OpKind::DynamicUpdateSlice:  // (decoding caches: inference only)
        break;
    }
    throw IRError(fmt::format("autodiff: no gradient rule for {}", describeNode(n)));
  }

  Value* geluDerivative(Value* x, bool tanhApprox) {
    Value* half = scalar(x, 0.5), *one = scalar(x, 1);
    if (!tanhApprox) {  // Phi(x) + x * phi(x)
      Value* cdf = b_.mul(half, b_.add(one, b_.unary(OpKind::Erf, b_.mul(x, scalar(x, 1 / std::numbers::sqrt2)))));
      Value* pdf = b_.mul(b_.exp(b_.mul(b_.mul(x, x), scalar(x, -0.5))),
                          scalar(x, 1 / std::sqrt(2 * std::numbers::pi)));
      return b_.add(cdf, b_.mul(x, pdf));
    }
    // 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2), t = tanh(k (x + c x^3))
    const double k = std::sqrt(2 / std::numbers::pi), c = 0.044715;
    Value* x2 = b_.mul(x, x);
    Value* inner = b_.mul(scalar(x, k), b_.add(x, b_.mul(scalar(x, c), b_.mul(x2, x))));
    Value* t = b_.unary(OpKind::Tanh, inner);
    Value* dinner = b_.mul(scalar(x, k), b_.add(one, b_.mul(scalar(x, 3 * c), x2)));
    Value* left = b_.mul(half, b_.add(one, t));
    Value* right = b_.mul(b_.mul(half, x), b_.mul(b_.sub(one, b_.mul(t, t)), dinner));
    return b_.add(left, right);
  }

  // One layer_norm_grad node (dx, dgamma, dbeta): its kernel recomputes mean and rstd per row
  // instead of saving them, and reads x and dy once.
  void layerNormGrad(const Node& n, Value* g) {
    Value* x = n.operand(0), *gamma = n.operand(1), *beta = n.operand(2);
    if (!wants(x) && !wants(gamma) && !wants(beta)) return;
    const std::string name = b_.qualify("layer_norm_grad");
    Node* d = b_.graph().add(OpKind::LayerNormGrad, {x, gamma, g}, {{"eps", n.attrFloat("eps")}},
                             {name + ".dx", name + ".dgamma", name + ".dbeta"});
    accumulate(x, d->result(0));
    accumulate(gamma, d->result(1));
    accumulate(beta, d->result(2));
  }

  // rms_norm: with r = rsqrt(mean(x^2) + eps) per row and xn = x * r, y = xn * gamma gives
  // dgamma = sum over rows of dy * xn and dx = r * (dn - xn * mean(dn * xn)), dn = dy * gamma:
  // row reductions and elementwise ops, which the generic fusion groups into kernels.
  void rmsNormGrad(const Node& n, Value* g) {
    Value* x = n.operand(0), *gamma = n.operand(1);
    if (!wants(x) && !wants(gamma)) return;
    const int64_t last = x->type().rank() - 1;
    Value* meanSq = b_.reduce(OpKind::ReduceMean, b_.mul(x, x), {last}, true);
    Value* r = b_.unary(OpKind::Rsqrt, b_.add(meanSq, scalar(x, n.attrFloat("eps"))));
    Value* xn = b_.mul(x, r);
    accumulate(gamma, b_.mul(g, xn));  // summed over the rows by unbroadcast
    if (!wants(x)) return;
    Value* dn = b_.mul(g, gamma);
    Value* proj = b_.reduce(OpKind::ReduceMean, b_.mul(dn, xn), {last}, true);
    accumulate(x, b_.mul(r, b_.sub(dn, b_.mul(xn, proj))));
  }

  void matmulGrad(const Node& n, Value* g) {
    Value* a = n.operand(0), *bm = n.operand(1);
    bool ta = n.attrBool("transpose_a"), tb = n.attrBool("transpose_b");
    // With op(A) = A or A^T: d op(A) = g op(B)^T and d op(B) = op(A)^T g, written so that no
    // explicit transpose is materialized.
    if (wants(a)) {
      Value* da = !ta ? b_.matmul(g, bm, false, !tb, "da") : b_.matmul(bm, g, tb, true, "da");
      accumulate(a, da);
    }
    if (wants(bm)) {
      Value* db = !tb ? b_.matmul(a, g, !ta, false, "db") : b_.matmul(g, a, true, ta, "db");
      accumulate(bm, db);
    }
  }

  void sliceGrad(const Node& n, Value* g) {
    Value* x = n.operand(0);
    if (!wants(x)) return;
    const Shape& xs = x->type().shape;
    int64_t axis = normalizeAxis(n.attrInt("axis"), x->type().rank());
    int64_t start = n.attrInt("start"), end = n.attrInt("end"), step = n.attrInt("step");
    int64_t dim = xs[axis];
    if (step == 1) {  // zeros before, g, zeros after
      std::vector<Value*> parts;
      auto zerosOf = [&](int64_t len) {
        Shape s = xs;
        s[axis] = len;
        return zeros(TensorType{g->type().dtype, s}, x->name());
      };
      if (start > 0) parts.push_back(zerosOf(start));
      parts.push_back(g);
      if (dim - end > 0) parts.push_back(zerosOf(dim - end));
      return accumulate(x, parts.size() == 1 ? g : b_.concat(parts, axis));
    }
    // Strided: move the axis to the front and scatter rows start, start+step, ... back.
    std::vector<int64_t> perm{axis};
    for (int64_t i = 0; i < x->type().rank(); ++i)
      if (i != axis) perm.push_back(i);
    std::vector<int64_t> inv(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
    int64_t count = g->type().shape[axis];
    std::vector<double> rows;
    for (int64_t i = 0; i < count; ++i) rows.push_back(static_cast<double>(start + i * step));
    Value* idx = b_.constant(TensorType{DType::i64, {count}}, rows, "rows");
    Value* front = b_.scatterAdd(idx, b_.transpose(g, perm), dim);
    accumulate(x, b_.transpose(front, inv));
  }

  Graph& g_;
  Builder b_;
  std::unordered_set<const Value*> needed_;
  std::unordered_map<const Value*, Value*> adjoint_;
};

}  // namespace

std::vector<Value*> appendGradients(Graph& g, Value* loss, const std::vector<Value*>& wrt) {
  return Differentiator(g).run(loss, wrt);
}

bool runAutodiff(Graph& g, PassContext&) {
  if (g.outputs().empty()) throw IRError("autodiff: the graph has no outputs (the loss first)");
  const std::vector<Value*> params = trainableParameters(g);
  if (params.empty()) throw IRError("autodiff: the graph has no input of role param");
  std::vector<Value*> outs = g.outputs();
  for (Value* gr : appendGradients(g, outs.front(), params)) outs.push_back(gr);
  g.setOutputs(outs);
  return true;
}

std::vector<Value*> trainableParameters(const Graph& g) {
  std::vector<Value*> r;
  for (Node* n : g.inputs())
    if (n->attrString("role") == "param") r.push_back(n->result());
  return r;
}

}  // namespace tgc
