#include <gtest/gtest.h>

#include "pass_test_util.h"

using namespace tgc;
using namespace tgc::pass_test;

TEST(ConstantFold, FoldsChainsKeepingProvenanceNames) {
  EXPECT_EQ(runAndCompare("constant-fold", R"(graph @g {
  %x = input() : f32[3]
  %a = constant() {value=[1.0,2.0,3.0]} : f32[3]
  %b = constant() {value=[0.5]} : f32[]
  %enc.scaled = mul(%a, %b) : f32[3]
  %enc.shift = add(%enc.scaled, %b) : f32[3]
  %y = add(%x, %enc.shift) : f32[3]
  return %y
})"),
            R"(graph @g {
  %x = input() : f32[3]
  %a = constant() {value=[1.0,2.0,3.0]} : f32[3]
  %b = constant() {value=[0.5]} : f32[]
  %enc.scaled = constant() {value=[0.5,1.0,1.5]} : f32[3]
  %enc.shift = constant() {value=[1.0,1.5,2.0]} : f32[3]
  %y = add(%x, %enc.shift) : f32[3]
  return %y
}
)");
}

TEST(ConstantFold, SplatsStaySplatsAtAnySize) {
  // 512 x 2048 elements is far over the limit, but a splat is one number.
  EXPECT_EQ(runOn("constant-fold", R"(graph @g {
  %c = constant() {value=[0.25]} : f32[]
  %b = broadcast(%c) {shape=[512,2048]} : f32[512,2048]
  %e = exp(%b) : f32[512,2048]
  %t = transpose(%b) {perm=[1,0]} : f32[2048,512]
  %k = cast(%b) {dtype=f64} : f64[512,2048]
  %i = cast(%b) {dtype=i32} : i32[512,2048]
  %s = slice(%t) {axis=0, end=7, start=3} : f32[4,512]
  %r = reshape(%s) {shape=[2048]} : f32[2048]
  %cc = concat(%r, %r) {axis=0} : f32[4096]
  return %e, %k, %i, %cc
})"),
            R"(graph @g {
  %c = constant() {value=[0.25]} : f32[]
  %b = constant() {value=[0.25]} : f32[512,2048]
  %e = constant() {value=[1.2840254306793213]} : f32[512,2048]
  %t = constant() {value=[0.25]} : f32[2048,512]
  %k = constant() {value=[0.25]} : f64[512,2048]
  %i = constant() {value=[0.0]} : i32[512,2048]
  %s = constant() {value=[0.25]} : f32[4,512]
  %r = constant() {value=[0.25]} : f32[2048]
  %cc = constant() {value=[0.25]} : f32[4096]
  return %e, %k, %i, %cc
}
)");
}

TEST(ConstantFold, ResultsThatAreAllEqualBecomeSplats) {
  EXPECT_EQ(runAndCompare("constant-fold", R"(graph @g {
  %a = constant() {value=[1.0,2.0,3.0,4.0]} : f32[2,2]
  %s = reduce_sum(%a) {axes=[0,1], keepdims=true} : f32[1,1]
  %z = sub(%a, %a) : f32[2,2]
  return %s, %z
})"),
            R"(graph @g {
  %a = constant() {value=[1.0,2.0,3.0,4.0]} : f32[2,2]
  %s = constant() {value=[10.0]} : f32[1,1]
  %z = constant() {value=[0.0]} : f32[2,2]
  return %s, %z
}
)");
}

TEST(ConstantFold, RespectsTheSizeLimit) {
  // concat of a 3000-element constant with itself: 6000 elements, not a splat.
  std::string values;
  for (int i = 0; i < 3000; ++i) values += (i ? "," : "") + std::to_string(i) + ".0";
  std::string text = "graph @g {\n  %a = constant() {value=[" + values +
                     "]} : f32[3000]\n  %c = concat(%a, %a) {axis=0} : f32[6000]\n  return %c\n}\n";
  auto g = parse(text);
  EXPECT_FALSE(runPass("constant-fold", *g));
  PassContext big;
  big.fold_limit = 6000;
  EXPECT_TRUE(runPass("constant-fold", *g, big));
  EXPECT_EQ(g->outputs()[0]->def()->op(), OpKind::Constant);
  EXPECT_EQ(g->outputs()[0]->def()->attrFloats("value").size(), 6000u);
  EXPECT_EQ(g->outputs()[0]->def()->attrFloats("value")[3001], 1.0);
}

TEST(ConstantFold, LeavesInputsSourcesAndRuntimeErrorsAlone) {
  // Depends on an input; on iota (kept so masks stay generated); philox (random bits stay
  // in kernels); integer division by zero (reported at run time); an i64 beyond 2^53.
  auto g = parse(R"(graph @g {
  %x = input() : f32[4]
  %c = constant() {value=[2.0]} : f32[4]
  %a = mul(%x, %c) : f32[4]
  %io = iota() {axis=1} : i32[4,4]
  %ci = constant() {value=[1.0]} : i32[]
  %m = lt(%io, %ci) : bool[4,4]
  %seed = constant() {value=[7.0]} : i64[]
  %r = philox_uniform(%seed, %seed) : f32[4]
  %n = constant() {value=[7.0,8.0]} : i32[2]
  %z = constant() {value=[0.0,1.0]} : i32[2]
  %q = div(%n, %z) : i32[2]
  %big = constant() {value=[9007199254740992.0]} : i64[2]
  %one = constant() {value=[1.0,2.0]} : i64[2]
  %over = add(%big, %one) : i64[2]
  return %a, %m, %r, %q, %over
})");
  EXPECT_FALSE(runPass("constant-fold", *g));
}

TEST(ConstantFold, FoldsIntegerBoolAndGatherNodes) {
  EXPECT_EQ(runAndCompare("constant-fold", R"(graph @g {
  %table = constant() {value=[1.0,2.0,3.0,4.0,5.0,6.0]} : f32[3,2]
  %idx = constant() {value=[2.0,0.0]} : i64[2]
  %rows = gather(%table, %idx) : f32[2,2]
  %n = constant() {value=[7.0,-7.0]} : i32[2]
  %d = constant() {value=[2.0]} : i32[]
  %q = div(%n, %d) : i32[2]
  %lt = lt(%n, %d) : bool[2]
  %nb = logical_not(%lt) : bool[2]
  return %rows, %q, %nb
})"),
            R"(graph @g {
  %table = constant() {value=[1.0,2.0,3.0,4.0,5.0,6.0]} : f32[3,2]
  %idx = constant() {value=[2.0,0.0]} : i64[2]
  %rows = constant() {value=[5.0,6.0,1.0,2.0]} : f32[2,2]
  %n = constant() {value=[7.0,-7.0]} : i32[2]
  %d = constant() {value=[2.0]} : i32[]
  %q = constant() {value=[3.0,-3.0]} : i32[2]
  %lt = constant() {value=[0.0,1.0]} : bool[2]
  %nb = constant() {value=[1.0,0.0]} : bool[2]
  return %rows, %q, %nb
}
)");
}

TEST(ConstantFold, RoundsToTheResultDtype) {
  // 0.1 in f32 is 0.100000001490116...; the folded constant holds that exact value.
  EXPECT_EQ(runAndCompare("constant-fold", R"(graph @g {
  %a = constant() {value=[0.1]} : f32[]
  %b = constant() {value=[0.2]} : f32[]
  %s = add(%a, %b) : f32[]
  return %s
})"),
            R"(graph @g {
  %a = constant() {value=[0.1]} : f32[]
  %b = constant() {value=[0.2]} : f32[]
  %s = constant() {value=[0.30000001192092896]} : f32[]
  return %s
}
)");
}
