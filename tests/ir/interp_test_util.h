// Helpers shared by the interpreter tests: one-op graphs, tensor literals, comparisons, and
// the registry that checks every op of ops.def has at least one test.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/op_table.h"
#include "ir/tensor.h"

namespace tgc::interp_test {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Ops that have a test, filled before main() by INTERP_OP_TEST.
inline std::set<OpKind>& testedOps() {
  static std::set<OpKind> s;
  return s;
}
inline bool registerOpTest(OpKind k) {
  testedOps().insert(k);
  return true;
}

// A test of op `Op` (an OpKind enumerator): TEST(InterpOp, Name), recorded in testedOps().
#define INTERP_OP_TEST(Op, Name)                                   \
  [[maybe_unused]] static const bool kInterpTestOf_##Op##_##Name = \
      ::tgc::interp_test::registerOpTest(::tgc::OpKind::Op);       \
  TEST(Interp##Op, Name)

inline TensorType ty(DType d, Shape s) { return TensorType{d, std::move(s)}; }

// A tensor from row-major values (rounded to the dtype by Tensor::setF).
inline Tensor T(DType d, Shape s, const std::vector<double>& v) {
  Tensor t(ty(d, std::move(s)));
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel()) << "test literal has the wrong size";
  for (int64_t i = 0; i < t.numel() && i < static_cast<int64_t>(v.size()); ++i) t.setF(i, v[i]);
  return t;
}
// Exact integer tensor (i64 values beyond 2^53 survive).
inline Tensor TI(DType d, Shape s, const std::vector<int64_t>& v) {
  Tensor t(ty(d, std::move(s)));
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel()) << "test literal has the wrong size";
  for (int64_t i = 0; i < t.numel() && i < static_cast<int64_t>(v.size()); ++i) t.setI(i, v[i]);
  return t;
}

// Adds to `g` one input per tensor in `args` (named x0, x1, ..., fed through `inputs`), then
// `op` applied to them with `attrs` (`declared` gives a source op its type), its results named
// out, out.1, ...; returns the op's node.
inline Node* addOneOp(Graph& g, std::map<std::string, Tensor>& inputs, OpKind op,
                      const std::vector<Tensor>& args, AttrMap attrs,
                      std::vector<TensorType> declared = {}) {
  std::vector<Value*> operands;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = fmt::format("x{}", i);
    operands.push_back(g.add(OpKind::Input, {}, {}, {name}, {args[i].type()})->result());
    inputs[name] = args[i];
  }
  return g.add(op, operands, std::move(attrs), {"out"}, std::move(declared));
}

// Builds a graph of `op` (addOneOp) and runs it; returns its result.
inline Tensor runOp(OpKind op, const std::vector<Tensor>& args, AttrMap attrs = {},
                    std::optional<TensorType> declared = std::nullopt,
                    InterpreterOptions opts = {}) {
  Graph g("one_op");
  std::map<std::string, Tensor> inputs;
  std::vector<TensorType> decl;
  if (declared) decl.push_back(*declared);
  Node* n = addOneOp(g, inputs, op, args, std::move(attrs), decl);
  g.addOutput(n->result());
  std::vector<Tensor> outs = Interpreter(opts).run(g, inputs);
  EXPECT_EQ(outs.size(), 1u);
  return outs.at(0);
}

// The same for an op with several results (fused_attention, softmax_cross_entropy, ...):
// returns every result.
inline std::vector<Tensor> runOpResults(OpKind op, const std::vector<Tensor>& args,
                                        AttrMap attrs = {}, InterpreterOptions opts = {}) {
  Graph g("one_op");
  std::map<std::string, Tensor> inputs;
  Node* n = addOneOp(g, inputs, op, args, std::move(attrs));
  for (size_t r = 0; r < n->numResults(); ++r) g.addOutput(n->result(r));
  return Interpreter(opts).run(g, inputs);
}

// Runs and returns the IRError message ("" when nothing was thrown).
template <class F>
std::string errorOf(F f) {
  try {
    f();
  } catch (const IRError& e) {
    return e.what();
  }
  return "";
}

inline bool sameValue(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b;
}

// Type and every value exactly equal (NaN equals NaN; the sign of zero is not checked).
inline void expectExact(const Tensor& t, const TensorType& type, const std::vector<double>& want) {
  ASSERT_EQ(t.type(), type) << "got " << t.type().str() << ", want " << type.str();
  ASSERT_EQ(static_cast<int64_t>(want.size()), t.numel());
  for (int64_t i = 0; i < t.numel(); ++i)
    EXPECT_TRUE(sameValue(t.getF(i), want[i]))
        << "element " << i << ": got " << t.getF(i) << ", want " << want[i];
}

// Exact integer comparison (for i64 beyond 2^53).
inline void expectInts(const Tensor& t, const TensorType& type, const std::vector<int64_t>& want) {
  ASSERT_EQ(t.type(), type) << "got " << t.type().str() << ", want " << type.str();
  ASSERT_EQ(static_cast<int64_t>(want.size()), t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.getI(i), want[i]) << "element " << i;
}

// Type equal, values within a relative tolerance (infinities and NaN must match exactly).
inline void expectNear(const Tensor& t, const TensorType& type, const std::vector<double>& want,
                       double rel = 1e-6) {
  ASSERT_EQ(t.type(), type) << "got " << t.type().str() << ", want " << type.str();
  ASSERT_EQ(static_cast<int64_t>(want.size()), t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    double g = t.getF(i), w = want[i];
    if (std::isnan(w) || std::isinf(w) || std::isnan(g) || std::isinf(g))
      EXPECT_TRUE(sameValue(g, w)) << "element " << i << ": got " << g << ", want " << w;
    else
      EXPECT_NEAR(g, w, rel * std::max(1.0, std::fabs(w))) << "element " << i;
  }
}

// Values of a tensor rounded as a dtype would store them (for expected values in f32 etc.).
inline double roundTo(DType d, double v) {
  Tensor t(ty(d, {}));
  t.setF(0, v);
  return t.getF(0);
}

}  // namespace tgc::interp_test
