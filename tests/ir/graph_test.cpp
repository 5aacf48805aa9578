#include <gtest/gtest.h>

#include "ir/builder.h"
#include "ir/printer.h"
#include "ir/verifier.h"

using namespace tgc;

namespace {
TensorType f32(Shape s) { return {DType::f32, std::move(s)}; }
}

TEST(Builder, ScopedNamesAndUniquing) {
  Graph g("m");
  Builder b(g);
  Value* x = b.input("x", f32({2, 3}));
  Value* y;
  {
    Builder::Scope enc(b, "enc");
    Builder::Scope l0(b, "0");
    y = b.relu(x, "act");
  }
  Value* z = b.relu(y, "enc.0.act");
  EXPECT_EQ(y->name(), "enc.0.act");
  EXPECT_EQ(z->name(), "enc.0.act.1");
  EXPECT_EQ(g.findValue("enc.0.act.1"), z);
  EXPECT_EQ(b.reshape(x, {-1})->type(), f32({6}));
  EXPECT_EQ(b.slice(x, 1, -2, 100)->type(), f32({2, 2}));
}

TEST(Builder, ShapeErrorNamesOpProvenanceAndShapes) {
  Graph g;
  Builder b(g);
  Value* a = b.input("a", f32({2, 3}));
  Value* w = b.input("w", f32({4, 5}));
  Builder::Scope s(b, "enc.1.attn");
  try {
    b.matmul(a, w, false, false, "scores");
    FAIL() << "expected an error";
  } catch (const IRError& e) {
    EXPECT_STREQ(e.what(),
                 "matmul %enc.1.attn.scores (f32[2,3], f32[4,5]): contraction dims differ: "
                 "f32[2,3] and f32[4,5] (3 vs 4)");
  }
}

TEST(Graph, PrintsCanonicalText) {
  Graph g("tiny");
  g.setDims({{"B", 2}});
  Builder b(g);
  Value* x = b.input("x", f32({2, 3}), "param");
  Value* s = b.softmax(x, -1, "p");
  Value* c = b.scalar(DType::f32, 0.5, "half");
  Value* y = b.mul(s, c, "y");
  g.setOutputs({y, s});
  EXPECT_EQ(printGraph(g),
            "graph @tiny [B=2] {\n"
            "  %x = input() {role=\"param\"} : f32[2,3]\n"
            "  %p = softmax(%x) : f32[2,3]\n"
            "  %half = constant() {value=[0.5]} : f32[]\n"
            "  %y = mul(%p, %half) : f32[2,3]\n"
            "  return %y, %p\n"
            "}\n");
  EXPECT_TRUE(verifyGraph(g).empty());
}

TEST(Graph, RewritesDeadNodesAndTopoSort) {
  Graph g;
  Builder b(g);
  Value* x = b.input("x", f32({4}));
  Value* dead = b.exp(x, "dead");
  Value* y = b.neg(x, "y");
  g.setOutputs({y});
  // Append a replacement after its future user, then sort.
  Value* r = b.relu(x, "r");
  g.replaceAllUsesWith(y, r);
  EXPECT_EQ(g.outputs()[0], r);
  EXPECT_EQ(g.removeDeadNodes(), 2u);  // dead and y
  EXPECT_EQ(g.findValue("dead"), nullptr);
  (void)dead;
  Value* z = b.exp(r, "z");
  g.setOutputs({z});
  EXPECT_TRUE(verifyGraph(g).empty());
  auto c = g.clone();
  EXPECT_EQ(printGraph(*c), printGraph(g));
}

TEST(Graph, TopoSortRestoresOperandOrder) {
  Graph g;
  Builder b(g);
  Value* x = b.input("x", f32({4}));
  Value* a = b.exp(x, "a");
  Value* late = b.neg(x, "late");  // appended after a
  // Make a use `late`: now a precedes its operand.
  a->def()->setOperand(0, late);
  EXPECT_FALSE(verifyGraph(g).empty());
  g.setOutputs({a});
  g.topoSort();
  EXPECT_TRUE(verifyGraph(g).empty());
  EXPECT_EQ(g.nodes()[1]->result()->name(), "late");
}

TEST(Verifier, ReportsWrongStoredTypeAndUndefinedOutputs) {
  Graph g;
  Builder b(g);
  Value* x = b.input("x", f32({4}));
  Value* y = b.exp(x, "y");
  Graph other;
  Builder ob(other);
  Value* foreign = ob.input("foreign", f32({4}));
  g.setOutputs({y, foreign});
  auto errs = verifyGraph(g);
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0], "output 1 (%foreign) is not defined in the graph");
  EXPECT_THROW(g.add(OpKind::Exp, {x}, {}, {"bad"}, {f32({5})}), IRError);
}
