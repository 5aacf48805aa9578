#include <gtest/gtest.h>

#include <set>

#include "ir/op_table.h"

using namespace tgc;

namespace {
TensorType f32(Shape s) { return {DType::f32, std::move(s)}; }

std::vector<TensorType> infer(OpKind op, std::vector<TensorType> ops, AttrMap attrs = {},
                              std::vector<TensorType> declared = {}) {
  return inferResultTypes(op, ops, attrs, declared);
}

std::string inferError(OpKind op, std::vector<TensorType> ops, AttrMap attrs = {},
                       std::vector<TensorType> declared = {}) {
  try {
    infer(op, ops, attrs, declared);
  } catch (const ShapeError& e) {
    return e.what();
  }
  return "<no error>";
}
}  // namespace

TEST(OpTable, EveryOpIsDescribedOnceAndFindableByName) {
  std::set<std::string_view> names;
  for (const OpInfo& i : allOps()) {
    EXPECT_TRUE(names.insert(i.name).second) << i.name;
    EXPECT_EQ(opByName(i.name), i.kind);
    EXPECT_EQ(&opInfo(i.kind), &i);
    EXPECT_FALSE(i.doc.empty()) << i.name;
    EXPECT_NE(i.infer, nullptr);
    for (const AttrSpec& a : i.attrs) EXPECT_FALSE(a.name.empty()) << i.name;
  }
  EXPECT_FALSE(opByName("no_such_op").has_value());
}

TEST(OpTable, AttrSpecsParsed) {
  const OpInfo& r = opInfo(OpKind::ReduceSum);
  ASSERT_EQ(r.attrs.size(), 2u);
  EXPECT_EQ(r.attrs[0].name, "axes");
  EXPECT_EQ(r.attrs[0].kind, AttrKind::Ints);
  EXPECT_FALSE(r.attrs[0].default_value.has_value());
  EXPECT_EQ(r.attrs[1].name, "keepdims");
  EXPECT_EQ(*r.attrs[1].default_value, Attr{false});
  EXPECT_EQ(*opInfo(OpKind::Gelu).findAttr("approximate")->default_value, Attr{std::string("none")});
  EXPECT_EQ(*opInfo(OpKind::LayerNorm).findAttr("eps")->default_value, Attr{1e-5});
}

TEST(ShapeRules, Broadcasting) {
  EXPECT_EQ(infer(OpKind::Add, {f32({2, 1, 4}), f32({3, 1})})[0], f32({2, 3, 4}));
  EXPECT_EQ(infer(OpKind::Mul, {f32({}), f32({5})})[0], f32({5}));
  EXPECT_EQ(infer(OpKind::Lt, {f32({2}), f32({2})})[0], (TensorType{DType::boolean, {2}}));
  EXPECT_EQ(inferError(OpKind::Add, {f32({2, 3}), f32({4})}), "shapes [2,3] and [4] do not broadcast");
  EXPECT_EQ(inferError(OpKind::Add, {f32({2}), TensorType{DType::f64, {2}}}),
            "operands f32[2] and f64[2] have different dtypes");
}

TEST(ShapeRules, MatMul) {
  EXPECT_EQ(infer(OpKind::MatMul, {f32({2, 3}), f32({3, 4})})[0], f32({2, 4}));
  EXPECT_EQ(infer(OpKind::MatMul, {f32({7, 2, 3}), f32({4, 3})}, {{"transpose_b", true}})[0],
            f32({7, 2, 4}));
  EXPECT_EQ(infer(OpKind::MatMul, {f32({3, 2}), f32({3, 4})}, {{"transpose_a", true}})[0],
            f32({2, 4}));
  EXPECT_EQ(infer(OpKind::MatMul, {f32({5, 1, 2, 3}), f32({6, 3, 4})})[0], f32({5, 6, 2, 4}));
  EXPECT_EQ(inferError(OpKind::MatMul, {f32({2, 3}), f32({4, 5})}),
            "contraction dims differ: f32[2,3] and f32[4,5] (3 vs 4)");
}

TEST(ShapeRules, ReductionsAndLayout) {
  EXPECT_EQ(infer(OpKind::ReduceSum, {f32({2, 3, 4})}, {{"axes", std::vector<int64_t>{-1, 0}}})[0],
            f32({3}));
  EXPECT_EQ(infer(OpKind::ReduceMax, {f32({2, 3})},
                  {{"axes", std::vector<int64_t>{1}}, {"keepdims", true}})[0],
            f32({2, 1}));
  EXPECT_EQ(inferError(OpKind::ReduceSum, {f32({2})}, {{"axes", std::vector<int64_t>{1}}}),
            "axis 1 is out of range for rank 1");
  EXPECT_EQ(infer(OpKind::Transpose, {f32({2, 3, 4})}, {{"perm", std::vector<int64_t>{2, 0, 1}}})[0],
            f32({4, 2, 3}));
  EXPECT_EQ(inferError(OpKind::Reshape, {f32({2, 3})}, {{"shape", std::vector<int64_t>{4}}}),
            "cannot reshape f32[2,3] (6 elements) to [4] (4 elements)");
  EXPECT_EQ(infer(OpKind::Slice, {f32({10})},
                  {{"axis", int64_t{0}}, {"start", int64_t{1}}, {"end", int64_t{8}}, {"step", int64_t{3}}})[0],
            f32({3}));
  EXPECT_EQ(infer(OpKind::Concat, {f32({2, 3}), f32({2, 5})}, {{"axis", int64_t{-1}}})[0],
            f32({2, 8}));
  EXPECT_EQ(infer(OpKind::Gather, {f32({10, 4}), TensorType{DType::i32, {2, 3}}})[0],
            f32({2, 3, 4}));
  EXPECT_EQ(infer(OpKind::ScatterAdd, {TensorType{DType::i32, {2, 3}}, f32({2, 3, 4})},
                  {{"rows", int64_t{10}}})[0],
            f32({10, 4}));
  EXPECT_EQ(inferError(OpKind::Broadcast, {f32({3, 2})}, {{"shape", std::vector<int64_t>{3, 4}}}),
            "cannot broadcast f32[3,2] to [3,4]");
}

TEST(ShapeRules, AttributesCheckedAndDefaultsDropped) {
  AttrMap a{{"axes", std::vector<int64_t>{0}}, {"keepdims", false}};
  inferResultTypes(OpKind::ReduceSum, std::vector<TensorType>{f32({2})}, a, {});
  EXPECT_EQ(a.count("keepdims"), 0u) << "default-valued attributes are dropped";
  EXPECT_EQ(inferError(OpKind::ReduceSum, {f32({2})}), "missing required attribute 'axes'");
  EXPECT_EQ(inferError(OpKind::Softmax, {f32({2})}, {{"axes", int64_t{0}}}),
            "unknown attribute 'axes' (known: axis)");
  EXPECT_EQ(inferError(OpKind::Softmax, {f32({2})}, {{"axis", 1.5}}),
            "attribute 'axis' must be int, got float");
  EXPECT_EQ(inferError(OpKind::Relu, {f32({2}), f32({2})}), "takes 1 operand, got 2");
  AttrMap eps{{"eps", int64_t{1}}};  // an integer literal is accepted for a float attribute
  inferResultTypes(OpKind::LayerNorm, std::vector<TensorType>{f32({2, 4}), f32({4}), f32({4})}, eps, {});
  EXPECT_EQ(eps.at("eps"), Attr{1.0});
}

TEST(ShapeRules, SourcesTakeDeclaredType) {
  EXPECT_EQ(infer(OpKind::Input, {}, {}, {f32({2, 3})})[0], f32({2, 3}));
  EXPECT_EQ(inferError(OpKind::Constant, {}, {{"value", std::vector<double>{1, 2}}}, {f32({3})}),
            "value has 2 elements; f32[3] needs 1 or 3");
  TensorType i64s{DType::i64, {}};
  EXPECT_EQ(infer(OpKind::PhiloxUniform, {i64s, i64s}, {}, {f32({4})})[0], f32({4}));
  EXPECT_EQ(inferError(OpKind::PhiloxUniform, {i64s, i64s}, {}, {TensorType{DType::i32, {4}}}),
            "result must be a float type, got i32[4]");
}
