#include <gtest/gtest.h>

#include "pass_test_util.h"

using namespace tgc;
using namespace tgc::pass_test;

TEST(DCE, RemovesUnusedChainsAndKeepsInputsAndOutputs) {
  EXPECT_EQ(runAndCompare("dce", R"(graph @g {
  %x = input() : f32[4]
  %unused_in = input() {role="param"} : f32[4]
  %a = exp(%x) : f32[4]
  %b = neg(%a) : f32[4]
  %dead1 = relu(%x) : f32[4]
  %dead2 = mul(%dead1, %b) : f32[4]
  %c = constant() {value=[2.0]} : f32[]
  return %b, %x
})"),
            R"(graph @g {
  %x = input() : f32[4]
  %unused_in = input() {role="param"} : f32[4]
  %a = exp(%x) : f32[4]
  %b = neg(%a) : f32[4]
  return %b, %x
}
)");
}

TEST(DCE, ReportsNoChangeWhenEverythingIsUsed) {
  auto g = parse(R"(graph @g {
  %x = input() : f32[4]
  %a = exp(%x) : f32[4]
  return %a
})");
  EXPECT_FALSE(runPass("dce", *g));
}

TEST(CSE, MergesDuplicatesKeepingTheFirstNameAndRedirectingOutputs) {
  EXPECT_EQ(runAndCompare("cse", R"(graph @g {
  %x = input() : f32[2,3]
  %s1 = softmax(%x) : f32[2,3]
  %s2 = softmax(%x) : f32[2,3]
  %e1 = exp(%s1) : f32[2,3]
  %e2 = exp(%s2) : f32[2,3]
  %y = add(%e1, %e2) : f32[2,3]
  return %y, %e2
})"),
            R"(graph @g {
  %x = input() : f32[2,3]
  %s1 = softmax(%x) : f32[2,3]
  %e1 = exp(%s1) : f32[2,3]
  %y = add(%e1, %e1) : f32[2,3]
  return %y, %e1
}
)");
}

TEST(CSE, MergesEqualConstantsIotaAndPhilox) {
  EXPECT_EQ(runOn("cse", R"(graph @g {
  %seed = input() : i64[]
  %off = constant() {value=[0.0]} : i64[]
  %r1 = philox_uniform(%seed, %off) : f32[8]
  %r2 = philox_uniform(%seed, %off) : f32[8]
  %c1 = constant() {value=[1.0, 2.0]} : f32[2]
  %c2 = constant() {value=[1.0, 2.0]} : f32[2]
  %n1 = constant() {value=[nan]} : f32[]
  %n2 = constant() {value=[nan]} : f32[]
  %i1 = iota() {axis=0} : i32[8]
  %i2 = iota() {axis=0} : i32[8]
  return %r1, %r2, %c1, %c2, %n1, %n2, %i1, %i2
})"),
            R"(graph @g {
  %seed = input() : i64[]
  %off = constant() {value=[0.0]} : i64[]
  %r1 = philox_uniform(%seed, %off) : f32[8]
  %c1 = constant() {value=[1.0,2.0]} : f32[2]
  %n1 = constant() {value=[nan]} : f32[]
  %i1 = iota() {axis=0} : i32[8]
  return %r1, %r1, %c1, %c1, %n1, %n1, %i1, %i1
}
)");
}

TEST(CSE, NearMissesStaySeparate) {
  // Inputs of one type, other attributes, other operand order, other result types, other
  // constant values (0.0 and -0.0 are different bits) and other philox offsets.
  constexpr std::string_view text = R"(graph @g {
  %x = input() : f32[2,3]
  %x2 = input() : f32[2,3]
  %seed = input() : i64[]
  %o1 = constant() {value=[0.0]} : i64[]
  %o2 = constant() {value=[8.0]} : i64[]
  %r1 = philox_uniform(%seed, %o1) : f32[8]
  %r2 = philox_uniform(%seed, %o2) : f32[8]
  %s0 = softmax(%x) {axis=0} : f32[2,3]
  %s1 = softmax(%x) : f32[2,3]
  %a = sub(%x, %x2) : f32[2,3]
  %b = sub(%x2, %x) : f32[2,3]
  %z1 = constant() {value=[0.0]} : f32[]
  %z2 = constant() {value=[-0.0]} : f32[]
  %z3 = constant() {value=[0.0]} : f64[]
  %z4 = constant() {value=[0.0]} : f32[1]
  %t1 = reshape(%x) {shape=[6]} : f32[6]
  %t2 = reshape(%x) {shape=[3,2]} : f32[3,2]
  return %x2, %r1, %r2, %s0, %s1, %a, %b, %z1, %z2, %z3, %z4, %t1, %t2
})";
  auto g = parse(text);
  EXPECT_FALSE(runPass("cse", *g));
}

TEST(CSE, CollapsesDuplicateChainsInOneRun) {
  auto g = parse(R"(graph @g {
  %x = input() : f32[4]
  %a1 = exp(%x) : f32[4]
  %a2 = exp(%x) : f32[4]
  %b1 = neg(%a1) : f32[4]
  %b2 = neg(%a2) : f32[4]
  %c1 = tanh(%b1) : f32[4]
  %c2 = tanh(%b2) : f32[4]
  %y = add(%c1, %c2) : f32[4]
  return %y
})");
  EXPECT_TRUE(runPass("cse", *g));
  EXPECT_EQ(g->size(), 5u);
  EXPECT_FALSE(runPass("cse", *g));
}
