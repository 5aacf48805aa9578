#include <gtest/gtest.h>

#include "pass_test_util.h"

using namespace tgc;
using namespace tgc::pass_test;

namespace {

// Wraps node lines in a graph with inputs x: f32[2,3], i: i32[2,3] and returns `ret`.
std::string graphText(std::string_view body, std::string_view ret) {
  return "graph @g {\n  %x = input() : f32[2,3]\n  %i = input() : i32[2,3]\n" +
         std::string(body) + "  return " + std::string(ret) + "\n}\n";
}

std::string canonicalized(std::string_view body, std::string_view ret) {
  return runAndCompare("canonicalize", graphText(body, ret));
}

}  // namespace

TEST(Canonicalize, ArithmeticIdentitiesForwardTheOtherOperand) {
  EXPECT_EQ(canonicalized(R"(  %one = constant() {value=[1.0]} : f32[]
  %zero = constant() {value=[0.0]} : f32[]
  %ones = constant() {value=[1.0,1.0,1.0]} : f32[3]
  %izero = constant() {value=[0.0]} : i32[2,3]
  %a = mul(%x, %one) : f32[2,3]
  %b = mul(%one, %a) : f32[2,3]
  %c = add(%b, %zero) : f32[2,3]
  %d = add(%zero, %c) : f32[2,3]
  %e = sub(%d, %zero) : f32[2,3]
  %f = div(%e, %ones) : f32[2,3]
  %g = add(%i, %izero) : i32[2,3]
)",
                          "%f, %g"),
            graphText(R"(  %one = constant() {value=[1.0]} : f32[]
  %zero = constant() {value=[0.0]} : f32[]
  %ones = constant() {value=[1.0,1.0,1.0]} : f32[3]
  %izero = constant() {value=[0.0]} : i32[2,3]
)",
                      "%x, %i"));
}

TEST(Canonicalize, SplatsSeenThroughBroadcastAndReshape) {
  EXPECT_EQ(canonicalized(R"(  %one = constant() {value=[1.0]} : f32[]
  %b1 = broadcast(%one) {shape=[3]} : f32[3]
  %r1 = reshape(%b1) {shape=[1,3]} : f32[1,3]
  %a = mul(%x, %r1) : f32[2,3]
)",
                          "%a"),
            graphText(R"(  %one = constant() {value=[1.0]} : f32[]
  %b1 = broadcast(%one) {shape=[3]} : f32[3]
  %r1 = reshape(%b1) {shape=[1,3]} : f32[1,3]
)",
                      "%x"));
}

TEST(Canonicalize, ArithmeticNearMissesStay) {
  // The 1 broadcasts x to a larger shape; 1 - x and 1 / x are not x; 2 is not 1; a
  // non-splat constant; x*0 is not x; a NaN splat.
  auto g = parse(graphText(R"(  %one = constant() {value=[1.0]} : f32[4,2,3]
  %two = constant() {value=[2.0]} : f32[]
  %onef = constant() {value=[1.0]} : f32[]
  %zerof = constant() {value=[0.0]} : f32[]
  %mixed = constant() {value=[1.0,1.0,2.0]} : f32[3]
  %nan = constant() {value=[nan]} : f32[]
  %a = mul(%x, %one) : f32[4,2,3]
  %b = mul(%x, %two) : f32[2,3]
  %c = sub(%zerof, %x) : f32[2,3]
  %d = div(%onef, %x) : f32[2,3]
  %e = mul(%x, %mixed) : f32[2,3]
  %f = mul(%x, %zerof) : f32[2,3]
  %h = add(%x, %nan) : f32[2,3]
)",
                           "%a, %b, %c, %d, %e, %f, %h"));
  EXPECT_FALSE(runPass("canonicalize", *g));
}

TEST(Canonicalize, DoubleNegationCancels) {
  EXPECT_EQ(canonicalized(R"(  %n1 = neg(%x) : f32[2,3]
  %n2 = neg(%n1) : f32[2,3]
  %n3 = neg(%n2) : f32[2,3]
  %a1 = abs(%x) : f32[2,3]
  %a2 = abs(%a1) : f32[2,3]
)",
                          "%n2, %n3, %a2"),
            // n3 = neg(neg(neg x)) becomes neg(x); cse may then merge it with n1.
            graphText(R"(  %n1 = neg(%x) : f32[2,3]
  %n3 = neg(%x) : f32[2,3]
  %a1 = abs(%x) : f32[2,3]
  %a2 = abs(%a1) : f32[2,3]
)",
                      "%x, %n3, %a2"));
}

TEST(Canonicalize, TransposesComposeAndIdentitiesVanish) {
  std::string in = R"(graph @g {
  %x = input() : f32[2,3,4]
  %t1 = transpose(%x) {perm=[1,2,0]} : f32[3,4,2]
  %t2 = transpose(%t1) {perm=[1,0,2]} : f32[4,3,2]
  %u1 = transpose(%x) {perm=[0,2,1]} : f32[2,4,3]
  %u2 = transpose(%u1) {perm=[0,2,1]} : f32[2,3,4]
  %id = transpose(%x) {perm=[0,1,2]} : f32[2,3,4]
  %y = add(%u2, %id) : f32[2,3,4]
  return %t2, %y
}
)";
  // t2[i,j,k] = t1[j,i,k] = x[k,j,i]: one transpose with perm [2,1,0], named t2.
  EXPECT_EQ(runAndCompare("canonicalize", in), R"(graph @g {
  %x = input() : f32[2,3,4]
  %t1 = transpose(%x) {perm=[1,2,0]} : f32[3,4,2]
  %t2 = transpose(%x) {perm=[2,1,0]} : f32[4,3,2]
  %u1 = transpose(%x) {perm=[0,2,1]} : f32[2,4,3]
  %y = add(%x, %x) : f32[2,3,4]
  return %t2, %y
}
)");
}

TEST(Canonicalize, ReshapeBroadcastCastAndSliceNoOps) {
  EXPECT_EQ(canonicalized(R"(  %r1 = reshape(%x) {shape=[6]} : f32[6]
  %r2 = reshape(%r1) {shape=[3,2]} : f32[3,2]
  %r3 = reshape(%r1) {shape=[2,3]} : f32[2,3]
  %r4 = reshape(%x) {shape=[2,3]} : f32[2,3]
  %b1 = broadcast(%x) {shape=[1,2,3]} : f32[1,2,3]
  %b2 = broadcast(%b1) {shape=[5,2,3]} : f32[5,2,3]
  %b3 = broadcast(%x) {shape=[2,3]} : f32[2,3]
  %c1 = cast(%x) {dtype=f32} : f32[2,3]
  %c2 = cast(%x) {dtype=f64} : f64[2,3]
  %s1 = slice(%x) {axis=1, end=3, start=0} : f32[2,3]
  %s2 = slice(%x) {axis=1, end=3, start=1} : f32[2,2]
  %s3 = slice(%x) {axis=0, end=2, start=0, step=2} : f32[1,3]
)",
                          "%r2, %r3, %r4, %b2, %b3, %c1, %c2, %s1, %s2, %s3"),
            graphText(R"(  %r1 = reshape(%x) {shape=[6]} : f32[6]
  %r2 = reshape(%x) {shape=[3,2]} : f32[3,2]
  %b1 = broadcast(%x) {shape=[1,2,3]} : f32[1,2,3]
  %b2 = broadcast(%x) {shape=[5,2,3]} : f32[5,2,3]
  %c2 = cast(%x) {dtype=f64} : f64[2,3]
  %s2 = slice(%x) {axis=1, end=3, start=1} : f32[2,2]
  %s3 = slice(%x) {axis=0, end=2, start=0, step=2} : f32[1,3]
)",
                      "%r2, %x, %x, %b2, %x, %x, %c2, %x, %s2, %s3"));
}

TEST(Canonicalize, SliceOfAUnitAxisWithAnyStepIsTheWholeAxis) {
  EXPECT_EQ(runAndCompare("canonicalize", R"(graph @g {
  %x = input() : f32[1,3]
  %s = slice(%x) {axis=0, end=1, start=0, step=4} : f32[1,3]
  return %s
}
)"),
            "graph @g {\n  %x = input() : f32[1,3]\n  return %x\n}\n");
}

TEST(Canonicalize, ReachesAFixedPointInOneRunOnChains) {
  auto g = parse(graphText(R"(  %one = constant() {value=[1.0]} : f32[]
  %r1 = reshape(%x) {shape=[3,2]} : f32[3,2]
  %r2 = reshape(%r1) {shape=[6]} : f32[6]
  %r3 = reshape(%r2) {shape=[2,3]} : f32[2,3]
  %n1 = neg(%r3) : f32[2,3]
  %n2 = neg(%n1) : f32[2,3]
  %m = mul(%n2, %one) : f32[2,3]
  %t1 = transpose(%m) {perm=[1,0]} : f32[3,2]
  %t2 = transpose(%t1) {perm=[1,0]} : f32[2,3]
)",
                           "%t2"));
  EXPECT_TRUE(runPass("canonicalize", *g));
  EXPECT_EQ(g->outputs()[0]->name(), "x");
  EXPECT_FALSE(runPass("canonicalize", *g));
}
