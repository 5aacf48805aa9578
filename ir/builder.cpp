#include "ir/builder.h"

#include <fmt/format.h>

#include <algorithm>

namespace tgc {

Builder::Scope::Scope(Builder& b, const std::string& name) : b_(b), saved_(b.scope_.size()) {
  b.scope_.push_back(name);
}
Builder::Scope::~Scope() { b_.scope_.resize(saved_); }

std::string Builder::qualify(const std::string& name) const {
  std::string r;
  for (const auto& s : scope_) r += s + ".";
  return r + name;
}

Value* Builder::op(OpKind k, std::vector<Value*> operands, AttrMap attrs, const std::string& name) {
  std::string n = name.empty() ? std::string(opName(k)) : name;
  return g_.add(k, std::move(operands), std::move(attrs), {qualify(n)})->result();
}

Value* Builder::input(const std::string& name, TensorType type, const std::string& role) {
  return g_.add(OpKind::Input, {}, {{"role", role}}, {qualify(name)}, {std::move(type)})->result();
}

Value* Builder::constant(TensorType type, std::vector<double> values, const std::string& name) {
  return g_.add(OpKind::Constant, {}, {{"value", std::move(values)}}, {qualify(name)},
                {std::move(type)})
      ->result();
}

Value* Builder::scalar(DType dt, double v, const std::string& name) {
  return constant(TensorType{dt, {}}, {v}, name);
}

Value* Builder::iota(TensorType type, int64_t axis, const std::string& name) {
  return g_.add(OpKind::Iota, {}, {{"axis", axis}}, {qualify(name)}, {std::move(type)})->result();
}

Value* Builder::philoxUniform(Value* seed, Value* offset, TensorType type, const std::string& name) {
  return g_.add(OpKind::PhiloxUniform, {seed, offset}, {}, {qualify(name)}, {std::move(type)})
      ->result();
}

Value* Builder::unary(OpKind k, Value* x, const std::string& name) { return op(k, {x}, {}, name); }
Value* Builder::binary(OpKind k, Value* a, Value* b, const std::string& name) {
  return op(k, {a, b}, {}, name);
}

Value* Builder::gelu(Value* x, bool tanhApprox, const std::string& n) {
  AttrMap a;
  if (tanhApprox) a["approximate"] = std::string("tanh");
  return op(OpKind::Gelu, {x}, std::move(a), n);
}

Value* Builder::cast(Value* x, DType dt, const std::string& n) {
  return op(OpKind::Cast, {x}, {{"dtype", dt}}, n);
}

Value* Builder::where(Value* c, Value* a, Value* b, const std::string& n) {
  return op(OpKind::Where, {c, a, b}, {}, n);
}

Value* Builder::reduce(OpKind k, Value* x, std::vector<int64_t> axes, bool keepdims,
                       const std::string& n) {
  return op(k, {x}, {{"axes", std::move(axes)}, {"keepdims", keepdims}}, n);
}

Value* Builder::softmax(Value* x, int64_t axis, const std::string& n) {
  return op(OpKind::Softmax, {x}, {{"axis", axis}}, n);
}
Value* Builder::logSoftmax(Value* x, int64_t axis, const std::string& n) {
  return op(OpKind::LogSoftmax, {x}, {{"axis", axis}}, n);
}
Value* Builder::layerNorm(Value* x, Value* gamma, Value* beta, double eps, const std::string& n) {
  return op(OpKind::LayerNorm, {x, gamma, beta}, {{"eps", eps}}, n);
}

Value* Builder::matmul(Value* a, Value* b, bool ta, bool tb, const std::string& n) {
  return op(OpKind::MatMul, {a, b}, {{"transpose_a", ta}, {"transpose_b", tb}}, n);
}

Value* Builder::reshape(Value* x, std::vector<int64_t> shape, const std::string& n) {
  auto neg = std::find(shape.begin(), shape.end(), -1);
  if (neg != shape.end()) {
    int64_t known = 1;
    for (int64_t d : shape)
      if (d != -1) known *= d;
    if (known == 0 || x->type().numel() % known != 0)
      throw IRError(fmt::format("reshape %{}: cannot infer -1 reshaping {} to {}", qualify(n),
                                x->type().str(), shapeStr(shape)));
    *neg = x->type().numel() / known;
  }
  return op(OpKind::Reshape, {x}, {{"shape", std::move(shape)}}, n);
}

Value* Builder::transpose(Value* x, std::vector<int64_t> perm, const std::string& n) {
  return op(OpKind::Transpose, {x}, {{"perm", std::move(perm)}}, n);
}

Value* Builder::broadcast(Value* x, std::vector<int64_t> shape, const std::string& n) {
  return op(OpKind::Broadcast, {x}, {{"shape", std::move(shape)}}, n);
}

Value* Builder::slice(Value* x, int64_t axis, int64_t start, int64_t end, int64_t step,
                      const std::string& n) {
  int64_t rank = x->type().rank();
  int64_t ax = axis < 0 ? axis + rank : axis;
  if (ax >= 0 && ax < rank) {
    int64_t dim = x->type().shape[ax];
    auto fix = [&](int64_t v) { return std::clamp(v < 0 ? v + dim : v, int64_t{0}, dim); };
    start = fix(start);
    end = std::max(fix(end), start);
  }
  return op(OpKind::Slice, {x},
            {{"axis", axis}, {"start", start}, {"end", end}, {"step", step}}, n);
}

Value* Builder::concat(std::vector<Value*> xs, int64_t axis, const std::string& n) {
  return op(OpKind::Concat, std::move(xs), {{"axis", axis}}, n);
}

Value* Builder::gather(Value* table, Value* indices, const std::string& n) {
  return op(OpKind::Gather, {table, indices}, {}, n);
}

Value* Builder::scatterAdd(Value* indices, Value* updates, int64_t rows, const std::string& n) {
  return op(OpKind::ScatterAdd, {indices, updates}, {{"rows", rows}}, n);
}

}  // namespace tgc
