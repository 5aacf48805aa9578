// The evaluator's tensors: Graph IR nodes, numbers as operands, parameters as graph inputs,
// and dropout drawn from (seed, step).
#include "frontend/eval.h"

#include <fmt/format.h>

#include <cmath>

namespace tgc::fe {

void Evaluator::requireTensorContext(Loc loc, const char* what) {
  if (!g_)
    fail(loc, fmt::format("tensor operation '{}' outside a graph: tensors exist only while a "
                          "graph is lowered", what));
  if (no_tensors_ > 0)
    fail(loc, fmt::format("tensor operation '{}' in a module body: a module body runs once, "
                          "outside any graph; compute tensors in a method", what));
}

std::string Evaluator::irName(const std::string& base) const {
  const std::string& p = frames_.back()->prefix;
  return p.empty() ? base : p + "." + base;
}

Val Evaluator::addNode(Loc loc, OpKind k, std::vector<Value*> operands, AttrMap attrs,
                       const std::string& name, std::optional<TensorType> declared) {
  requireTensorContext(loc, std::string(opName(k)).c_str());
  if (g_->size() >= kMaxGraphNodes) {
    d_.error(loc, fmt::format("the graph has more than {} nodes", kMaxGraphNodes));
    throw EvalFatal{};
  }
  try {
    std::vector<TensorType> decl;
    if (declared) decl.push_back(*declared);
    Node* n = g_->add(k, std::move(operands), std::move(attrs), {irName(name)}, decl);
    origins_[n] = NodeOrigin{pos(loc), callChain()};
    return Val::tensor(n->result());
  } catch (const IRError& e) {
    fail(loc, e.what());
  }
}

std::vector<SourcePos> Evaluator::callChain() const {
  std::vector<SourcePos> out;
  for (const auto& f : frames_)
    if (f->kind == FrameKind::Function || f->kind == FrameKind::Method) out.push_back(pos(f->call_site));
  return out;
}

Value* Evaluator::constantScalar(DType dt, double v, Loc loc, const std::string& name) {
  return addNode(loc, OpKind::Constant, {}, {{"value", std::vector<double>{v}}}, name,
                 TensorType{dt, {}}).t;
}

Value* Evaluator::toOperand(const Val& v, DType peer, Loc loc) {
  if (v.k == VK::Tensor) return v.t;
  if (!v.isNumber() && v.k != VK::Bool)
    fail(loc, fmt::format("expected a tensor or a number, got {}", describeVal(v)));
  double x = v.k == VK::Bool ? (v.b ? 1.0 : 0.0) : v.num();
  // A number takes the dtype of the tensor it meets, so `x * 0.125` works on f32 and f64.
  if (isInteger(peer)) {
    bool fits = std::isfinite(x) && x == std::floor(x) &&
                (peer == DType::i64 ? std::abs(x) <= 9.007199254740992e15 : std::abs(x) <= 2147483647.0);
    if (!fits)
      fail(loc, fmt::format("the number {} cannot be an operand of type {} (the other operand's "
                            "dtype)", x, dtypeName(peer)));
  } else if (peer == DType::boolean && x != 0 && x != 1) {
    fail(loc, fmt::format("the number {} cannot be a bool operand", x));
  }
  return constantScalar(peer, x, loc);
}

Val Evaluator::tensorBinary(Op op, const Val& a, const Val& b, Loc loc) {
  OpKind k;
  switch (op) {
    case Op::Add: k = OpKind::Add; break;
    case Op::Sub: k = OpKind::Sub; break;
    case Op::Mul: k = OpKind::Mul; break;
    case Op::Div: k = OpKind::Div; break;
    case Op::Pow: k = OpKind::Pow; break;
    case Op::MatMul: k = OpKind::MatMul; break;
    case Op::Eq: k = OpKind::Eq; break;
    case Op::Ne: k = OpKind::Ne; break;
    case Op::Lt: k = OpKind::Lt; break;
    case Op::Le: k = OpKind::Le; break;
    case Op::Gt: k = OpKind::Gt; break;
    case Op::Ge: k = OpKind::Ge; break;
    default:
      fail(loc, fmt::format("operator '{}' is not defined on tensors", opSpelling(op)));
  }
  if (k == OpKind::MatMul && (a.k != VK::Tensor || b.k != VK::Tensor))
    fail(loc, fmt::format("'@' needs two tensors, got {} and {}", describeVal(a), describeVal(b)));
  DType peer = a.k == VK::Tensor ? a.t->type().dtype : b.t->type().dtype;
  Value* x = toOperand(a, peer, loc);
  Value* y = toOperand(b, peer, loc);
  return addNode(loc, k, {x, y}, {}, std::string(opName(k)));
}

Val Evaluator::paramValue(const std::shared_ptr<Instance>& inst, size_t slot, Loc loc) {
  const ParamSlot& p = inst->params.at(slot);
  if (!g_ || no_tensors_ > 0)
    fail(loc, fmt::format("parameter '{}' is a graph input: use it in a method, not in a module "
                          "body or at the top level", p.name));
  std::string path = inst->path();
  if (path.empty())
    fail(loc, fmt::format("parameter '{}' belongs to an instance of '{}' that has no name: bind "
                          "the instance with 'let name = {}(...)' first", p.name, inst->decl->name,
                          inst->decl->name));
  std::string full = path + "." + p.name;
  if (auto it = param_uses_.find(full); it != param_uses_.end()) {
    if (it->second.inst == inst && it->second.slot == slot) return Val::tensor(it->second.value);
    fail(loc, fmt::format("two different parameters are both named '{}'; bind the module "
                          "instances to distinct names", full));
  }
  // A parameter keeps its exact name (it is the checkpoint name): move any value in the way.
  if (Value* old = g_->findValue(full)) g_->renameValue(old, g_->uniqueName(full));
  Value* v;
  try {
    v = g_->add(OpKind::Input, {}, {{"role", std::string("param")}}, {full}, {p.type})->result();
  } catch (const IRError& e) {
    fail(loc, e.what());
  }
  param_uses_[full] = ParamUse{v, inst, slot};
  param_order_.push_back(v);
  ParamSlot named = p;
  named.name = full;
  param_slots_.push_back(std::move(named));
  return Val::tensor(v);
}

Val Evaluator::dropout(const Val& x, double p, Loc loc) {
  if (x.k != VK::Tensor) fail(loc, fmt::format("dropout needs a tensor, got {}", describeVal(x)));
  if (!(p >= 0 && p < 1)) fail(loc, fmt::format("dropout probability must be in [0, 1), got {}", p));
  requireTensorContext(loc, "dropout");
  // Written in the body of a graph that is not `training`, where it is the identity: said,
  // since it may mean the `training` mark is missing. (In a function or a method it is the
  // library's way of serving training and inference graphs alike.)
  if (!training_ && !inference_ && p > 0 && frames_.back()->kind == FrameKind::Graph)
    warnings_.push_back(ModelWarning{
        "dropout-in-inference", pos(loc),
        fmt::format("dropout(p={}) in graph '{}', which is not marked training: it is the identity here",
                    p, frames_.back()->fn_name),
        "mark the graph `training` if it trains, or remove the dropout", callChain(), true});
  if (!training_ || p == 0) return x;  // inference graphs have no dropout at all
  const TensorType& t = x.t->type();
  if (!isFloat(t.dtype)) fail(loc, fmt::format("dropout needs a float tensor, got {}", t.str()));
  int64_t n = t.numel();
  if (n > (int64_t{1} << 50) - dropout_elements_)
    fail(loc, "dropout masks of this graph exceed 2^50 elements");
  TensorType i64s{DType::i64, {}};
  if (!dropout_step_offset_) {
    // Each step draws a fresh counter range: offset = step * (elements per step) + site start.
    // The number of elements is known once the graph is lowered; it is patched in then.
    try {
      dropout_placeholder_ = g_->add(OpKind::Constant, {}, {{"value", std::vector<double>{0}}},
                                     {"dropout.elements_per_step"}, {i64s});
      dropout_step_offset_ = g_->add(OpKind::Mul, {step_, dropout_placeholder_->result()}, {},
                                     {"dropout.step_offset"})->result();
    } catch (const IRError& e) {
      fail(loc, e.what());
    }
  }
  Value* base = constantScalar(DType::i64, static_cast<double>(dropout_elements_), loc, "dropout.start");
  dropout_elements_ += n;
  Value* offset = addNode(loc, OpKind::Add, {dropout_step_offset_, base}, {}, "dropout.offset").t;
  Value* u = addNode(loc, OpKind::PhiloxUniform, {seed_, offset}, {}, "dropout.rand", t).t;
  Value* keep = addNode(loc, OpKind::Ge, {u, constantScalar(t.dtype, p, loc, "dropout.p")}, {}, "dropout.keep").t;
  Value* scaled = addNode(loc, OpKind::Mul, {x.t, constantScalar(t.dtype, 1.0 / (1.0 - p), loc, "dropout.inv_keep")},
                          {}, "dropout.scale").t;
  return addNode(loc, OpKind::Where, {keep, scaled, constantScalar(t.dtype, 0.0, loc, "dropout.zero")}, {},
                 "dropout");
}

}  // namespace tgc::fe
