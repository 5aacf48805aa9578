// Bias gradients summed by the weight gradient's GEMM (runtime/gemm_epilogue.h,
// foldBiasGradients): which reduce_sums fold (keepdims or not, through reshapes, a
// transposed B summed over its last axis, a sum read before the matmul), near-misses that
// must not (the wrong axis, dY used transposed, a batched product, the switches), and the
// compiled graphs against the interpreter, with and without poisoned freed memory.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ir/interpreter.h"
#include "ir/parser.h"
#include "runtime/executable.h"
#include "runtime/gemm_epilogue.h"
#include "tests/runtime/fold_test_util.h"

namespace tgc {
namespace {

std::unique_ptr<Graph> parse(std::string text, DType dt = DType::f32) {
  return testing::parseAs(std::move(text), dt);
}

// A Linear's backward as autodiff and the executable's batch-reduction fold leave it: dW
// over the token rows (the GEMM's K = 21), db summed over the same rows of dY, once
// without and once with keepdims through a reshape; dY is computed by a kernel.
const char* kLinear = R"(
graph @linear_grad {
  %x = input() : T[3,7,13]
  %w = input() : T[13,5]
  %g = input() : T[3,7,5]
  %c = constant() {value=[0.5]} : T[]
  %dy = mul(%g, %c) : T[3,7,5]
  %x2 = reshape(%x) {shape=[21,13]} : T[21,13]
  %dy2 = reshape(%dy) {shape=[21,5]} : T[21,5]
  %dw = matmul(%x2, %dy2) {transpose_a=true} : T[13,5]
  %db = reduce_sum(%dy) {axes=[0,1]} : T[5]
  %dx = matmul(%dy, %w) {transpose_b=true} : T[3,7,13]
  %db1 = reduce_sum(%dy2) {axes=[-2], keepdims=true} : T[1,5]
  return %dw, %db, %dx, %db1
}
)";

// The batched weight gradient before the executable folds its batch reduction: dW =
// sum_b x_b^T dY_b, and db read (by the optimizer-like update) before the product.
const char* kBatched = R"(
graph @batched_grad {
  %x = input() : T[3,7,13]
  %dy = input() : T[3,7,5]
  %b = input() : T[5]
  %db = reduce_sum(%dy) {axes=[0,1]} : T[5]
  %lr = constant() {value=[0.125]} : T[]
  %step = mul(%db, %lr) : T[5]
  %newb = sub(%b, %step) : T[5]
  %dwb = matmul(%x, %dy) {transpose_a=true} : T[3,13,5]
  %dw = reduce_sum(%dwb) {axes=[0]} : T[13,5]
  return %dw, %newb
}
)";

// B stored transposed (n x k = 5 x 21): its K is the last axis, so that sum folds.
const char* kTransposedB = R"(
graph @transposed_b {
  %a = input() : T[13,21]
  %dyt = input() : T[5,21]
  %p = matmul(%a, %dyt) {transpose_b=true} : T[13,5]
  %db = reduce_sum(%dyt) {axes=[1]} : T[5]
  return %p, %db
}
)";

using Counts = testing::LaunchCounts;

void expectMatches(const Graph& g, Counts want, runtime::ExecOptions o = testing::testExecOptions()) {
  testing::expectCompiledMatches(g, want, 7, o);
}

// The names of the reduce_sums foldBiasGradients folds in g, and the matmul each joined.
std::map<std::string, std::string> folds(Graph& g) {
  runtime::GemmEpilogues table;
  const auto sums = runtime::foldBiasGradients(g, table);
  std::map<std::string, std::string> out;
  for (const auto& [mm, e] : table)
    if (e.sumB) out[e.sumB->name()] = mm->result()->name();
  EXPECT_EQ(out.size(), sums.size());
  return out;
}

TEST(BiasGradFold, LinearBackward) {
  auto g = parse(kLinear);
  const auto f = folds(*g);
  // db joins dW (dY2 is its B); db1 sums the same memory, but dW is taken and dx's B is w.
  EXPECT_EQ(f, (std::map<std::string, std::string>{{"db", "dw"}}));
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtypeName(dt));
    // dy's kernel and db1's: db is summed by dW's GEMM.
    expectMatches(*parse(kLinear, dt), {2, 2});
  }
}

TEST(BiasGradFold, KeepdimsThroughAReshape) {
  // Only the keepdims sum over dY2's rows (the reshape of dY): it joins dW.
  std::string text = kLinear;
  const std::string db = "%db = reduce_sum(%dy) {axes=[0,1]} : T[5]";
  text.replace(text.find(db), db.size(), "%db = reduce_sum(%dy) {axes=[2]} : T[3,7]");
  auto g = parse(text);
  EXPECT_EQ(folds(*g), (std::map<std::string, std::string>{{"db1", "dw"}}));
  expectMatches(*parse(text), {2, 2});
}

TEST(BiasGradFold, BatchedWeightGradientAndAnEarlyReader) {
  // The executable first turns dW into one GEMM over dY viewed as 21 x 5; db is then its
  // column sums, with the GEMM moved ahead of the update that reads db.
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtypeName(dt));
    expectMatches(*parse(kBatched, dt), {1, 1});  // the update's kernel only
  }
}

TEST(BiasGradFold, TransposedBSummedOverItsK) {
  auto g = parse(kTransposedB);
  EXPECT_EQ(folds(*g), (std::map<std::string, std::string>{{"db", "p"}}));
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtypeName(dt));
    expectMatches(*parse(kTransposedB, dt), {1, 0});
  }
}

// Each near-miss keeps its reduce_sum kernel and matches the interpreter.
void expectNoFold(const std::string& text, Counts want) {
  auto g = parse(text);
  EXPECT_TRUE(folds(*g).empty());
  expectMatches(*parse(text), want);
}

TEST(BiasGradFold, NearMissesDoNotFold) {
  {
    SCOPED_TRACE("the sum over dY's columns, not its rows (K)");
    expectNoFold(R"(
graph @g {
  %x = input() : T[21,13]
  %dy = input() : T[21,5]
  %dw = matmul(%x, %dy) {transpose_a=true} : T[13,5]
  %s = reduce_sum(%dy) {axes=[1]} : T[21]
  return %dw, %s
}
)", {1, 1});
  }
  {
    SCOPED_TRACE("dY used transposed: its rows are the product's columns, not K");
    expectNoFold(R"(
graph @g {
  %a = input() : T[13,5]
  %dy = input() : T[21,5]
  %p = matmul(%a, %dy) {transpose_b=true} : T[13,21]
  %db = reduce_sum(%dy) {axes=[0]} : T[5]
  return %p, %db
}
)", {1, 1});
  }
  {
    SCOPED_TRACE("a transposed B summed over its first axis");
    expectNoFold(R"(
graph @g {
  %a = input() : T[13,21]
  %dyt = input() : T[5,21]
  %p = matmul(%a, %dyt) {transpose_b=true} : T[13,5]
  %s = reduce_sum(%dyt) {axes=[0]} : T[21]
  return %p, %s
}
)", {1, 1});
  }
  {
    SCOPED_TRACE("a batched product (one GEMM per item; no batch reduction to fold)");
    expectNoFold(R"(
graph @g {
  %x = input() : T[3,7,13]
  %dy = input() : T[3,7,5]
  %dwb = matmul(%x, %dy) {transpose_a=true} : T[3,13,5]
  %db = reduce_sum(%dy) {axes=[0,1]} : T[5]
  return %dwb, %db
}
)", {1, 1});
  }
  {
    SCOPED_TRACE("a sum of other memory of the same shape");
    expectNoFold(R"(
graph @g {
  %x = input() : T[21,13]
  %dy = input() : T[21,5]
  %e = input() : T[21,5]
  %dw = matmul(%x, %dy) {transpose_a=true} : T[13,5]
  %db = reduce_sum(%e) {axes=[0]} : T[5]
  return %dw, %db
}
)", {1, 1});
  }
  {
    SCOPED_TRACE("every axis summed (a scalar, not db)");
    expectNoFold(R"(
graph @g {
  %x = input() : T[21,13]
  %dy = input() : T[21,5]
  %dw = matmul(%x, %dy) {transpose_a=true} : T[13,5]
  %s = reduce_sum(%dy) {axes=[0,1]} : T[]
  return %dw, %s
}
)", {1, 1});
  }
  {
    SCOPED_TRACE("db read before the product, whose operand is computed after that read");
    expectNoFold(R"(
graph @g {
  %x = input() : T[21,13]
  %dy = input() : T[21,5]
  %db = reduce_sum(%dy) {axes=[0]} : T[5]
  %c = constant() {value=[2.0]} : T[]
  %twice = mul(%db, %c) : T[5]
  %x2 = mul(%x, %c) : T[21,13]
  %dw = matmul(%x2, %dy) {transpose_a=true} : T[13,5]
  return %dw, %twice
}
)", {1, 3});
  }
}

// Mixed precision's FFN bias gradient: the weight gradient's GEMM reads the bf16 dY, and db
// sums the same bf16 values widened (cast to f32 read by the sum alone), so the bf16 GEMM
// sums them as it packs dY. Summing the f32 dY the bf16 copy was rounded from is another
// sum and must not fold, nor may a widening that something else reads too.
const char* kMixed = R"(
graph @mixed {
  %x = input() : bf16[21,13]
  %g = input() : f32[21,5]
  %dyb = cast(%g) {dtype=bf16} : bf16[21,5]
  %dw = matmul(%x, %dyb) {transpose_a=true} : bf16[13,5]
  %dyw = cast(%dyb) {dtype=f32} : f32[21,5]
  %db = reduce_sum(%dyw) {axes=[0]} : f32[5]
  return %dw, %db
}
)";

TEST(BiasGradFold, Bf16GemmSumsTheWidenedB) {
  auto g = parseGraph(kMixed);
  EXPECT_EQ(folds(*g->clone()), (std::map<std::string, std::string>{{"db", "dw"}}));
  auto exe = runtime::Executable::compile(*g, testing::testExecOptions());
  EXPECT_EQ(exe->stats().gemms, 1);
  EXPECT_EQ(exe->stats().kernels, 1);  // dY's cast to bf16 only
  auto in = testing::randomInputs(*g, 5);
  const auto want = Interpreter().run(*g, in);
  const auto got = exe->run(in);
  EXPECT_TRUE(testing::allClose(got[0], want[0], 1e-2, 1e-2));  // a bf16 product
  EXPECT_TRUE(testing::allClose(got[1], want[1], 1e-5, 1e-5));  // 21 bf16 values in f32

  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"%db = reduce_sum(%dyw)", "%db = reduce_sum(%g)"},  // the f32 dY
           {"return %dw, %db", "return %dw, %db, %dyw"}}) {      // the widening read twice
    SCOPED_TRACE(to);
    std::string text = kMixed;
    text.replace(text.find(from), from.size(), to);
    auto near = parseGraph(text);
    EXPECT_TRUE(folds(*near->clone()).empty());
    auto nearExe = runtime::Executable::compile(*near, testing::testExecOptions());
    auto nin = testing::randomInputs(*near, 6);
    const auto nwant = Interpreter().run(*near, nin);
    const auto ngot = nearExe->run(nin);
    for (size_t o = 1; o < ngot.size(); ++o)
      EXPECT_TRUE(testing::allClose(ngot[o], nwant[o], 1e-5, 1e-5)) << "output " << o;
  }
}

TEST(BiasGradFold, SwitchesTurnItOff) {
  const auto g = parse(kLinear);
  for (const char* var : {"TGC_NO_BIAS_GRAD_FOLD", "TGC_NO_GEMM_EPILOGUE"}) {
    SCOPED_TRACE(var);
    setenv(var, "1", 1);
    auto copy = g->clone();
    EXPECT_TRUE(folds(*copy).empty());
    expectMatches(*g, {2, 3});
    unsetenv(var);
  }
  SCOPED_TRACE("no fusion: one kernel per node");
  runtime::ExecOptions o = testing::testExecOptions();
  o.fuse = false;
  expectMatches(*g, {2, 3}, o);
}

}  // namespace
}  // namespace tgc
