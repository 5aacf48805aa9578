// Every op of ir/ops.def that becomes a generated kernel, lowered, compiled through the LLVM
// emitter and run in three parallel chunks (and in the Kernel IR evaluator), against the
// interpreter: random shapes with sizes that are not multiples of the vector width (1, 3,
// 7, 9, 17, 33, 130), broadcasting forms, f32 and f64, ints and bool where the op takes them.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ir/op_table.h"
#include "lower_test_util.h"

namespace tgc::lower_test {
namespace {

TensorType ty(DType d, Shape s) { return TensorType{d, std::move(s)}; }

std::string shapes(const std::vector<TensorType>& ts) {
  std::string s;
  for (const auto& t : ts) s += (s.empty() ? "" : ", ") + t.str();
  return s;
}

constexpr Tolerance kTransF32{4e-6, 1e-6};
constexpr Tolerance kTransF64{1e-13, 1e-15};
constexpr Tolerance kSumF32{2e-5, 1e-4};
constexpr Tolerance kSumF64{1e-12, 1e-12};
constexpr Tolerance kHalf{1e-2, 1e-2};

Tolerance trans(DType d) {
  return d == DType::f64 ? kTransF64 : d == DType::f32 ? kTransF32 : kHalf;
}
Tolerance sum(DType d) { return d == DType::f64 ? kSumF64 : d == DType::f32 ? kSumF32 : kHalf; }

using Cases = std::vector<Case>;

// One case: `op` applied to fresh inputs of the given types.
Case one(OpKind op, const std::vector<TensorType>& ins, Tolerance tol, AttrMap attrs = {},
         Dist d = Dist::General, std::vector<TensorType> declared = {}) {
  Case c;
  c.label = fmt::format("{}({}) {}", opName(op), shapes(ins), declared.empty() ? "" : declared[0].str());
  std::vector<Value*> vs;
  for (const auto& t : ins) vs.push_back(c.in(t, d));
  c.op(op, vs, std::move(attrs), std::move(declared));
  c.tol = tol;
  return c;
}

const std::vector<Shape> kUnaryShapes = {{}, {1}, {7}, {3, 9}, {2, 17, 33}, {130}};
const std::vector<std::pair<Shape, Shape>> kBinaryShapes = {
    {{7}, {7}}, {{3, 9}, {3, 9}}, {{3, 1, 9}, {7, 1}}, {{}, {17}}, {{33, 1}, {1, 130}}, {{2, 3, 17}, {17}}};

Cases unaryCases(OpKind op, std::vector<DType> dtypes, bool exact, Dist d = Dist::General) {
  Cases cs;
  for (DType dt : dtypes)
    for (const Shape& s : kUnaryShapes)
      cs.push_back(one(op, {ty(dt, s)}, exact && dt != DType::bf16 ? kExact : trans(dt), {}, d));
  return cs;
}

Cases binaryCases(OpKind op, std::vector<DType> dtypes, bool exact, Dist d = Dist::General) {
  Cases cs;
  bool minMax = op == OpKind::Maximum || op == OpKind::Minimum;
  for (DType dt : dtypes)
    for (const auto& [a, b] : kBinaryShapes) {
      Dist dd = isFloat(dt) ? d : (d == Dist::Special ? Dist::General : d);
      Tolerance t = exact ? (minMax ? kExactUpToZeroSign : kExact) : trans(dt);
      cs.push_back(one(op, {ty(dt, a), ty(dt, b)}, t, {}, dd));
    }
  return cs;
}

Cases reduceCases(OpKind op) {
  Cases cs;
  struct R { Shape s; std::vector<int64_t> axes; bool keep; };
  const std::vector<R> rs = {{{130}, {0}, false},        {{3, 9, 17}, {2}, false},
                             {{3, 9, 17}, {0}, true},    {{3, 9, 17}, {0, 2}, false},
                             {{3, 9, 17}, {-2}, true},   {{33, 130}, {0}, false},
                             {{2, 3, 7}, {}, false},     {{7, 1, 9}, {0, 1}, false},
                             {{1}, {0}, true}};
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64})
    for (size_t i = 0; i < rs.size(); ++i) {
      const R& r = rs[i];
      // f32 takes every form; the other dtypes a few (last axis, leading axis, several axes).
      if (dt != DType::f32 && i != 1 && i != 2 && i != 3 && i != 5) continue;
      AttrMap a{{"axes", r.axes}, {"keepdims", r.keep}};
      cs.push_back(one(op, {ty(dt, r.s)}, isFloat(dt) ? sum(dt) : kExact, a,
                       op == OpKind::ReduceMax && dt == DType::f32 ? Dist::Special : Dist::General));
    }
  cs.push_back(one(op, {ty(DType::bf16, {9, 33})}, kHalf, {{"axes", std::vector<int64_t>{1}}}));
  cs.push_back(one(op, {ty(DType::bf16, {9, 33})}, kHalf, {{"axes", std::vector<int64_t>{0}}}));
  return cs;
}

Cases softmaxCases(OpKind op) {
  Cases cs;
  for (DType dt : {DType::f32, DType::f64}) {
    Tolerance t = dt == DType::f32 ? Tolerance{1e-5, 1e-6} : Tolerance{1e-12, 1e-14};
    cs.push_back(one(op, {ty(dt, {7, 33})}, t, {}, Dist::Masked));
    cs.push_back(one(op, {ty(dt, {130})}, t));
    cs.push_back(one(op, {ty(dt, {3, 17, 9})}, t, {{"axis", int64_t{1}}}, Dist::Masked));
    cs.push_back(one(op, {ty(dt, {3, 17, 9})}, t, {{"axis", int64_t{0}}}));
    cs.push_back(one(op, {ty(dt, {2, 9, 1})}, t, {{"axis", int64_t{-1}}}));
  }
  cs.push_back(one(op, {ty(DType::f32, {9, 7})}, {1e-5, 1e-6}, {}, Dist::Special));
  cs.push_back(one(op, {ty(DType::bf16, {9, 33})}, kHalf, {}, Dist::Masked));
  return cs;
}

Cases castCases() {
  Cases cs;
  const DType all[] = {DType::f32, DType::f64, DType::bf16, DType::f16,
                       DType::i32, DType::i64, DType::boolean};
  for (DType from : all)
    for (DType to : all) {
      if (from == to) continue;
      cs.push_back(one(OpKind::Cast, {ty(from, {3, 17})}, kExact, {{"dtype", to}},
                       isFloat(from) ? Dist::Special : Dist::General));
    }
  return cs;
}

Cases casesFor(OpKind op) {
  const std::vector<DType> floats = {DType::f32, DType::f64};
  const std::vector<DType> numeric = {DType::f32, DType::f64, DType::i32, DType::i64};
  switch (op) {
    case OpKind::Input:
    case OpKind::Constant:
    case OpKind::MatMul:
    case OpKind::Reshape:
    case OpKind::FusedAttention: case OpKind::FusedAttentionGrad:
    case OpKind::SoftmaxCrossEntropy: case OpKind::SoftmaxCrossEntropyGrad:
    case OpKind::LayerNormGrad: case OpKind::QuantizedMatmul: case OpKind::DynamicUpdateSlice:
      return {};  // not generated kernels (see codegen::classify)

    case OpKind::Iota: {
      Cases cs;
      cs.push_back(one(op, {}, kExact, {{"axis", int64_t{1}}}, Dist::General, {ty(DType::f32, {3, 9})}));
      cs.push_back(one(op, {}, kExact, {{"axis", int64_t{0}}}, Dist::General, {ty(DType::i64, {2, 17, 5})}));
      cs.push_back(one(op, {}, kExact, {{"axis", int64_t{-1}}}, Dist::General, {ty(DType::i32, {130})}));
      cs.push_back(one(op, {}, kExact, {{"axis", int64_t{0}}}, Dist::General, {ty(DType::bf16, {300})}));
      cs.push_back(one(op, {}, kExact, {{"axis", int64_t{1}}}, Dist::General, {ty(DType::f64, {7, 1030})}));
      return cs;
    }
    case OpKind::PhiloxUniform: {
      Cases cs;
      for (auto [dt, s] : std::vector<std::pair<DType, Shape>>{
               {DType::f32, {3, 130}}, {DType::f64, {17}}, {DType::bf16, {33}}, {DType::f32, {}}}) {
        Case c;
        c.label = fmt::format("philox_uniform {}", ty(dt, s).str());
        Value* seed = c.in(ty(DType::i64, {}));
        Value* off = c.in(ty(DType::i64, {}));
        c.inputs.at("in0").setI(0, static_cast<int64_t>(rng()()));  // full 64-bit seed
        c.inputs.at("in1").setI(0, -5);  // the counter wraps through 2^64
        c.op(op, {seed, off}, {}, {ty(dt, s)});
        c.tol = kExact;
        cs.push_back(std::move(c));
      }
      return cs;
    }

    case OpKind::Neg:
    case OpKind::Abs:
      return unaryCases(op, {DType::f32, DType::f64, DType::i32, DType::i64, DType::bf16}, true,
                        Dist::Special);
    case OpKind::Sqrt: return unaryCases(op, {DType::f32, DType::f64, DType::f16}, true, Dist::Positive);
    case OpKind::Log:
    case OpKind::Rsqrt: return unaryCases(op, {DType::f32, DType::f64, DType::bf16}, false, Dist::Positive);
    case OpKind::Exp:
    case OpKind::Tanh:
    case OpKind::Erf:
    case OpKind::Sigmoid:
    case OpKind::Silu: return unaryCases(op, {DType::f32, DType::f64, DType::bf16}, false);
    case OpKind::Relu: return unaryCases(op, {DType::f32, DType::f64, DType::bf16}, true, Dist::Special);
    case OpKind::Gelu: {
      Cases cs = unaryCases(op, floats, false);
      for (DType dt : floats)
        cs.push_back(one(op, {ty(dt, {9, 33})}, trans(dt), {{"approximate", std::string("tanh")}}));
      return cs;
    }
    case OpKind::LogicalNot: return unaryCases(op, {DType::boolean}, true);
    case OpKind::Cast: return castCases();

    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul: {
      Cases cs = binaryCases(op, numeric, true);
      cs.push_back(one(op, {ty(DType::bf16, {9, 17}), ty(DType::bf16, {17})}, kExact));
      return cs;
    }
    case OpKind::Div: {
      Cases cs = binaryCases(op, floats, true, Dist::Special);
      Cases ints = binaryCases(op, {DType::i32, DType::i64}, true, Dist::NonZero);
      for (auto& c : ints) cs.push_back(std::move(c));
      return cs;
    }
    case OpKind::Pow: return binaryCases(op, floats, false, Dist::Positive);
    case OpKind::Maximum:
    case OpKind::Minimum: {
      Cases cs = binaryCases(op, floats, true, Dist::Special);
      Cases ints = binaryCases(op, {DType::i32, DType::i64}, true);
      for (auto& c : ints) cs.push_back(std::move(c));
      return cs;
    }
    case OpKind::Eq:
    case OpKind::Ne:
    case OpKind::Lt:
    case OpKind::Le:
    case OpKind::Gt:
    case OpKind::Ge: {
      Cases cs = binaryCases(op, {DType::f32, DType::f64}, true, Dist::Special);
      for (DType dt : {DType::i32, DType::i64, DType::boolean, DType::bf16})
        cs.push_back(one(op, {ty(dt, {3, 1, 9}), ty(dt, {7, 1})}, kExact));
      return cs;
    }
    case OpKind::LogicalAnd:
    case OpKind::LogicalOr: return binaryCases(op, {DType::boolean}, true);
    case OpKind::Where: {
      Cases cs;
      for (DType dt : {DType::f32, DType::f64, DType::i64, DType::boolean, DType::bf16})
        cs.push_back(one(op, {ty(DType::boolean, {3, 1, 9}), ty(dt, {7, 1}), ty(dt, {9})}, kExact));
      cs.push_back(one(op, {ty(DType::boolean, {}), ty(DType::f32, {130}), ty(DType::f32, {130})}, kExact));
      cs.push_back(one(op, {ty(DType::boolean, {33, 17}), ty(DType::i32, {}), ty(DType::i32, {33, 17})}, kExact));
      return cs;
    }

    case OpKind::ReduceSum:
    case OpKind::ReduceMax:
    case OpKind::ReduceMean: return reduceCases(op);
    case OpKind::Softmax:
    case OpKind::LogSoftmax: return softmaxCases(op);
    case OpKind::LayerNorm: {
      Cases cs;
      for (DType dt : {DType::f32, DType::f64, DType::bf16})
        for (const Shape& s : std::vector<Shape>{{9, 33}, {2, 3, 17}, {130}, {7, 1}}) {
          Tolerance t = dt == DType::f32 ? Tolerance{1e-5, 2e-5} : dt == DType::f64 ? kSumF64 : kHalf;
          cs.push_back(one(op, {ty(dt, s), ty(dt, {s.back()}), ty(dt, {s.back()})}, t,
                           {{"eps", 1e-3}}));
        }
      return cs;
    }
    case OpKind::RmsNorm: {
      Cases cs;
      for (DType dt : {DType::f32, DType::f64, DType::bf16})
        for (const Shape& s : std::vector<Shape>{{9, 33}, {2, 3, 17}, {130}, {7, 1}}) {
          Tolerance t = dt == DType::f32 ? Tolerance{1e-5, 2e-5} : dt == DType::f64 ? kSumF64 : kHalf;
          cs.push_back(one(op, {ty(dt, s), ty(dt, {s.back()})}, t, {{"eps", 1e-3}}));
        }
      return cs;
    }

    case OpKind::Transpose: {
      Cases cs;
      for (const auto& perm : std::vector<std::vector<int64_t>>{{2, 0, 1}, {0, 2, 1}, {1, 0, 2}})
        cs.push_back(one(op, {ty(DType::f32, {3, 9, 17})}, kExact, {{"perm", perm}}));
      for (DType dt : {DType::i32, DType::boolean, DType::f64})
        cs.push_back(one(op, {ty(dt, {3, 9, 17})}, kExact, {{"perm", std::vector<int64_t>{2, 0, 1}}}));
      cs.push_back(one(op, {ty(DType::f32, {33, 130})}, kExact, {{"perm", std::vector<int64_t>{1, 0}}}));
      cs.push_back(one(op, {ty(DType::bf16, {2, 7, 3, 9})}, kExact,
                       {{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
      // Size-1 dims, and input dims that stay adjacent (collapsed before tiling).
      cs.push_back(one(op, {ty(DType::f32, {3, 1, 9, 17})}, kExact,
                       {{"perm", std::vector<int64_t>{3, 1, 0, 2}}}));
      cs.push_back(one(op, {ty(DType::f64, {2, 3, 7, 130})}, kExact,
                       {{"perm", std::vector<int64_t>{3, 0, 1, 2}}}));
      cs.push_back(one(op, {ty(DType::i64, {1, 1})}, kExact, {{"perm", std::vector<int64_t>{1, 0}}}));
      return cs;
    }
    case OpKind::Broadcast: {
      Cases cs;
      for (DType dt : {DType::f32, DType::i64, DType::boolean}) {
        cs.push_back(one(op, {ty(dt, {3, 1})}, kExact, {{"shape", std::vector<int64_t>{2, 3, 9}}}));
        cs.push_back(one(op, {ty(dt, {})}, kExact, {{"shape", std::vector<int64_t>{7}}}));
        cs.push_back(one(op, {ty(dt, {1, 17})}, kExact, {{"shape", std::vector<int64_t>{33, 17}}}));
      }
      return cs;
    }
    case OpKind::Slice: {
      Cases cs;
      for (DType dt : {DType::f32, DType::i32, DType::boolean}) {
        cs.push_back(one(op, {ty(dt, {9, 17})}, kExact,
                         {{"axis", int64_t{1}}, {"start", int64_t{2}}, {"end", int64_t{15}}, {"step", int64_t{3}}}));
        cs.push_back(one(op, {ty(dt, {9, 17})}, kExact,
                         {{"axis", int64_t{0}}, {"start", int64_t{1}}, {"end", int64_t{8}}}));
        cs.push_back(one(op, {ty(dt, {130})}, kExact,
                         {{"axis", int64_t{0}}, {"start", int64_t{0}}, {"end", int64_t{130}}, {"step", int64_t{7}}}));
      }
      return cs;
    }
    case OpKind::Concat: {
      Cases cs;
      for (DType dt : {DType::f32, DType::i64, DType::boolean}) {
        cs.push_back(one(op, {ty(dt, {3, 2, 5}), ty(dt, {3, 7, 5}), ty(dt, {3, 1, 5})}, kExact,
                         {{"axis", int64_t{1}}}));
        cs.push_back(one(op, {ty(dt, {9, 17}), ty(dt, {33, 17})}, kExact, {{"axis", int64_t{0}}}));
        cs.push_back(one(op, {ty(dt, {7})}, kExact, {{"axis", int64_t{0}}}));
        cs.push_back(one(op, {ty(dt, {3, 0}), ty(dt, {3, 130})}, kExact, {{"axis", int64_t{-1}}}));
        // Enough rows for one contiguous copy per operand and row.
        cs.push_back(one(op, {ty(dt, {33, 2, 5}), ty(dt, {33, 7, 5})}, kExact, {{"axis", int64_t{1}}}));
        cs.push_back(one(op, {ty(dt, {40, 3}), ty(dt, {40, 0}), ty(dt, {40, 9})}, kExact,
                         {{"axis", int64_t{-1}}}));
      }
      return cs;
    }
    case OpKind::Gather: {
      Cases cs;
      struct G { DType t; Shape table; DType it; Shape idx; };
      for (const G& gc : std::vector<G>{{DType::f32, {17, 9}, DType::i32, {3, 7}},
                                        {DType::f64, {33}, DType::i64, {130}},
                                        {DType::bf16, {9, 2, 3}, DType::i64, {7}},
                                        {DType::i32, {5, 130}, DType::i32, {}}}) {
        Case c;
        c.label = fmt::format("gather({}, {})", ty(gc.t, gc.table).str(), ty(gc.it, gc.idx).str());
        Value* table = c.in(ty(gc.t, gc.table));
        Value* idx = c.in(ty(gc.it, gc.idx), Dist::Index, gc.table[0]);
        c.op(op, {table, idx});
        cs.push_back(std::move(c));
      }
      return cs;
    }
    case OpKind::ScatterAdd: {
      Cases cs;
      struct S { DType it; Shape idx; DType ut; Shape upd; int64_t rows; };
      for (const S& sc : std::vector<S>{{DType::i64, {33}, DType::f32, {33, 9}, 17},
                                        {DType::i32, {3, 7}, DType::f64, {3, 7, 130}, 9},
                                        {DType::i64, {130}, DType::i32, {130}, 3},
                                        {DType::i32, {9}, DType::f32, {9, 1030}, 2},
                                        {DType::i64, {40}, DType::f32, {40, 3}, 100}}) {
        Case c;
        c.label = fmt::format("scatter_add({}, {}) rows {}", ty(sc.it, sc.idx).str(),
                              ty(sc.ut, sc.upd).str(), sc.rows);
        Value* idx = c.in(ty(sc.it, sc.idx), Dist::Index, sc.rows);
        Value* upd = c.in(ty(sc.ut, sc.upd));
        c.op(op, {idx, upd}, {{"rows", sc.rows}});
        c.tol = sum(sc.ut);
        if (!isFloat(sc.ut)) c.tol = kExact;
        cs.push_back(std::move(c));
      }
      return cs;
    }
  }
  return {};
}

// Library ops (codegen/library.h) have their own tests: attention_tests, loss_kernels_tests.
bool isGeneratedKernel(OpKind k) {
  for (OpKind other : {OpKind::Input, OpKind::Constant, OpKind::MatMul, OpKind::Reshape,
                       OpKind::FusedAttention, OpKind::FusedAttentionGrad,
                       OpKind::SoftmaxCrossEntropy, OpKind::SoftmaxCrossEntropyGrad,
                       OpKind::LayerNormGrad, OpKind::QuantizedMatmul, OpKind::DynamicUpdateSlice})
    if (k == other) return false;
  return true;
}

// One test per op of the table: an op the runtime runs as a generated kernel must have
// cases (a new op fails here until it has), and they all must match the interpreter.
class LowerOp : public ::testing::TestWithParam<OpKind> {};

TEST_P(LowerOp, MatchesTheInterpreter) {
  OpKind op = GetParam();
  Cases cs = casesFor(op);
  if (!isGeneratedKernel(op)) {
    EXPECT_TRUE(cs.empty());
    return;
  }
  ASSERT_FALSE(cs.empty()) << "op " << opName(op) << " has no lowering test cases";
  for (Case& c : cs) {
    SCOPED_TRACE(c.label);
    try {
      checkCase(c);
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.label << ": " << e.what();
    }
  }
}

std::vector<OpKind> allOpKinds() {
  std::vector<OpKind> ks;
  for (const OpInfo& info : allOps()) ks.push_back(info.kind);
  return ks;
}

INSTANTIATE_TEST_SUITE_P(AllOps, LowerOp, ::testing::ValuesIn(allOpKinds()),
                         [](const ::testing::TestParamInfo<OpKind>& i) {
                           return std::string(opName(i.param));
                         });

}  // namespace
}  // namespace tgc::lower_test
