// Interpreter: the reference fused_attention and fused_attention_grad (ir/fused_ops.h) on
// cases small enough to work out by hand, the dropout stream against the unfused graph the
// frontend writes, layout bthd against the bhtd op on transposed tensors, and errors that
// name the node (or, from the shape rule, both shapes of a bthd operand).
#include <cmath>
#include <random>

#include "ir/builder.h"
#include "ir/interp_fused.h"
#include "ir/op_table.h"
#include "tests/ir/interp_test_util.h"

namespace tgc {
namespace {

using namespace interp_test;

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// x [d0, d1, d2, d3] with dims 1 and 2 swapped (written out here, independent of the op).
Tensor swap12(const Tensor& x) {
  const Shape& s = x.shape();
  Tensor y(ty(x.dtype(), {s[0], s[2], s[1], s[3]}));
  for (int64_t a = 0; a < s[0]; ++a)
    for (int64_t b = 0; b < s[1]; ++b)
      for (int64_t c = 0; c < s[2]; ++c)
        for (int64_t d = 0; d < s[3]; ++d)
          y.setF(((a * s[2] + c) * s[1] + b) * s[3] + d,
                 x.getF(((a * s[1] + b) * s[2] + c) * s[3] + d));
  return y;
}

INTERP_OP_TEST(FusedAttention, CausalMaskAndFullyMaskedRows) {
  // q = [[1], [2]], k = [[0], [1]], v = identity: row i's output is its probabilities.
  Tensor q = T(DType::f64, {2, 1}, {1, 2}), k = T(DType::f64, {2, 1}, {0, 1});
  Tensor v = T(DType::f64, {2, 2}, {1, 0, 0, 1});
  auto causal =
      runOpResults(OpKind::FusedAttention, {q, k, v}, {{"scale", 1.0}, {"causal", true}});
  // Row 0 sees key 0 only; row 1 has scores [0, 2].
  const double p1 = sigmoid(2);
  expectNear(causal[0], ty(DType::f64, {2, 2}), {1, 0, 1 - p1, p1}, 1e-15);
  expectNear(causal[1], ty(DType::f64, {2}), {0, std::log(1 + std::exp(2.0))}, 1e-15);

  // A [1, 2] mask broadcast over the rows, and a row-wise mask that hides all of row 0.
  Tensor keyMask = TI(DType::boolean, {1, 2}, {0, 1});
  auto masked = runOpResults(OpKind::FusedAttention, {q, k, v, keyMask},
                             {{"scale", 0.5}, {"has_mask", true}});
  expectNear(masked[0], ty(DType::f64, {2, 2}), {0, 1, 0, 1}, 1e-15);
  expectNear(masked[1], ty(DType::f64, {2}), {0.5, 1}, 1e-15);
  Tensor rowMask = TI(DType::boolean, {2, 1}, {0, 1});
  auto empty = runOpResults(OpKind::FusedAttention, {q, k, v, rowMask},
                            {{"scale", 1.0}, {"has_mask", true}});
  expectNear(empty[0], ty(DType::f64, {2, 2}), {0, 0, 1 - p1, p1}, 1e-15);
  expectNear(empty[1], ty(DType::f64, {2}), {-kInf, std::log(1 + std::exp(2.0))}, 1e-15);
}

INTERP_OP_TEST(FusedAttention, NaNPropagatesLikeTheUnfusedSoftmax) {
  // A NaN score makes its row NaN (softmax's rule), never a masked row of zeros: a
  // non-finite training step must show a NaN loss. Other rows are untouched.
  Tensor q = T(DType::f32, {2, 1}, {kNaN, 1}), k = T(DType::f32, {2, 1}, {0, 1});
  Tensor v = T(DType::f32, {2, 1}, {1, 3});
  auto r = runOpResults(OpKind::FusedAttention, {q, k, v}, {{"scale", 1.0}});
  EXPECT_TRUE(std::isnan(r[0].getF(0)));
  EXPECT_TRUE(std::isnan(r[1].getF(0)));
  EXPECT_NEAR(r[0].getF(1), 1 + 2 * sigmoid(1), 1e-6);
  auto g = runOpResults(OpKind::FusedAttentionGrad,
                        {q, k, v, r[0], r[1], T(DType::f32, {2, 1}, {1, 1})}, {{"scale", 1.0}});
  EXPECT_TRUE(std::isnan(g[1].getF(0)));  // dk collects row 0's NaN
}

INTERP_OP_TEST(FusedAttention, BatchDimsAndRoundingToF32) {
  // Two batch entries [2, 1, 1, D]: each row attends to its own keys only.
  Tensor q = T(DType::f32, {2, 1, 1, 2}, {1, 0, 0, 1});
  Tensor k = T(DType::f32, {2, 1, 2, 2}, {1, 0, 0, 1, 1, 0, 0, 1});
  Tensor v = T(DType::f32, {2, 1, 2, 1}, {10, 20, 30, 40});
  auto r = runOpResults(OpKind::FusedAttention, {q, k, v}, {{"scale", 1.0}});
  const double s = sigmoid(1);  // weight of the key that matches the query
  expectNear(r[0], ty(DType::f32, {2, 1, 1, 1}),
             {roundTo(DType::f32, 10 * s + 20 * (1 - s)), roundTo(DType::f32, 30 * (1 - s) + 40 * s)},
             1e-7);
  expectNear(r[1], ty(DType::f32, {2, 1, 1}),
             {roundTo(DType::f32, std::log(std::exp(1.0) + 1)),
              roundTo(DType::f32, std::log(1 + std::exp(1.0)))},
             1e-7);
}

// softmax(scale * q k^T) with the frontend's dropout after it, then @ v, unfused.
Tensor unfusedDropout(const Tensor& q, const Tensor& k, const Tensor& v, double scale, double p,
                      int64_t seed, int64_t offset, InterpreterOptions opts) {
  Graph g("unfused");
  Builder b(g);
  const DType dt = q.dtype();
  Value* qv = b.input("q", q.type()), *kv = b.input("k", k.type()), *vv = b.input("v", v.type());
  Value* sv = b.input("seed", ty(DType::i64, {})), *ov = b.input("offset", ty(DType::i64, {}));
  Value* w = b.softmax(b.mul(b.matmul(qv, kv, false, true), b.scalar(dt, scale)));
  Value* u = b.philoxUniform(sv, ov, w->type());
  Value* keep = b.binary(OpKind::Ge, u, b.scalar(dt, p));
  w = b.where(keep, b.mul(w, b.scalar(dt, 1 / (1 - p))), b.scalar(dt, 0));
  g.addOutput(b.matmul(w, vv));
  return Interpreter(opts).run(g, {{"q", q}, {"k", k}, {"v", v},
                                   {"seed", TI(DType::i64, {}, {seed})},
                                   {"offset", TI(DType::i64, {}, {offset})}})
      .at(0);
}

INTERP_OP_TEST(FusedAttention, DropoutMatchesTheUnfusedStream) {
  // v = identity, so each output row shows which weights were dropped: a dropped weight is
  // exactly 0 in both; the kept ones agree to rounding. p = 0.3 is not exact in f32, so the
  // keep test must compare in the dtype to agree.
  const int64_t tq = 5, tk = 6;
  Tensor q(ty(DType::f32, {2, tq, 3})), k(ty(DType::f32, {2, tk, 3})), v(ty(DType::f32, {2, tk, tk}));
  for (int64_t i = 0; i < q.numel(); ++i) q.setF(i, std::sin(0.7 * static_cast<double>(i)));
  for (int64_t i = 0; i < k.numel(); ++i) k.setF(i, std::cos(0.3 * static_cast<double>(i)));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t j = 0; j < tk; ++j) v.setF((b * tk + j) * tk + j, 1);
  const double p = 0.3;
  for (bool promote : {false, true}) {
    SCOPED_TRACE(promote ? "promote_to_f64" : "f32");
    InterpreterOptions opts{.promote_to_f64 = promote};
    Tensor want = unfusedDropout(q, k, v, 0.5, p, 1234, 99, opts);
    auto got = runOpResults(OpKind::FusedAttention,
                            {q, k, v, TI(DType::i64, {}, {1234}), TI(DType::i64, {}, {99})},
                            {{"scale", 0.5}, {"p_drop", p}}, opts);
    ASSERT_EQ(got[0].type(), want.type());
    int dropped = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      EXPECT_EQ(got[0].getF(i) == 0, want.getF(i) == 0) << "element " << i;
      EXPECT_NEAR(got[0].getF(i), want.getF(i), promote ? 1e-15 : 2e-7) << "element " << i;
      dropped += want.getF(i) == 0;
    }
    EXPECT_GT(dropped, 5);
    EXPECT_LT(dropped, 2 * tq * tk - 5);
  }
}

INTERP_OP_TEST(FusedAttentionGrad, TwoKeysByHand) {
  // q = [a], k = [[0], [1]], v = [[1], [3]]: out = 1 + 2 s with s = sigmoid(a). For dout = 1:
  // dq = 2 s (1 - s), dk = [-a, a] 2 s (1 - s), dv = [1 - s, s].
  const double a = 0.5, s = sigmoid(a), d = 2 * s * (1 - s);
  Tensor q = T(DType::f64, {1, 1}, {a}), k = T(DType::f64, {2, 1}, {0, 1});
  Tensor v = T(DType::f64, {2, 1}, {1, 3});
  AttrMap attrs{{"scale", 1.0}};
  auto fwd = runOpResults(OpKind::FusedAttention, {q, k, v}, attrs);
  expectNear(fwd[0], ty(DType::f64, {1, 1}), {1 + 2 * s}, 1e-15);
  auto grads = runOpResults(OpKind::FusedAttentionGrad,
                            {q, k, v, fwd[0], fwd[1], T(DType::f64, {1, 1}, {1})}, attrs);
  ASSERT_EQ(grads.size(), 3u);
  expectNear(grads[0], ty(DType::f64, {1, 1}), {d}, 1e-14);
  expectNear(grads[1], ty(DType::f64, {2, 1}), {-a * d, a * d}, 1e-14);
  expectNear(grads[2], ty(DType::f64, {2, 1}), {1 - s, s}, 1e-14);
}

INTERP_OP_TEST(FusedAttentionGrad, FullyMaskedRowsGiveZeroGradients) {
  Tensor q = T(DType::f64, {2, 1}, {1, 2}), k = T(DType::f64, {2, 1}, {0, 1});
  Tensor v = T(DType::f64, {2, 1}, {1, 3});
  Tensor mask = TI(DType::boolean, {2, 1}, {0, 0});
  AttrMap attrs{{"scale", 1.0}, {"has_mask", true}};
  auto fwd = runOpResults(OpKind::FusedAttention, {q, k, v, mask}, attrs);
  expectExact(fwd[1], ty(DType::f64, {2}), {-kInf, -kInf});
  auto grads = runOpResults(OpKind::FusedAttentionGrad,
                            {q, k, v, fwd[0], fwd[1], T(DType::f64, {2, 1}, {1, -2}), mask}, attrs);
  expectExact(grads[0], ty(DType::f64, {2, 1}), {0, 0});
  expectExact(grads[1], ty(DType::f64, {2, 1}), {0, 0});
  expectExact(grads[2], ty(DType::f64, {2, 1}), {0, 0});
}

INTERP_OP_TEST(FusedAttention, BthdLayoutIsTheBhtdOpOnTransposedTensors) {
  // [B=2, T, H=3, D]: out, dq, dk, dv are the bhtd results transposed back, lse the same;
  // with a full mask, causal and dropout (both index [B, H, Tq, Tk]).
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  auto random = [&](Shape s) {
    Tensor t(ty(DType::f64, s));
    for (int64_t i = 0; i < t.numel(); ++i) t.setF(i, u(rng));
    return t;
  };
  const int64_t tq = 4, tk = 4;
  Tensor q = random({2, tq, 3, 5}), k = random({2, tk, 3, 5}), v = random({2, tk, 3, 6});
  Tensor dout = random({2, tq, 3, 6});
  Tensor mask(ty(DType::boolean, {2, 3, tq, tk}));
  for (int64_t i = 0; i < mask.numel(); ++i) mask.setI(i, static_cast<int64_t>(rng() % 3 != 0));
  Tensor seed = TI(DType::i64, {}, {77}), offset = TI(DType::i64, {}, {9});
  AttrMap attrs{{"scale", 0.4}, {"causal", true}, {"has_mask", true}, {"p_drop", 0.2}};
  AttrMap bthd = attrs;
  bthd["layout"] = std::string("bthd");
  auto want = runOpResults(OpKind::FusedAttention,
                           {swap12(q), swap12(k), swap12(v), mask, seed, offset}, attrs);
  auto got = runOpResults(OpKind::FusedAttention, {q, k, v, mask, seed, offset}, bthd);
  expectNear(got[0], ty(DType::f64, {2, tq, 3, 6}), swap12(want[0]).toDoubles(), 1e-15);
  expectNear(got[1], want[1].type(), want[1].toDoubles(), 1e-15);
  auto wantGrad = runOpResults(OpKind::FusedAttentionGrad,
                               {swap12(q), swap12(k), swap12(v), want[0], want[1], swap12(dout),
                                mask, seed, offset},
                               attrs);
  auto gotGrad = runOpResults(OpKind::FusedAttentionGrad,
                              {q, k, v, got[0], got[1], dout, mask, seed, offset}, bthd);
  for (size_t r = 0; r < 3; ++r)
    expectNear(gotGrad[r], gotGrad[r].type(), swap12(wantGrad[r]).toDoubles(), 1e-15);
  EXPECT_EQ(gotGrad[0].type(), q.type());
  EXPECT_EQ(gotGrad[2].type(), v.type());
}

INTERP_OP_TEST(FusedAttention, BthdShapeErrorsNameBothShapes) {
  AttrMap bthd{{"scale", 1.0}, {"layout", std::string("bthd")}};
  auto error = [](std::vector<TensorType> ops, AttrMap attrs) -> std::string {
    try {
      inferResultTypes(OpKind::FusedAttention, ops, attrs, {});
    } catch (const ShapeError& e) {
      return e.what();
    }
    return "<no error>";
  };
  // k's heads differ from q's: the batch dims [B, H] of the transposed shapes disagree.
  std::string msg = error({ty(DType::f32, {2, 5, 3, 4}), ty(DType::f32, {2, 5, 2, 4}),
                           ty(DType::f32, {2, 5, 3, 4})}, bthd);
  EXPECT_NE(msg.find("f32[2,5,2,4] as f32[2,2,5,4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("equal batch dims"), std::string::npos) << msg;
  msg = error({ty(DType::f32, {5, 4}), ty(DType::f32, {5, 4}), ty(DType::f32, {5, 4})}, bthd);
  EXPECT_NE(msg.find("rank >= 3"), std::string::npos) << msg;
  AttrMap bad{{"scale", 1.0}, {"layout", std::string("tbhd")}};
  msg = error({ty(DType::f32, {2, 5, 3, 4}), ty(DType::f32, {2, 5, 3, 4}),
               ty(DType::f32, {2, 5, 3, 4})}, bad);
  EXPECT_NE(msg.find("\"tbhd\""), std::string::npos) << msg;
  // Well formed: out [B, Tq, H, Dv], lse [B, H, Tq].
  const auto types = inferResultTypes(OpKind::FusedAttention,
                                      std::vector<TensorType>{ty(DType::f32, {2, 5, 3, 4}),
                                                              ty(DType::f32, {2, 7, 3, 4}),
                                                              ty(DType::f32, {2, 7, 3, 6})},
                                      bthd, {});
  EXPECT_EQ(types[0], ty(DType::f32, {2, 5, 3, 6}));
  EXPECT_EQ(types[1], ty(DType::f32, {2, 3, 5}));
}

INTERP_OP_TEST(FusedAttention, BadOperandsNameTheNode) {
  Graph g;
  Builder b(g);
  Value* q = b.input("q", ty(DType::f32, {2, 3}));
  Node* n = g.add(OpKind::FusedAttention, {q, q, q}, {{"scale", 1.0}}, {"attn", "attn.lse"});
  // Tensors that do not fit the node, handed to the kernel directly (as a library kernel's
  // test may): the checks name the node instead of reading out of bounds.
  Tensor q23(ty(DType::f32, {2, 3})), k24(ty(DType::f32, {2, 4}));
  std::vector<Tensor> outs{Tensor(ty(DType::f32, {2, 3})), Tensor(ty(DType::f32, {2}))};
  std::string msg = errorOf([&] { referenceFusedAttention(*n, {&q23, &k24, &q23}, outs); });
  EXPECT_NE(msg.find("fused_attention %attn"), std::string::npos) << msg;
  EXPECT_NE(msg.find("k must be"), std::string::npos) << msg;
  msg = errorOf([&] { referenceFusedAttention(*n, {&q23, &q23}, outs); });
  EXPECT_NE(msg.find("has 2 operands"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tgc
