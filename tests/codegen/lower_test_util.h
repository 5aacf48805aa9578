// Helpers for the lowering tests: random inputs, a graph-building case, and the check that
// runs a case's group through lowerGroup, the LLVM emitter (in several parallel chunks) and
// the Kernel IR reference evaluator, against the interpreter.
#pragma once

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codegen/lower.h"
#include "ir/graph.h"
#include "ir/tensor.h"

namespace tgc::lower_test {

// How inputs are drawn: General floats in [-3, 3] (ints in [-20, 20]), Positive floats in
// [0.05, 4] (ints [1, 20]), NonZero ints in [-20, 20] \ {0} (with -1 common), Special floats
// mixing NaN, +-inf, +-0 and huge values into General ones, Masked: General with many -inf
// and whole rows (of the last dim) of -inf, Index{n}: ints in [0, n).
enum class Dist { General, Positive, NonZero, Special, Masked, Index };

struct Tolerance {
  double rtol = 0, atol = 0;  // both 0: exact (values, NaN equal to NaN, sign of zero)
  bool zeroSign = true;       // exact: whether -0 and +0 differ
};
inline constexpr Tolerance kExact{};
// maximum/minimum may return either zero for (-0, +0): the interpreter takes the first
// operand, the emitted code orders -0 below +0 (as IEEE maximum does).
inline constexpr Tolerance kExactUpToZeroSign{0, 0, false};

struct Case {
  std::string label;
  std::unique_ptr<Graph> graph = std::make_unique<Graph>("t");
  std::map<std::string, Tensor> inputs;
  Tolerance tol;

  // A graph input with random contents.
  Value* in(TensorType t, Dist d = Dist::General, int64_t indexRange = 0);
  // Adds a node; the last one added is the output and the group is every non-input node.
  Value* op(OpKind k, std::vector<Value*> operands, AttrMap attrs = {},
            std::vector<TensorType> declared = {}, const std::string& name = "");
};

std::mt19937_64& rng();

// Lowers the case's group, checks the kernel (verify, names, buffers: only the group's
// inputs and its result), runs it compiled in three parallel chunks and in the evaluator,
// and compares both with the interpreter. Returns the lowered kernel for further checks.
codegen::LoweredKernel checkCase(Case& c);

// The comparison on its own (gtest failures name the label and the first bad element).
void expectClose(const Tensor& got, const Tensor& want, Tolerance tol, const std::string& label);

}  // namespace tgc::lower_test
