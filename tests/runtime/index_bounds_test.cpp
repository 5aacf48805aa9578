// Integer inputs used as indices (runtime/index_bounds.h): which elements reach which index
// operand through reshape, slice, transpose, broadcast, concat and widening casts; the CPU
// executable refusing an index outside its table or a target outside the logits before it
// launches anything, in the interpreter's words; and gradcheck refusing to pass a check
// that compared nothing but zeros (runtime/gradcheck.h).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "runtime/executable.h"
#include "runtime/gradcheck.h"
#include "runtime/index_bounds.h"
#include "runtime/param_store.h"
#include "tests/ir/interp_test_util.h"
#include "tests/runtime/exec_test_util.h"

using namespace tgc;
using runtime::findIndexBounds;
using runtime::IndexBound;

namespace {

Tensor ids(DType dt, Shape shape, std::vector<int64_t> values) {
  Tensor t(TensorType{dt, std::move(shape)});
  for (int64_t i = 0; i < t.numel(); ++i) t.setI(i, values.at(static_cast<size_t>(i)));
  return t;
}

Tensor floats(Shape shape, double start = 0.25) {
  Tensor t(TensorType{DType::f32, std::move(shape)});
  for (int64_t i = 0; i < t.numel(); ++i) t.setF(i, start + 0.125 * static_cast<double>(i % 7));
  return t;
}

using interp_test::errorOf;

constexpr const char* kGather = R"(graph @g {
  %table = input() : f32[4,2]
  %i = input() : i64[3]
  %y = gather(%table, %i) : f32[3,2]
  return %y
}
)";

// A loss over 5 classes: logits from a table, targets an input with pad id 0.
constexpr const char* kCrossEntropy = R"(graph @ce {
  %logits = input() : f32[2,3,5]
  %tgt = input() : i32[2,3]
  %per_token, %lse = softmax_cross_entropy(%logits, %tgt) : f32[2,3], f32[2,3]
  %loss = reduce_sum(%per_token) {axes=[0, 1]} : f32[]
  return %loss
}
)";

std::unique_ptr<runtime::Executable> compileCpu(const Graph& g) {
  return runtime::Executable::compile(g, tgc::testing::testExecOptions());
}

// ---- the analysis ------------------------------------------------------------------------------

TEST(IndexBounds, DirectGatherCoversTheWholeInput) {
  auto g = parseGraph(kGather, "g.tir");
  auto bounds = findIndexBounds(*g);
  ASSERT_EQ(bounds.size(), 1u);
  EXPECT_EQ(bounds[0].input, "i");
  EXPECT_EQ(bounds[0].hi, 4);
  EXPECT_EQ(bounds[0].kind, IndexBound::Kind::Row);
  EXPECT_TRUE(bounds[0].positions.empty());
  EXPECT_EQ(bounds[0].op, "gather %y (f32[4,2], i64[3])");
}

TEST(IndexBounds, CrossEntropyAndItsGradientAreOneBound) {
  auto g = parseGraph(R"(graph @ce {
  %logits = input() : f32[6,5]
  %tgt = input() : i64[6]
  %dloss = input() : f32[6]
  %per_token, %lse = softmax_cross_entropy(%logits, %tgt) : f32[6], f32[6]
  %d = softmax_cross_entropy_grad(%logits, %tgt, %lse, %dloss) : f32[6,5]
  return %per_token, %d
}
)");
  auto bounds = findIndexBounds(*g);
  ASSERT_EQ(bounds.size(), 1u);
  EXPECT_EQ(bounds[0].input, "tgt");
  EXPECT_EQ(bounds[0].hi, 5);
  EXPECT_EQ(bounds[0].kind, IndexBound::Kind::Target);
  EXPECT_EQ(bounds[0].op.rfind("softmax_cross_entropy %per_token", 0), 0u) << bounds[0].op;
}

// A language model's tokens [B, T+1]: inputs are columns 0..T-1 (an embedding table), targets
// columns 1..T (the logits' classes); each bound covers only the columns that reach it.
TEST(IndexBounds, SlicesKeepTheirPositions) {
  auto g = parseGraph(R"(graph @lm {
  %tokens = input() : i64[2,4]
  %emb = input() : f32[7,3]
  %logits = input() : f32[2,3,9]
  %x = slice(%tokens) {axis=1, start=0, end=3} : i64[2,3]
  %t = slice(%tokens) {axis=1, start=1, end=4} : i64[2,3]
  %flat = reshape(%x) {shape=[6]} : i64[6]
  %h = gather(%emb, %flat) : f32[6,3]
  %per_token, %lse = softmax_cross_entropy(%logits, %t) : f32[2,3], f32[2,3]
  return %h, %per_token
}
)");
  auto bounds = findIndexBounds(*g);
  ASSERT_EQ(bounds.size(), 2u);
  EXPECT_EQ(bounds[0].hi, 7);
  EXPECT_EQ(bounds[0].positions, (std::vector<int64_t>{0, 1, 2, 4, 5, 6}));
  EXPECT_EQ(bounds[1].hi, 9);
  EXPECT_EQ(bounds[1].positions, (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));

  // Column 3 may be 8 (a target), column 0 may not be (an embedding row of 7).
  const Tensor ok = ids(DType::i64, {2, 4}, {1, 2, 3, 8, 6, 5, 4, 8});
  for (const auto& b : bounds) EXPECT_NO_THROW(runtime::checkIndexBound(b, ok.data()));
  const Tensor bad = ids(DType::i64, {2, 4}, {1, 2, 3, 8, 6, 7, 4, 8});
  EXPECT_EQ(errorOf([&] { runtime::checkIndexBound(bounds[0], bad.data()); }),
            "gather %h (f32[7,3], i64[6]): index 7 (at position [1, 1] of input %tokens) is out "
            "of range for a table of 7 rows; valid indices are [0, 7)");
}

TEST(IndexBounds, TransposeBroadcastConcatAndWideningCastsAreFollowed) {
  auto g = parseGraph(R"(graph @mix {
  %a = input() : i32[2,3]
  %b = input() : i64[1]
  %table = input() : f32[10,2]
  %at = transpose(%a) {perm=[1, 0]} : i32[3,2]
  %wide = cast(%at) {dtype=i64} : i64[3,2]
  %bb = broadcast(%b) {shape=[3,1]} : i64[3,1]
  %both = concat(%wide, %bb) {axis=1} : i64[3,3]
  %y = gather(%table, %both) : f32[3,3,2]
  return %y
}
)");
  auto bounds = findIndexBounds(*g);
  ASSERT_EQ(bounds.size(), 2u);
  EXPECT_EQ(bounds[0].input, "a");
  EXPECT_TRUE(bounds[0].positions.empty());
  EXPECT_EQ(bounds[1].input, "b");
  EXPECT_TRUE(bounds[1].positions.empty());
  // The position named is the input's own, not the gather's.
  const Tensor a = ids(DType::i32, {2, 3}, {0, 1, 2, 3, 4, 10});
  EXPECT_EQ(errorOf([&] { runtime::checkIndexBound(bounds[0], a.data()); }),
            "gather %y (f32[10,2], i64[3,3]): index 10 (at position [1, 2] of input %a) is out "
            "of range for a table of 10 rows; valid indices are [0, 10)");
  auto exe = compileCpu(*g);
  EXPECT_EQ(errorOf([&] {
              exe->run({{"a", ids(DType::i32, {2, 3}, {0, 1, 2, 3, 4, 5})},
                        {"b", ids(DType::i64, {1}, {-3})},
                        {"table", floats({10, 2})}});
            }),
            "gather %y (f32[10,2], i64[3,3]): index -3 (at position [0] of input %b) is out of "
            "range for a table of 10 rows; valid indices are [0, 10)");
}

TEST(IndexBounds, ArithmeticAndNarrowingCastsEndTheTrace) {
  auto g = parseGraph(R"(graph @stop {
  %a = input() : i64[3]
  %b = input() : i64[3]
  %table = input() : f32[4,2]
  %one = constant() {value=[1]} : i64[3]
  %shifted = add(%a, %one) : i64[3]
  %narrow = cast(%b) {dtype=i32} : i32[3]
  %y = gather(%table, %shifted) : f32[3,2]
  %z = gather(%table, %narrow) : f32[3,2]
  return %y, %z
}
)");
  EXPECT_TRUE(findIndexBounds(*g).empty());
}

TEST(IndexBounds, AGatherAndItsScatterAddAreOneBound) {
  auto g = parseGraph(R"(graph @emb {
  %table = input() : f32[5,2]
  %i = input() : i64[2,2]
  %dy = input() : f32[2,2,2]
  %y = gather(%table, %i) : f32[2,2,2]
  %dt = scatter_add(%i, %dy) {rows=5} : f32[5,2]
  %big = scatter_add(%i, %dy) {rows=9} : f32[9,2]
  return %y, %dt, %big
}
)");
  auto bounds = findIndexBounds(*g);
  ASSERT_EQ(bounds.size(), 2u);
  EXPECT_EQ(bounds[0].op.rfind("gather %y", 0), 0u);
  EXPECT_EQ(bounds[1].hi, 9);
  EXPECT_EQ(bounds[1].op.rfind("scatter_add %big", 0), 0u);
}

// ---- the CPU executable ------------------------------------------------------------------------

TEST(IndexBoundsCpu, GatherIndexTooLargeIsAnErrorNamingTheInput) {
  auto g = parseGraph(kGather, "g.tir");
  auto exe = compileCpu(*g);
  std::map<std::string, Tensor> in{{"table", floats({4, 2})},
                                   {"i", ids(DType::i64, {3}, {0, 4, 1})}};
  const std::string msg = errorOf([&] { exe->run(in); });
  EXPECT_EQ(msg, "gather %y (f32[4,2], i64[3]): index 4 (at position [1] of input %i) is out of "
                 "range for a table of 4 rows; valid indices are [0, 4)");
  // The interpreter's message for the same input starts the same way.
  const std::string ref = errorOf([&] { Interpreter().run(*g, in); });
  EXPECT_EQ(ref.rfind("gather %y (f32[4,2], i64[3]): index 4 (at position 1", 0), 0u) << ref;
}

TEST(IndexBoundsCpu, NegativeGatherIndexIsAnError) {
  auto g = parseGraph(kGather, "g.tir");
  auto exe = compileCpu(*g);
  std::map<std::string, Tensor> in{{"table", floats({4, 2})},
                                   {"i", ids(DType::i64, {3}, {3, 2, -1})}};
  EXPECT_EQ(errorOf([&] { exe->run(in); }),
            "gather %y (f32[4,2], i64[3]): index -1 (at position [2] of input %i) is out of "
            "range for a table of 4 rows; valid indices are [0, 4)");
}

TEST(IndexBoundsCpu, CrossEntropyTargetBeyondTheClassesIsAnError) {
  auto g = parseGraph(kCrossEntropy, "ce.tir");
  auto exe = compileCpu(*g);
  std::map<std::string, Tensor> in{{"logits", floats({2, 3, 5})},
                                   {"tgt", ids(DType::i32, {2, 3}, {1, 2, 3, 4, 5, 0})}};
  EXPECT_EQ(errorOf([&] { exe->run(in); }),
            "softmax_cross_entropy %per_token (f32[2,3,5], i32[2,3]): target 5 (at position "
            "[1, 1] of input %tgt) is outside [0, 5)");
  const std::string ref = errorOf([&] { Interpreter().run(*g, in); });
  EXPECT_EQ(ref.rfind("softmax_cross_entropy %per_token (f32[2,3,5], i32[2,3]): target 5 ", 0), 0u)
      << ref;
}

// The op has no ignore index: padding is the graph's mask over the targets, and the pad id
// (0 in the project's models) is a class like any other. Every id in [0, V) runs, and gives
// the interpreter's loss.
TEST(IndexBoundsCpu, PadAndEveryClassInRangePass) {
  auto g = parseGraph(kCrossEntropy, "ce.tir");
  auto exe = compileCpu(*g);
  std::map<std::string, Tensor> in{{"logits", floats({2, 3, 5})},
                                   {"tgt", ids(DType::i32, {2, 3}, {0, 1, 2, 3, 4, 0})}};
  std::vector<Tensor> out;
  ASSERT_NO_THROW(out = exe->run(in));
  const double ref = Interpreter().run(*g, in)[0].getF(0);
  EXPECT_NEAR(out[0].getF(0), ref, 1e-5 * std::abs(ref));
  EXPECT_GT(ref, 0);
}

TEST(IndexBoundsCpu, InRangeGatherMatchesTheInterpreter) {
  auto g = parseGraph(kGather, "g.tir");
  auto exe = compileCpu(*g);
  std::map<std::string, Tensor> in{{"table", floats({4, 2})},
                                   {"i", ids(DType::i64, {3}, {3, 0, 2})}};
  const Tensor got = exe->run(in)[0];
  const Tensor want = Interpreter().run(*g, in)[0];
  for (int64_t k = 0; k < want.numel(); ++k) EXPECT_EQ(got.getF(k), want.getF(k)) << k;
}

// A training step (runStep) checks its batch before it updates anything.
TEST(IndexBoundsCpu, RunStepChecksTheBatchBeforeUpdatingTheState) {
  auto g = parseGraph(R"(graph @step {
  %w = input() {role="param"} : f32[4,2]
  %i = input() : i64[3]
  %y = gather(%w, %i) : f32[3,2]
  %s = reduce_sum(%y) {axes=[0, 1]} : f32[]
  %half = constant() {value=[0.5]} : f32[4,2]
  %new.w = mul(%w, %half) : f32[4,2]
  return %s, %new.w
}
)");
  runtime::ExecOptions o = tgc::testing::testExecOptions();
  o.updateInPlace = true;
  auto exe = runtime::Executable::compile(*g, o);
  runtime::ParamStore store;
  store.set("w", floats({4, 2}));
  const double before = store.at("w").getF(0);
  std::map<std::string, Tensor> batch{{"i", ids(DType::i64, {3}, {0, 1, 7})}};
  EXPECT_EQ(errorOf([&] { exe->runStep(store, batch); }),
            "gather %y (f32[4,2], i64[3]): index 7 (at position [2] of input %i) is out of "
            "range for a table of 4 rows; valid indices are [0, 4)");
  EXPECT_EQ(store.at("w").getF(0), before);
  batch.at("i") = ids(DType::i64, {3}, {0, 1, 3});
  exe->runStep(store, batch);
  EXPECT_EQ(store.at("w").getF(0), before * 0.5);
}

// ---- gradcheck ---------------------------------------------------------------------------------

// loss = sum(x * x): %w is an input the loss never reads, so its gradient and every finite
// difference are exactly 0 and the comparison could not fail.
TEST(GradCheckProvedNothing, AllZeroGradientsAndDifferencesSaySo) {
  auto g = parseGraph(R"(graph @blind {
  %x = input() : f64[3]
  %w = input() {role="param"} : f64[2,2]
  %xx = mul(%x, %x) : f64[3]
  %loss = reduce_sum(%xx) {axes=[0]} : f64[]
  return %loss
}
)");
  std::map<std::string, Tensor> in{{"x", toF64(floats({3}))}, {"w", toF64(floats({2, 2}))}};
  auto results = gradCheck(*g, in, {"w"}, GradCheckOptions{.samples_per_tensor = 3});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].checked, 3);
  EXPECT_EQ(results[0].max_rel_error, 0);
  EXPECT_EQ(gradCheckProvedNothing(results),
            "gradcheck proved nothing: every checked gradient and every finite difference is 0 "
            "(3 entries of 1 tensors); the loss does not depend on the checked values on this "
            "batch");
  // One tensor with a real gradient is enough to prove something.
  results = gradCheck(*g, in, {"w", "x"}, GradCheckOptions{.samples_per_tensor = 3});
  EXPECT_EQ(gradCheckProvedNothing(results), "");
  EXPECT_GT(results[1].max_abs_analytic, 0);
  EXPECT_GT(results[1].max_abs_numeric, 0);
}

TEST(GradCheckProvedNothing, NoEntryCheckedSaysSo) {
  EXPECT_EQ(gradCheckProvedNothing({}),
            "gradcheck proved nothing: no entry was checked (0 tensors)");
}

}  // namespace
