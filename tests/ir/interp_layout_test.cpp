// Interpreter: data movement (reshape, transpose, broadcast, slice, concat) and indexing
// (gather, scatter_add with duplicates and out-of-range indices).
#include <fmt/format.h>

#include <cstdint>

#include "tests/ir/interp_test_util.h"

namespace tgc {
namespace {

using namespace interp_test;

constexpr int64_t k2p53 = int64_t{1} << 53;

std::vector<double> range(int n, double start = 0) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(start + i);
  return v;
}

INTERP_OP_TEST(Reshape, KeepsRowMajorOrder) {
  Tensor x = T(DType::f32, {2, 3}, range(6));
  expectExact(runOp(OpKind::Reshape, {x}, {{"shape", Shape{3, 2}}}), ty(DType::f32, {3, 2}),
              range(6));
  expectExact(runOp(OpKind::Reshape, {x}, {{"shape", Shape{1, 2, 1, 3}}}),
              ty(DType::f32, {1, 2, 1, 3}), range(6));
  expectExact(runOp(OpKind::Reshape, {T(DType::f32, {1, 1}, {7})}, {{"shape", Shape{}}}),
              ty(DType::f32, {}), {7});
  expectInts(
      runOp(OpKind::Reshape, {TI(DType::i64, {2}, {k2p53 + 1, -1})}, {{"shape", Shape{2, 1}}}),
      ty(DType::i64, {2, 1}), {k2p53 + 1, -1});
  expectExact(
      runOp(OpKind::Reshape, {T(DType::boolean, {4}, {1, 0, 0, 1})}, {{"shape", Shape{2, 2}}}),
      ty(DType::boolean, {2, 2}), {1, 0, 0, 1});
}

INTERP_OP_TEST(Transpose, Matrix) {
  expectExact(runOp(OpKind::Transpose, {T(DType::f32, {2, 3}, range(6))}, {{"perm", Shape{1, 0}}}),
              ty(DType::f32, {3, 2}), {0, 3, 1, 4, 2, 5});
  expectInts(runOp(OpKind::Transpose, {TI(DType::i64, {1, 2}, {k2p53 + 1, k2p53 + 3})},
                   {{"perm", Shape{1, 0}}}),
             ty(DType::i64, {2, 1}), {k2p53 + 1, k2p53 + 3});
}

INTERP_OP_TEST(Transpose, Rank3Permutation) {
  // x[i, j, k] = 12 i + 4 j + k, shape [2, 3, 4]; result dim d is operand dim perm[d], so with
  // perm [2, 0, 1] the result r[a, b, c] = x[b, c, a] = 12 b + 4 c + a, shape [4, 2, 3].
  std::vector<double> want;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c) want.push_back(12 * b + 4 * c + a);
  expectExact(
      runOp(OpKind::Transpose, {T(DType::f64, {2, 3, 4}, range(24))}, {{"perm", Shape{2, 0, 1}}}),
      ty(DType::f64, {4, 2, 3}), want);
  // The identity permutation changes nothing.
  expectExact(
      runOp(OpKind::Transpose, {T(DType::f64, {2, 3, 4}, range(24))}, {{"perm", Shape{0, 1, 2}}}),
      ty(DType::f64, {2, 3, 4}), range(24));
}

INTERP_OP_TEST(Broadcast, ToShape) {
  expectExact(runOp(OpKind::Broadcast, {T(DType::f32, {3}, {1, 2, 3})}, {{"shape", Shape{2, 3}}}),
              ty(DType::f32, {2, 3}), {1, 2, 3, 1, 2, 3});
  expectExact(runOp(OpKind::Broadcast, {T(DType::f32, {2, 1}, {1, 2})}, {{"shape", Shape{2, 3}}}),
              ty(DType::f32, {2, 3}), {1, 1, 1, 2, 2, 2});
  expectExact(runOp(OpKind::Broadcast, {T(DType::f32, {}, {5})}, {{"shape", Shape{2, 2}}}),
              ty(DType::f32, {2, 2}), {5, 5, 5, 5});
  // [1, 3, 1] -> [2, 3, 4]: r[i, j, k] = x[j].
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) want.push_back(10 * (j + 1));
  expectExact(runOp(OpKind::Broadcast, {T(DType::i32, {1, 3, 1}, {10, 20, 30})},
                    {{"shape", Shape{2, 3, 4}}}),
              ty(DType::i32, {2, 3, 4}), want);
}

Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step = 1) {
  return runOp(OpKind::Slice, {x},
               {{"axis", axis}, {"start", start}, {"end", end}, {"step", step}});
}

INTERP_OP_TEST(Slice, StepsAndAxes) {
  Tensor x = T(DType::f32, {2, 6}, range(12));  // x[i, j] = 6 i + j
  expectExact(slice(x, 1, 1, 5, 2), ty(DType::f32, {2, 2}), {1, 3, 7, 9});
  expectExact(slice(x, -1, 0, 6, 3), ty(DType::f32, {2, 2}), {0, 3, 6, 9});
  expectExact(slice(x, 1, 2, 6, 5), ty(DType::f32, {2, 1}), {2, 8});
  expectExact(slice(x, 1, 1, 4), ty(DType::f32, {2, 3}), {1, 2, 3, 7, 8, 9});
  expectExact(slice(x, 0, 1, 2), ty(DType::f32, {1, 6}), range(6, 6));
  expectExact(slice(x, 1, 3, 3), ty(DType::f32, {2, 0}), {});
  // Middle axis of a rank-3 tensor: x[i, j, k] = 12 i + 4 j + k, keep j = 0 and 2.
  expectExact(slice(T(DType::f32, {2, 3, 4}, range(24)), 1, 0, 3, 2), ty(DType::f32, {2, 2, 4}),
              {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23});
}

INTERP_OP_TEST(Concat, Axes) {
  Tensor a = T(DType::f32, {2, 1}, {1, 2});
  Tensor b = T(DType::f32, {2, 2}, {3, 4, 5, 6});
  expectExact(runOp(OpKind::Concat, {a, b}, {{"axis", int64_t{1}}}), ty(DType::f32, {2, 3}),
              {1, 3, 4, 2, 5, 6});
  expectExact(runOp(OpKind::Concat, {b, a, a}, {{"axis", int64_t{-1}}}), ty(DType::f32, {2, 4}),
              {3, 4, 1, 1, 5, 6, 2, 2});
  expectExact(runOp(OpKind::Concat,
                    {T(DType::f32, {1, 3}, {1, 2, 3}), T(DType::f32, {2, 3}, {4, 5, 6, 7, 8, 9})},
                    {{"axis", int64_t{0}}}),
              ty(DType::f32, {3, 3}), range(9, 1));
  expectExact(runOp(OpKind::Concat, {a}, {{"axis", int64_t{0}}}), ty(DType::f32, {2, 1}), {1, 2});
  expectInts(runOp(OpKind::Concat,
                   {TI(DType::i64, {1}, {k2p53 + 1}), TI(DType::i64, {0}, {}),
                    TI(DType::i64, {2}, {-1, k2p53 + 3})},
                   {{"axis", int64_t{0}}}),
             ty(DType::i64, {3}), {k2p53 + 1, -1, k2p53 + 3});
}

// table[r] = [10 r, 10 r + 1].
Tensor table4x2() { return T(DType::f32, {4, 2}, {0, 1, 10, 11, 20, 21, 30, 31}); }

INTERP_OP_TEST(Gather, Rows) {
  expectExact(runOp(OpKind::Gather, {table4x2(), TI(DType::i32, {2, 3}, {3, 0, 3, 1, 1, 2})}),
              ty(DType::f32, {2, 3, 2}), {30, 31, 0, 1, 30, 31, 10, 11, 10, 11, 20, 21});
  expectInts(
      runOp(OpKind::Gather, {TI(DType::i64, {3}, {k2p53 + 1, 5, -7}), TI(DType::i64, {}, {2})}),
      ty(DType::i64, {}), {-7});
  expectInts(
      runOp(OpKind::Gather, {TI(DType::i64, {3}, {k2p53 + 1, 5, -7}), TI(DType::i64, {2}, {0, 0})}),
      ty(DType::i64, {2}), {k2p53 + 1, k2p53 + 1});
}

INTERP_OP_TEST(Gather, IndexOutOfRangeIsAnError) {
  for (int64_t bad : {int64_t{4}, int64_t{-1}}) {
    std::string msg = errorOf([&] {
      runOp(OpKind::Gather, {table4x2(), TI(DType::i64, {3}, {0, bad, 1})});
    });
    EXPECT_NE(msg.find("gather %out"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fmt::format("index {} ", bad)), std::string::npos) << msg;
    EXPECT_NE(msg.find("position 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("4 rows"), std::string::npos) << msg;
  }
}

Tensor scatterAdd(const Tensor& idx, const Tensor& upd, int64_t rows) {
  return runOp(OpKind::ScatterAdd, {idx, upd}, {{"rows", rows}});
}

INTERP_OP_TEST(ScatterAdd, DuplicatesAccumulate) {
  // Rows 1 appears twice: [1, 2] + [5, 6]. Rows 2 and 4 get nothing.
  expectExact(scatterAdd(TI(DType::i64, {4}, {1, 3, 1, 0}),
                         T(DType::f32, {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}), 5),
              ty(DType::f32, {5, 2}), {7, 8, 6, 8, 0, 0, 3, 4, 0, 0});
  // Indices [2, 2] against updates [2, 2, 3]; all four go to rows 0 and 2.
  expectInts(
      scatterAdd(TI(DType::i32, {2, 2}, {0, 2, 2, 0}),
                 TI(DType::i32, {2, 2, 3}, {1, 2, 3, 10, 20, 30, 100, 200, 300, 1000, 2000, 3000}),
                 3),
      ty(DType::i32, {3, 3}), {1001, 2002, 3003, 0, 0, 0, 110, 220, 330});
  // Scalar rows: updates [3] at indices [3].
  expectExact(scatterAdd(TI(DType::i32, {3}, {1, 1, 1}), T(DType::f64, {3}, {0.5, 0.25, 0.125}), 2),
              ty(DType::f64, {2}), {0, 0.875});
}

INTERP_OP_TEST(ScatterAdd, SixteenBitAccumulatesBeforeRounding) {
  // 256 + 1 + 1 = 258 in bf16 only if the duplicates are summed before rounding.
  expectExact(scatterAdd(TI(DType::i32, {3}, {0, 0, 0}), T(DType::bf16, {3}, {256, 1, 1}), 1),
              ty(DType::bf16, {1}), {258});
}

INTERP_OP_TEST(ScatterAdd, IndexOutOfRangeIsAnError) {
  std::string msg = errorOf([] {
    scatterAdd(TI(DType::i64, {2}, {0, 5}), T(DType::f32, {2}, {1, 2}), 5);
  });
  EXPECT_NE(msg.find("scatter_add %out"), std::string::npos) << msg;
  EXPECT_NE(msg.find("index 5 "), std::string::npos) << msg;
  EXPECT_NE(msg.find("5 rows"), std::string::npos) << msg;
}

INTERP_OP_TEST(DynamicUpdateSlice, WritesTheUpdateAtTheStarts) {
  // A [2, 3] block into a [3, 4] at (1, 1); elsewhere the operand.
  const Tensor x = T(DType::f32, {3, 4}, {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23});
  expectExact(runOp(OpKind::DynamicUpdateSlice, {x, T(DType::f32, {2, 3}, {-1, -2, -3, -4, -5, -6}),
                                                 TI(DType::i64, {2}, {1, 1})}),
              ty(DType::f32, {3, 4}), {0, 1, 2, 3, 10, -1, -2, -3, 20, -4, -5, -6});
  // One row of a [2, 2, 3, 1] cache at layer 1, position 2 (a decoder's key cache); ints.
  expectInts(runOp(OpKind::DynamicUpdateSlice, {TI(DType::i64, {2, 2, 3, 1}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}),
                                                TI(DType::i64, {1, 2, 1, 1}, {-7, -8}),
                                                TI(DType::i64, {4}, {1, 0, 2, 0})}),
             ty(DType::i64, {2, 2, 3, 1}), {0, 1, 2, 3, 4, 5, 6, 7, -7, 9, 10, -8});
  // A scalar: the update itself.
  expectExact(runOp(OpKind::DynamicUpdateSlice, {T(DType::f64, {}, {1}), T(DType::f64, {}, {2}), TI(DType::i64, {0}, {})}),
              ty(DType::f64, {}), {2});
}

INTERP_OP_TEST(DynamicUpdateSlice, StartOutOfRangeIsAnError) {
  for (int64_t bad : {int64_t{3}, int64_t{-1}}) {
    std::string msg = errorOf([&] {
      runOp(OpKind::DynamicUpdateSlice, {T(DType::f32, {2, 4}, {0, 0, 0, 0, 0, 0, 0, 0}),
                                         T(DType::f32, {2, 2}, {1, 2, 3, 4}), TI(DType::i64, {2}, {0, bad})});
    });
    EXPECT_NE(msg.find("dynamic_update_slice %out"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fmt::format("start {} of dim 1", bad)), std::string::npos) << msg;
    EXPECT_NE(msg.find("[0, 2]"), std::string::npos) << msg;
  }
  // Shapes are checked when the op is made.
  EXPECT_NE(errorOf([] {
              runOp(OpKind::DynamicUpdateSlice, {T(DType::f32, {2}, {0, 0}), T(DType::f32, {3}, {1, 2, 3}),
                                                 TI(DType::i64, {1}, {0})});
            }).find("does not fit"),
            std::string::npos);
}

}  // namespace
}  // namespace tgc
