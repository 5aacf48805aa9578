// Builder: one call per op, with provenance names under a scope ("enc.2.attn").
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace tgc {

class Builder {
 public:
  explicit Builder(Graph& g) : g_(g) {}
  Graph& graph() { return g_; }

  // Names created while a Scope lives are prefixed "outer.inner.".
  class Scope {
   public:
    Scope(Builder& b, const std::string& name);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Builder& b_;
    size_t saved_;
  };
  std::string qualify(const std::string& name) const;

  // Sources.
  Value* input(const std::string& name, TensorType type, const std::string& role = "data");
  Value* constant(TensorType type, std::vector<double> values, const std::string& name = "c");
  Value* scalar(DType dt, double v, const std::string& name = "c");
  Value* iota(TensorType type, int64_t axis, const std::string& name = "iota");
  Value* philoxUniform(Value* seed, Value* offset, TensorType type, const std::string& name = "rand");

  // Generic forms.
  Value* op(OpKind k, std::vector<Value*> operands, AttrMap attrs = {}, const std::string& name = "");
  Value* unary(OpKind k, Value* x, const std::string& name = "");
  Value* binary(OpKind k, Value* a, Value* b, const std::string& name = "");

  Value* add(Value* a, Value* b, const std::string& n = "") { return binary(OpKind::Add, a, b, n); }
  Value* sub(Value* a, Value* b, const std::string& n = "") { return binary(OpKind::Sub, a, b, n); }
  Value* mul(Value* a, Value* b, const std::string& n = "") { return binary(OpKind::Mul, a, b, n); }
  Value* div(Value* a, Value* b, const std::string& n = "") { return binary(OpKind::Div, a, b, n); }
  Value* neg(Value* x, const std::string& n = "") { return unary(OpKind::Neg, x, n); }
  Value* exp(Value* x, const std::string& n = "") { return unary(OpKind::Exp, x, n); }
  Value* log(Value* x, const std::string& n = "") { return unary(OpKind::Log, x, n); }
  Value* relu(Value* x, const std::string& n = "") { return unary(OpKind::Relu, x, n); }
  Value* gelu(Value* x, bool tanhApprox, const std::string& n = "");
  Value* cast(Value* x, DType dt, const std::string& n = "");
  Value* where(Value* c, Value* a, Value* b, const std::string& n = "");

  Value* reduce(OpKind k, Value* x, std::vector<int64_t> axes, bool keepdims = false,
                const std::string& n = "");
  Value* softmax(Value* x, int64_t axis = -1, const std::string& n = "softmax");
  Value* logSoftmax(Value* x, int64_t axis = -1, const std::string& n = "log_softmax");
  Value* layerNorm(Value* x, Value* gamma, Value* beta, double eps = 1e-5,
                   const std::string& n = "layer_norm");

  Value* matmul(Value* a, Value* b, bool transposeA = false, bool transposeB = false,
                const std::string& n = "matmul");
  // A -1 entry takes the remaining size.
  Value* reshape(Value* x, std::vector<int64_t> shape, const std::string& n = "reshape");
  Value* transpose(Value* x, std::vector<int64_t> perm, const std::string& n = "transpose");
  Value* broadcast(Value* x, std::vector<int64_t> shape, const std::string& n = "broadcast");
  // Negative start/end count from the end, as in Python; they are clamped to the dim.
  Value* slice(Value* x, int64_t axis, int64_t start, int64_t end, int64_t step = 1,
               const std::string& n = "slice");
  Value* concat(std::vector<Value*> xs, int64_t axis, const std::string& n = "concat");
  Value* gather(Value* table, Value* indices, const std::string& n = "gather");
  Value* scatterAdd(Value* indices, Value* updates, int64_t rows, const std::string& n = "scatter_add");

 private:
  Graph& g_;
  std::vector<std::string> scope_;
};

}  // namespace tgc
