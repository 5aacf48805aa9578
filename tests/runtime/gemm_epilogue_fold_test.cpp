// Folding the ops after a matmul into its GEMM epilogue (runtime/gemm_epilogue.h): which
// chains fold (and into which stages), near-misses that must not, and compiled graphs with
// folds against the interpreter, with and without poisoned freed memory, f32 and f64.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "ir/interpreter.h"
#include "ir/parser.h"
#include "runtime/executable.h"
#include "runtime/gemm_epilogue.h"
#include "tests/runtime/fold_test_util.h"

namespace tgc {
namespace {

using codegen::GemmActivation;
using codegen::GemmMask;

std::unique_ptr<Graph> parse(std::string text, DType dt = DType::f32) {
  return testing::parseAs(std::move(text), dt);
}

// The FFN forward and the ReLU gradient of its backward as autodiff writes them: the test
// reads the pre-activation %y1.
const char* kFfn = R"(
graph @ffn {
  %x = input() : T[3,7,13]
  %w1 = input() : T[13,33]
  %b1 = input() : T[33]
  %w2 = input() : T[33,5]
  %dy = input() : T[3,7,5]
  %y = matmul(%x, %w1) : T[3,7,33]
  %y1 = add(%y, %b1) : T[3,7,33]
  %h = relu(%y1) : T[3,7,33]
  %o = matmul(%h, %w2) : T[3,7,5]
  %zero = constant() {value=[0.0]} : T[]
  %dh = matmul(%dy, %w2) {transpose_b=true} : T[3,7,33]
  %pos = gt(%y1, %zero) : bool[3,7,33]
  %dy1 = where(%pos, %dh, %zero) : T[3,7,33]
  return %o, %dy1
}
)";

// Every stage at once, batched like attention: alpha, bias, addend, gelu (tanh), scale and
// a bool mask.
const char* kAllStages = R"(
graph @all {
  %a = input() : T[2,3,5,9]
  %b = input() : T[2,3,11,9]
  %bias = input() : T[11]
  %r = input() : T[2,3,5,11]
  %m = input() : bool[2,3,5,11]
  %z = matmul(%a, %b) {transpose_b=true} : T[2,3,5,11]
  %c2 = constant() {value=[0.25]} : T[]
  %s = mul(%c2, %z) : T[2,3,5,11]
  %t = add(%bias, %s) : T[2,3,5,11]
  %u = add(%t, %r) : T[2,3,5,11]
  %g = gelu(%u) {approximate="tanh"} : T[2,3,5,11]
  %c3 = constant() {value=[-1.5]} : T[]
  %v = mul(%g, %c3) : T[2,3,5,11]
  %zero = constant() {value=[0.0]} : T[]
  %w = where(%m, %v, %zero) : T[2,3,5,11]
  return %w
}
)";

// Gradient sums: each product adds the one before (as autodiff sums the gradients of a
// value used three times), with a GELU (erf) forward whose output feeds a GEMM.
const char* kSums = R"(
graph @sums {
  %x = input() : T[4,6,10]
  %w = input() : T[10,17]
  %bias = input() : T[1,17]
  %d1 = input() : T[4,6,17]
  %v = input() : T[17,10]
  %p = matmul(%x, %w) : T[4,6,17]
  %q = add(%p, %bias) : T[4,6,17]
  %g = gelu(%q) : T[4,6,17]
  %a1 = matmul(%g, %v) : T[4,6,10]
  %a2 = matmul(%d1, %v) : T[4,6,10]
  %s1 = add(%a1, %a2) : T[4,6,10]
  %a3 = matmul(%x, %w) : T[4,6,17]
  %a4 = matmul(%a3, %v) : T[4,6,10]
  %s2 = add(%s1, %a4) : T[4,6,10]
  return %s2
}
)";

using Counts = testing::LaunchCounts;

void expectMatches(const Graph& g, Counts want) { testing::expectCompiledMatches(g, want, 5); }

TEST(GemmEpilogueFold, FfnForwardAndReluGradient) {
  auto g = parse(kFfn);
  auto folded = runtime::foldGemmEpilogues(*g);
  ASSERT_EQ(folded.size(), 2u);
  int relu = 0, mask = 0;
  for (const auto& [mm, e] : folded) {
    if (e.stages.activation == GemmActivation::relu) {
      ++relu;
      EXPECT_TRUE(e.stages.bias);
      EXPECT_EQ(mm->result()->name(), "h");
    }
    if (e.stages.mask == GemmMask::positive) {
      ++mask;
      EXPECT_EQ(mm->result()->name(), "dy1");
    }
  }
  EXPECT_EQ(relu, 1);
  EXPECT_EQ(mask, 1);
  EXPECT_EQ(g->findValue("y1"), nullptr);  // the pre-activation is gone
  EXPECT_EQ(g->findValue("pos"), nullptr);
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtypeName(dt));
    expectMatches(*parse(kFfn, dt), {3, 0});
  }
}

// The FFN forward with dropout on the hidden activations, as the frontend writes it: its
// output d is stored anyway (the second GEMM reads it, and it is returned), so the keep mask
// is stored for GEMM1's epilogue and the hidden activation h never exists in memory.
const char* kFfnDropout = R"(
graph @ffn_dropout {
  %x = input() : T[3,7,13]
  %w1 = input() : T[13,33]
  %b1 = input() : T[33]
  %w2 = input() : T[33,5]
  %seed = input() : i64[]
  %off = input() : i64[]
  %y = matmul(%x, %w1) : T[3,7,33]
  %y1 = add(%y, %b1) : T[3,7,33]
  %h = relu(%y1) : T[3,7,33]
  %rand = philox_uniform(%seed, %off) : T[3,7,33]
  %p = constant() {value=[0.25]} : T[]
  %keep = ge(%rand, %p) : bool[3,7,33]
  %s = constant() {value=[1.3333333333333333]} : T[]
  %hs = mul(%h, %s) : T[3,7,33]
  %zero = constant() {value=[0.0]} : T[]
  %d = where(%keep, %hs, %zero) : T[3,7,33]
  %o = matmul(%d, %w2) : T[3,7,5]
  return %o, %d
}
)";

TEST(GemmEpilogueFold, FfnDropoutMaskInTheEpilogue) {
  auto g = parse(kFfnDropout);
  auto folded = runtime::foldGemmEpilogues(*g);
  ASSERT_EQ(folded.size(), 1u);
  const runtime::FoldedEpilogue& e = folded.begin()->second;
  EXPECT_TRUE(e.stages.bias);
  EXPECT_EQ(e.stages.activation, GemmActivation::relu);
  EXPECT_EQ(e.stages.scale, static_cast<double>(static_cast<float>(1.3333333333333333)));
  EXPECT_EQ(e.stages.mask, GemmMask::nonzero);
  EXPECT_EQ(g->findValue("h"), nullptr);
  EXPECT_EQ(g->findValue("hs"), nullptr);
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtypeName(dt));
    auto graph = parse(kFfnDropout, dt);
    expectMatches(*graph, {2, 1});  // the keep mask's kernel, GEMM1 with d's epilogue, GEMM2
    // Bit for bit the values of the unfolded stream (GEMM, then one kernel for the rest).
    auto in = testing::randomInputs(*graph, 9);
    auto fused = runtime::Executable::compile(*graph, testing::testExecOptions())->run(in);
    setenv("TGC_NO_GEMM_EPILOGUE", "1", 1);
    auto plain = runtime::Executable::compile(*graph, testing::testExecOptions())->run(in);
    unsetenv("TGC_NO_GEMM_EPILOGUE");
    for (size_t i = 0; i < fused.size(); ++i)
      EXPECT_EQ(std::memcmp(fused[i].data(), plain[i].data(), fused[i].nbytes()), 0) << "output " << i;
  }
}

// SwiGLU as inference runs it: silu(x W1) * (x W3), then W2. The gate's GEMM takes both
// the silu and the product with the up projection, which is in memory (a GEMM's result).
const char* kSwiGlu = R"(
graph @swiglu {
  %x = input() : T[3,7,13]
  %w1 = input() : T[13,33]
  %w3 = input() : T[13,33]
  %w2 = input() : T[33,5]
  %g = matmul(%x, %w1) : T[3,7,33]
  %s = silu(%g) : T[3,7,33]
  %u = matmul(%x, %w3) : T[3,7,33]
  %h = mul(%s, %u) : T[3,7,33]
  %o = matmul(%h, %w2) : T[3,7,5]
  return %o
}
)";

TEST(GemmEpilogueFold, SwiGluFoldsIntoTheGateGemm) {
  auto g = parse(kSwiGlu);
  auto folded = runtime::foldGemmEpilogues(*g);
  ASSERT_EQ(folded.size(), 1u);
  const auto& [mm, e] = *folded.begin();
  EXPECT_EQ(e.stages.activation, GemmActivation::silu);
  EXPECT_EQ(e.stages.mask, GemmMask::multiply);
  EXPECT_EQ(mm->result()->name(), "h");
  EXPECT_EQ(mm->operand(1)->name(), "w1");
  EXPECT_EQ(g->findValue("s"), nullptr);
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtypeName(dt));
    expectMatches(*parse(kSwiGlu, dt), {3, 0});
  }
}

TEST(GemmEpilogueFold, AGateWhoseSiluIsSavedFoldsIntoTheUpGemm) {
  // Training saves silu(g) for the backward: the gate GEMM takes only the silu, and the up
  // projection's GEMM multiplies by it.
  const std::string text = std::string(kSwiGlu).replace(std::string(kSwiGlu).find("return %o"), 9,
                                                        "return %o, %s");
  auto g = parse(text);
  auto folded = runtime::foldGemmEpilogues(*g);
  ASSERT_EQ(folded.size(), 2u);
  int silu = 0, gate = 0;
  for (const auto& [mm, e] : folded) {
    silu += e.stages.activation == GemmActivation::silu && e.stages.mask == GemmMask::none;
    gate += e.stages.activation == GemmActivation::none && e.stages.mask == GemmMask::multiply &&
            mm->operand(1)->name() == "w3";
  }
  EXPECT_EQ(silu, 1);
  EXPECT_EQ(gate, 1);
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtypeName(dt));
    expectMatches(*parse(text, dt), {3, 0});
  }
}

TEST(GemmEpilogueFold, AProductWithAValueOfAnotherShapeStaysAKernel) {
  // A broadcast factor is no gate (the epilogue reads an m x n operand).
  auto g = parse(R"(
graph @g {
  %x = input() : T[3,13]
  %w = input() : T[13,33]
  %v = input() : T[33]
  %y = matmul(%x, %w) : T[3,33]
  %z = mul(%y, %v) : T[3,33]
  return %z
}
)");
  EXPECT_TRUE(runtime::foldGemmEpilogues(*g).empty());
}

TEST(GemmEpilogueFold, EveryStageInOneGemm) {
  auto g = parse(kAllStages);
  auto folded = runtime::foldGemmEpilogues(*g);
  ASSERT_EQ(folded.size(), 1u);
  const runtime::FoldedEpilogue& e = folded.begin()->second;
  EXPECT_EQ(e.alpha, 0.25);
  EXPECT_TRUE(e.stages.bias);
  EXPECT_TRUE(e.stages.addend);
  EXPECT_EQ(e.stages.activation, GemmActivation::geluTanh);
  EXPECT_EQ(e.stages.scale, -1.5);
  EXPECT_EQ(e.stages.mask, GemmMask::nonzero);
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtypeName(dt));
    expectMatches(*parse(kAllStages, dt), {1, 0});
  }
}

TEST(GemmEpilogueFold, GradientSumsAndGelu) {
  // p + bias and the gelu fold (nothing else reads the pre-activation); a1 takes a2 as
  // its addend and a4 takes s1; a2 and a3 stay plain: five GEMMs, no kernels.
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtypeName(dt));
    expectMatches(*parse(kSums, dt), {5, 0});
  }
}

// A graph around the product %p = matmul(%a, %b) : T[5,7] of the inputs %a : T[5,6] and
// %b : T[6,7]: `before` holds the lines ahead of the product (more inputs, constants),
// `after` its users and the return.
std::string withProduct(const std::string& before, const std::string& after) {
  return "graph @g {\n  %a = input() : T[5,6]\n  %b = input() : T[6,7]\n" + before +
         "\n  %p = matmul(%a, %b) : T[5,7]\n" + after + "\n}\n";
}

// Each near-miss compiles with the same launches as with the fold off, and matches.
void expectNoFold(const std::string& text, int kernels) {
  auto g = parse(text);
  EXPECT_TRUE(runtime::foldGemmEpilogues(*parse(text)).empty());
  expectMatches(*g, {1, kernels});
}

TEST(GemmEpilogueFold, NearMissesDoNotFold) {
  // The product is also an output.
  expectNoFold(withProduct("%c = input() : T[7]", R"(
    %q = add(%p, %c) : T[5,7]
    return %p, %q)"), 1);
  // The product has two users.
  expectNoFold(withProduct("", R"(
    %q = relu(%p) : T[5,7]
    %r = mul(%p, %q) : T[5,7]
    return %r)"), 1);
  // A per-row vector is no bias, and the sum has another type than the product.
  expectNoFold(withProduct("%c = input() : T[5,1]", R"(
    %q = add(%p, %c) : T[5,7]
    return %q)"), 1);
  // Broadcasting the product: the result is larger than C.
  expectNoFold(withProduct("%c = input() : T[2,5,7]", R"(
    %q = add(%p, %c) : T[2,5,7]
    return %q)"), 1);
  // The zero is in the other branch of the where, and a non-constant factor.
  expectNoFold(withProduct(R"(
    %m = input() : bool[5,7]
    %s = input() : T[5,7]
    %zero = constant() {value=[0.0]} : T[])", R"(
    %q = where(%m, %zero, %p) : T[5,7]
    %r = mul(%q, %s) : T[5,7]
    return %r)"), 1);
  // A dropout mask made by a kernel from philox_uniform whose where feeds a kernel (the
  // residual add): the mask stays inside that kernel instead of being stored for the
  // epilogue. Likewise a mask also read elsewhere (the backward), and an addend only a
  // kernel computes and reads (exp(s)).
  expectNoFold(withProduct(R"(
    %seed = input() : i64[]
    %off = constant() {value=[0.0]} : i64[]
    %rand = philox_uniform(%seed, %off) : T[5,7]
    %p1 = constant() {value=[0.1]} : T[]
    %keep = ge(%rand, %p1) : bool[5,7]
    %x = input() : T[5,7]
    %zero = constant() {value=[0.0]} : T[])", R"(
    %q = where(%keep, %p, %zero) : T[5,7]
    %r = add(%x, %q) : T[5,7]
    return %r)"), 1);
  expectNoFold(withProduct(R"(
    %seed = input() : i64[]
    %off = constant() {value=[0.0]} : i64[]
    %rand = philox_uniform(%seed, %off) : T[5,7]
    %p1 = constant() {value=[0.1]} : T[]
    %keep = ge(%rand, %p1) : bool[5,7]
    %g = input() : T[5,7]
    %zero = constant() {value=[0.0]} : T[])", R"(
    %q = where(%keep, %p, %zero) : T[5,7]
    %dg = where(%keep, %g, %zero) : T[5,7]
    return %q, %dg)"), 2);  // q's kernel stores the mask too (a multi-output group)
  expectNoFold(withProduct(R"(
    %s = input() : T[5,7]
    %e = exp(%s) : T[5,7])", R"(
    %q = add(%p, %e) : T[5,7]
    return %q)"), 1);
  // A non-zero else value.
  expectNoFold(withProduct(R"(
    %m = input() : bool[5,7]
    %one = constant() {value=[1.0]} : T[])", R"(
    %q = where(%m, %p, %one) : T[5,7]
    return %q)"), 1);
}

TEST(GemmEpilogueFold, ChainsStopWhereAValueIsNeededInMemory) {
  // The pre-activation of a GELU is read by its gradient: the bias folds, the GELU stays.
  const std::string text = withProduct("%c = input() : T[7]", R"(
    %q = add(%p, %c) : T[5,7]
    %h = gelu(%q) : T[5,7]
    %d = mul(%q, %h) : T[5,7]
    return %h, %d)");
  auto g = parse(text);
  auto folded = runtime::foldGemmEpilogues(*g);
  ASSERT_EQ(folded.size(), 1u);
  EXPECT_EQ(folded.begin()->second.stages.activation, GemmActivation::none);
  EXPECT_TRUE(folded.begin()->second.stages.bias);
  expectMatches(*parse(text), {1, 1});  // one kernel stores h and d (multi-output group)
  // Stages only go forward: a bias after the activation is a kernel of its own.
  const std::string late = withProduct("%c = input() : T[7]", R"(
    %h = relu(%p) : T[5,7]
    %q = add(%h, %c) : T[5,7]
    return %q)");
  auto g2 = parse(late);
  auto folded2 = runtime::foldGemmEpilogues(*g2);
  ASSERT_EQ(folded2.size(), 1u);
  EXPECT_FALSE(folded2.begin()->second.stages.bias);
  expectMatches(*parse(late), {1, 1});
}

TEST(GemmEpilogueFold, OffSwitch) {
  setenv("TGC_NO_GEMM_EPILOGUE", "1", 1);
  auto g = parse(kFfn);
  EXPECT_TRUE(runtime::foldGemmEpilogues(*g).empty());
  unsetenv("TGC_NO_GEMM_EPILOGUE");
}

}  // namespace
}  // namespace tgc
