// The head-split fold (passes/fuse_attention.cpp) where its values have other users: q's
// split transpose also feeds the loss, out is read both through merge_heads' transpose
// (also a graph output) and as [B, H, Tq, Dv] (the transpose back), with cross attention
// (Tk != Tq), a per-query mask and dropout. Forward and autodiff's gradients of the fused
// graph against the unfused one, in the interpreter with promote_to_f64.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "ir/builder.h"
#include "ir/interpreter.h"
#include "ir/verifier.h"
#include "passes/autodiff.h"
#include "passes/pass.h"
#include "passes/passes.h"

namespace tgc {
namespace {

constexpr int64_t kB = 2, kH = 3, kTq = 5, kTk = 9, kD = 4, kDv = 6;

std::unique_ptr<Graph> build(bool fuse) {
  auto g = std::make_unique<Graph>("edges");
  Builder b(*g);
  const DType dt = DType::f32;
  Value* qIn = b.input("q", {dt, {kB, kTq, kH, kD}});
  Value* kIn = b.input("k", {dt, {kB, kTk, kH, kD}});
  Value* vIn = b.input("v", {dt, {kB, kTk, kH, kDv}});
  Value* wq = b.input("wq", {dt, {kB, kH, kTq, kD}});
  Value* w1 = b.input("w1", {dt, {kB, kTq, kH, kDv}});
  Value* w2 = b.input("w2", {dt, {kB, kH, kTq, kDv}});
  Value* mask = b.input("mask", {DType::boolean, {kB, 1, kTq, kTk}});
  Value* q = b.transpose(qIn, {0, 2, 1, 3}, "qh");
  Value* k = b.transpose(kIn, {0, 2, 1, 3}, "kh");
  Value* v = b.transpose(vIn, {0, 2, 1, 3}, "vh");
  Value* s = b.mul(b.matmul(q, k, false, true), b.scalar(dt, 0.5), "scores");
  s = b.where(mask, s, b.scalar(dt, -INFINITY));
  Value* p = b.softmax(s, -1);
  Value* seed = b.input("seed", {DType::i64, {}});
  Value* offset = b.input("offset", {DType::i64, {}});
  Value* keep = b.binary(OpKind::Ge, b.philoxUniform(seed, offset, p->type()), b.scalar(dt, 0.2));
  p = b.where(keep, b.mul(p, b.scalar(dt, 1 / 0.8)), b.scalar(dt, 0));
  Value* o = b.matmul(p, v, false, false, "o");
  Value* merged = b.transpose(o, {0, 2, 1, 3}, "merged");
  Value* loss = b.add(b.reduce(OpKind::ReduceSum, b.mul(merged, w1), {0, 1, 2, 3}),
                      b.reduce(OpKind::ReduceSum, b.mul(o, w2), {0, 1, 2, 3}));
  loss = b.add(loss, b.reduce(OpKind::ReduceSum, b.mul(q, wq), {0, 1, 2, 3}), "loss");
  g->setOutputs({merged, o});
  if (fuse) {
    PassContext ctx;
    EXPECT_TRUE(runFuseAttention(*g, ctx));
  }
  std::vector<Value*> outs = g->outputs();
  std::vector<Value*> grads = appendGradients(*g, loss, {qIn, kIn, vIn});
  g->setOutputs({outs[0], outs[1], grads[0], grads[1], grads[2]});
  g->removeDeadNodes();
  EXPECT_TRUE(verifyGraph(*g).empty());
  return g;
}

TEST(FuseAttentionLayoutEdges, OtherUsersOfTheTransposesKeepTheirValues) {
  auto unfused = build(false);
  auto fused = build(true);
  int bthd = 0;
  for (const auto& n : fused->nodes())
    if ((n->op() == OpKind::FusedAttention || n->op() == OpKind::FusedAttentionGrad) &&
        n->attrString("layout") == "bthd")
      ++bthd;
  EXPECT_EQ(bthd, 2);
  std::mt19937_64 rng(5);
  std::map<std::string, Tensor> in;
  for (const Node* n : unfused->inputs()) {
    const Value* v = n->result();
    Tensor t(v->type());
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (t.dtype() == DType::boolean)
        t.setI(i, rng() % 4 != 0);
      else
        t.setF(i, std::normal_distribution<double>(0, 1)(rng));
    }
    in[v->name()] = t;
  }
  in["seed"] = Tensor(TensorType{DType::i64, {}}, {4242.0});
  in["offset"] = Tensor(TensorType{DType::i64, {}}, {77.0});
  InterpreterOptions opts{.promote_to_f64 = true};
  const auto want = Interpreter(opts).run(*unfused, in);
  const auto got = Interpreter(opts).run(*fused, in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < want.size(); ++r) {
    ASSERT_EQ(got[r].type(), want[r].type()) << r;
    for (int64_t i = 0; i < want[r].numel(); ++i)
      ASSERT_NEAR(got[r].getF(i), want[r].getF(i), 1e-10) << "result " << r << " [" << i << "]";
  }
}

}  // namespace
}  // namespace tgc
