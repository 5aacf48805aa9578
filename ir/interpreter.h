// The reference interpreter: a slow, obviously correct executor of every op.
// It is the oracle all optimized paths are tested against.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace tgc {

struct InterpreterOptions {
  // Run every float computation in f64 and return f64 tensors for float outputs (inputs of
  // any float dtype are accepted and widened). Used for gradient checks. When false, each op
  // computes in double and rounds its result to the op's dtype (f32, bf16, f16 semantics).
  bool promote_to_f64 = false;
};

class Interpreter {
 public:
  explicit Interpreter(InterpreterOptions opts = {}) : opts_(opts) {}
  // `inputs` maps input value names to tensors; every input of the graph must be given with
  // its exact type (or any float dtype of the same shape when promote_to_f64).
  // Returns the outputs in order. Throws IRError naming the input or op on bad input
  // (missing input, wrong shape, gather index out of range, integer division by zero).
  std::vector<Tensor> run(const Graph& g, const std::map<std::string, Tensor>& inputs) const;
  // Evaluates one node given its operand values (used by constant folding).
  std::vector<Tensor> evalNode(const Node& n, const std::vector<const Tensor*>& operands) const;

 private:
  InterpreterOptions opts_;
};

}  // namespace tgc
