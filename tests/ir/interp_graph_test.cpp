// Interpreter: source ops (input, constant, iota, philox_uniform), whole graphs, input
// validation, evalNode, promote_to_f64, and the check that every op has a test.
#include <cstdint>

#include "ir/builder.h"
#include "ir/philox.h"
#include "tests/ir/interp_test_util.h"

namespace tgc {
namespace {

using namespace interp_test;

constexpr int64_t k2p53 = int64_t{1} << 53;

// ---- sources -----------------------------------------------------------------------------------

INTERP_OP_TEST(Input, PassesThroughAndFeedsUsers) {
  Graph g;
  Builder b(g);
  Value* x = b.input("x", ty(DType::i64, {2}));
  g.addOutput(x);
  g.addOutput(b.add(x, x));
  auto outs = Interpreter().run(g, {{"x", TI(DType::i64, {2}, {k2p53 + 1, -3})}});
  ASSERT_EQ(outs.size(), 2u);
  expectInts(outs[0], ty(DType::i64, {2}), {k2p53 + 1, -3});
  expectInts(outs[1], ty(DType::i64, {2}), {2 * (k2p53 + 1), -6});
}

INTERP_OP_TEST(Constant, SplatAndFull) {
  AttrMap splat{{"value", std::vector<double>{1.5}}};
  expectExact(runOp(OpKind::Constant, {}, splat, ty(DType::f32, {2, 2})), ty(DType::f32, {2, 2}),
              {1.5, 1.5, 1.5, 1.5});
  expectExact(runOp(OpKind::Constant, {}, splat, ty(DType::f64, {})), ty(DType::f64, {}), {1.5});
  AttrMap full{{"value", std::vector<double>{1, -2, 3, 4, 5, 6.9}}};
  // Ints truncate like a cast.
  expectInts(runOp(OpKind::Constant, {}, full, ty(DType::i32, {2, 3})), ty(DType::i32, {2, 3}),
             {1, -2, 3, 4, 5, 6});
  // Values round to the dtype: 1 + 2^-8 is a bf16 tie that goes to 1.
  expectExact(runOp(OpKind::Constant, {}, {{"value", std::vector<double>{1.00390625, 0.5}}},
                    ty(DType::bf16, {2})),
              ty(DType::bf16, {2}), {1, 0.5});
  expectExact(runOp(OpKind::Constant, {}, {{"value", std::vector<double>{1, 0, -3}}},
                    ty(DType::boolean, {3})),
              ty(DType::boolean, {3}), {1, 0, 1});
}

INTERP_OP_TEST(Iota, Axes) {
  expectExact(runOp(OpKind::Iota, {}, {{"axis", int64_t{1}}}, ty(DType::f32, {2, 3})),
              ty(DType::f32, {2, 3}), {0, 1, 2, 0, 1, 2});
  expectExact(runOp(OpKind::Iota, {}, {{"axis", int64_t{-1}}}, ty(DType::f32, {2, 3})),
              ty(DType::f32, {2, 3}), {0, 1, 2, 0, 1, 2});
  expectInts(runOp(OpKind::Iota, {}, {{"axis", int64_t{0}}}, ty(DType::i64, {2, 3})),
             ty(DType::i64, {2, 3}), {0, 0, 0, 1, 1, 1});
  // Middle axis of [2, 3, 2].
  expectInts(runOp(OpKind::Iota, {}, {{"axis", int64_t{1}}}, ty(DType::i32, {2, 3, 2})),
             ty(DType::i32, {2, 3, 2}), {0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2});
}

INTERP_OP_TEST(Iota, Bf16RoundsLargeIndices) {
  // Above 256 bf16 steps by 2: 257 ties to 256, 259 ties to 260.
  Tensor t = runOp(OpKind::Iota, {}, {{"axis", int64_t{0}}}, ty(DType::bf16, {260}));
  EXPECT_EQ(t.getF(255), 255);
  EXPECT_EQ(t.getF(257), 256);
  EXPECT_EQ(t.getF(259), 260);
}

INTERP_OP_TEST(PhiloxUniform, MatchesPhiloxAt) {
  uint64_t seed = (uint64_t{1} << 40) + 3, offset = 7;
  Tensor s = TI(DType::i64, {}, {static_cast<int64_t>(seed)});
  Tensor o = TI(DType::i64, {}, {static_cast<int64_t>(offset)});
  Tensor r32 = runOp(OpKind::PhiloxUniform, {s, o}, {}, ty(DType::f32, {2, 3}));
  Tensor r64 = runOp(OpKind::PhiloxUniform, {s, o}, {}, ty(DType::f64, {2, 3}));
  Tensor r16 = runOp(OpKind::PhiloxUniform, {s, o}, {}, ty(DType::bf16, {2, 3}));
  ASSERT_EQ(r32.type(), ty(DType::f32, {2, 3}));
  for (int64_t i = 0; i < 6; ++i) {
    double want = philoxUniformAt(seed, offset, static_cast<uint64_t>(i));
    EXPECT_EQ(r32.getF(i), want) << i;
    EXPECT_EQ(r64.getF(i), want) << i;  // the f32 value, widened exactly
    EXPECT_EQ(r16.getF(i), roundTo(DType::bf16, want)) << i;
  }
  // A later offset continues the same stream: an offset counts Philox calls of four elements.
  Tensor shifted =
      runOp(OpKind::PhiloxUniform, {s, TI(DType::i64, {}, {static_cast<int64_t>(offset) + 1})}, {},
            ty(DType::f32, {2}));
  for (int64_t i = 0; i < 2; ++i) EXPECT_EQ(shifted.getF(i), r32.getF(i + 4)) << i;
}

// ---- whole graphs ------------------------------------------------------------------------------

TEST(InterpGraph, ChainOfOps) {
  // Leaky relu written with gt/where/mul, then a sum over rows.
  Graph g;
  Builder b(g);
  Value* x = b.input("x", ty(DType::f32, {2, 3}));
  Value* zero = b.scalar(DType::f32, 0);
  Value* slope = b.scalar(DType::f32, 0.5);
  Value* leaky = b.where(b.op(OpKind::Gt, {x, zero}), x, b.mul(x, slope));
  g.addOutput(leaky);
  g.addOutput(b.reduce(OpKind::ReduceSum, leaky, {1}));
  auto outs = Interpreter().run(g, {{"x", T(DType::f32, {2, 3}, {1, -2, 3, -4, 5, 0})}});
  expectExact(outs.at(0), ty(DType::f32, {2, 3}), {1, -1, 3, -2, 5, 0});
  expectExact(outs.at(1), ty(DType::f32, {2}), {3, 3});
}

TEST(InterpGraph, MissingInputIsNamed) {
  Graph g;
  Builder b(g);
  g.addOutput(b.add(b.input("x", ty(DType::f32, {2})), b.input("y", ty(DType::f32, {2}))));
  std::string msg = errorOf([&] { Interpreter().run(g, {{"x", T(DType::f32, {2}, {1, 2})}}); });
  EXPECT_NE(msg.find("missing input %y"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[2]"), std::string::npos) << msg;
}

TEST(InterpGraph, WrongInputTypeNamesBothTypes) {
  Graph g;
  Builder b(g);
  g.addOutput(b.add(b.input("x", ty(DType::f32, {2})), b.input("y", ty(DType::f32, {2}))));
  for (const Tensor& bad :
       {T(DType::f64, {2}, {1, 2}), T(DType::f32, {3}, {1, 2, 3}), T(DType::i32, {2}, {1, 2})}) {
    std::string msg = errorOf([&] {
      Interpreter().run(g, {{"x", T(DType::f32, {2}, {1, 2})}, {"y", bad}});
    });
    EXPECT_NE(msg.find("input %y"), std::string::npos) << msg;
    EXPECT_NE(msg.find(bad.type().str()), std::string::npos) << msg;
    EXPECT_NE(msg.find("declares f32[2]"), std::string::npos) << msg;
  }
  // Under promote_to_f64 any float dtype of the right shape is accepted, but not an int.
  InterpreterOptions p{.promote_to_f64 = true};
  EXPECT_EQ(errorOf([&] {
              Interpreter(p).run(
                  g, {{"x", T(DType::f16, {2}, {1, 2})}, {"y", T(DType::f64, {2}, {1, 2})}});
            }),
            "");
  EXPECT_NE(errorOf([&] {
              Interpreter(p).run(
                  g, {{"x", T(DType::f32, {2}, {1, 2})}, {"y", T(DType::i32, {2}, {1, 2})}});
            }),
            "");
}

TEST(InterpGraph, UnknownInputNameIsRejected) {
  Graph g;
  Builder b(g);
  g.addOutput(b.neg(b.input("x", ty(DType::f32, {2}))));
  std::string msg = errorOf([&] {
    Interpreter().run(g, {{"x", T(DType::f32, {2}, {1, 2})}, {"z", T(DType::f32, {2}, {1, 2})}});
  });
  EXPECT_NE(msg.find("unknown input 'z'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("%x"), std::string::npos) << msg;
}

TEST(InterpGraph, RuntimeErrorsNameTheNode) {
  Graph g;
  Builder b(g);
  Value* table = b.input("table", ty(DType::f32, {3, 2}));
  Value* ids = b.input("ids", ty(DType::i32, {2}));
  g.addOutput(b.gather(table, ids, "embed.lookup"));
  std::string msg = errorOf([&] {
    Interpreter().run(g, {{"table", T(DType::f32, {3, 2}, {0, 1, 2, 3, 4, 5})},
                          {"ids", TI(DType::i32, {2}, {2, 3})}});
  });
  EXPECT_NE(msg.find("gather %embed.lookup (f32[3,2], i32[2])"), std::string::npos) << msg;
  EXPECT_NE(msg.find("index 3 "), std::string::npos) << msg;
  EXPECT_NE(msg.find("3 rows"), std::string::npos) << msg;
}

// ---- evalNode ----------------------------------------------------------------------------------

TEST(InterpEvalNode, EvaluatesOneNodeAndChecksOperands) {
  Graph g;
  Builder b(g);
  Value* x = b.input("x", ty(DType::f32, {2}));
  Value* y = b.input("y", ty(DType::f32, {2}));
  Node* add = b.add(x, y, "sum")->def();
  Tensor tx = T(DType::f32, {2}, {1, 2}), ty2 = T(DType::f32, {2}, {10, 20});
  auto r = Interpreter().evalNode(*add, {&tx, &ty2});
  ASSERT_EQ(r.size(), 1u);
  expectExact(r[0], ty(DType::f32, {2}), {11, 22});

  Tensor wrong = T(DType::f64, {2}, {10, 20});
  std::string msg = errorOf([&] { Interpreter().evalNode(*add, {&tx, &wrong}); });
  EXPECT_NE(msg.find("add %sum"), std::string::npos) << msg;
  EXPECT_NE(msg.find("operand 1 is f64[2], expected f32[2]"), std::string::npos) << msg;
  EXPECT_NE(errorOf([&] { Interpreter().evalNode(*add, {&tx}); }), "");
  EXPECT_NE(errorOf([&] { Interpreter().evalNode(*x->def(), {}); }), "");

  // Under promote_to_f64 the f32 operands are widened and the result is f64.
  auto p = Interpreter({.promote_to_f64 = true}).evalNode(*add, {&tx, &wrong});
  expectExact(p.at(0), ty(DType::f64, {2}), {11, 22});
  // Also for kernels that copy elements rather than compute them.
  Node* flip = b.reshape(x, {2, 1})->def();
  Tensor half = T(DType::f16, {2}, {0.5, -3});
  expectExact(Interpreter({.promote_to_f64 = true}).evalNode(*flip, {&half}).at(0),
              ty(DType::f64, {2, 1}), {0.5, -3});
}

// ---- promote_to_f64 ----------------------------------------------------------------------------

TEST(InterpPromote, F64KeepsWhatF32Rounds) {
  Graph g;
  Builder b(g);
  Value* x = b.input("x", ty(DType::f32, {3}));
  Value* y = b.input("y", ty(DType::f32, {3}));
  g.addOutput(b.add(x, y));
  g.addOutput(b.cast(x, DType::i32));
  g.addOutput(b.cast(x, DType::bf16));
  std::map<std::string, Tensor> in{{"x", T(DType::f32, {3}, {1, 1e8, 1.00390625})},
                                   {"y", T(DType::f32, {3}, {1e-7, 1, 0.2})}};
  // The f32 values of the inputs, as doubles.
  double y0 = static_cast<float>(1e-7), y2 = static_cast<float>(0.2);

  auto f32 = Interpreter().run(g, in);
  // 1 + 1e-7 is 1 + one f32 ulp (1.19e-7) after rounding; 1e8 + 1 rounds back to 1e8.
  expectExact(f32[0], ty(DType::f32, {3}),
              {roundTo(DType::f32, 1 + y0), 1e8, roundTo(DType::f32, 1.00390625 + y2)});
  expectInts(f32[1], ty(DType::i32, {3}), {1, 100000000, 1});
  expectExact(f32[2], ty(DType::bf16, {3}), {1, roundTo(DType::bf16, 1e8), 1});

  auto f64 = Interpreter({.promote_to_f64 = true}).run(g, in);
  expectExact(f64[0], ty(DType::f64, {3}), {1 + y0, 1e8 + 1, 1.00390625 + y2});
  EXPECT_NE(f64[0].getF(0), f32[0].getF(0));
  expectInts(f64[1], ty(DType::i32, {3}), {1, 100000000, 1});  // ints are not promoted
  // A cast to bf16 is a float result too: f64, not rounded.
  expectExact(f64[2], ty(DType::f64, {3}), {1, 1e8, 1.00390625});
}

TEST(InterpPromote, SoftmaxOfMatmulAgreesWithF32ToF32Precision) {
  // softmax(x @ w) with x [2, 3] and w [3, 2], against the same formula in double here.
  Graph g;
  Builder b(g);
  Value* x = b.input("x", ty(DType::f32, {2, 3}));
  Value* w = b.input("w", ty(DType::f32, {3, 2}));
  g.addOutput(b.softmax(b.matmul(x, w)));
  std::vector<double> xv{0.1, -0.7, 0.3, 1.1, 0.5, -0.2};
  std::vector<double> wv{0.9, -0.4, 0.25, 0.6, -1.3, 0.05};
  std::map<std::string, Tensor> in{{"x", T(DType::f32, {2, 3}, xv)},
                                   {"w", T(DType::f32, {3, 2}, wv)}};
  std::vector<double> want;
  for (int i = 0; i < 2; ++i) {
    double z[2] = {0, 0};
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 3; ++k)
        z[j] += static_cast<double>(static_cast<float>(xv[i * 3 + k])) *
                static_cast<float>(wv[k * 2 + j]);
    // softmax of two: 1 / (1 + e^(other - self)).
    want.push_back(1 / (1 + std::exp(z[1] - z[0])));
    want.push_back(1 / (1 + std::exp(z[0] - z[1])));
  }
  expectNear(Interpreter({.promote_to_f64 = true}).run(g, in).at(0), ty(DType::f64, {2, 2}), want,
             1e-15);
  expectNear(Interpreter().run(g, in).at(0), ty(DType::f32, {2, 2}), want, 2e-7);
}

TEST(InterpPromote, SixteenBitInputsAreWidened) {
  // bf16 in the graph: 256 + 1 rounds to 256 in bf16, but not once promoted.
  Graph g;
  Builder b(g);
  Value* x = b.input("x", ty(DType::bf16, {2}));
  g.addOutput(b.add(x, b.scalar(DType::bf16, 1)));
  std::map<std::string, Tensor> in{{"x", T(DType::bf16, {2}, {256, 0.5})}};
  expectExact(Interpreter().run(g, in).at(0), ty(DType::bf16, {2}), {256, 1.5});
  expectExact(Interpreter({.promote_to_f64 = true}).run(g, in).at(0), ty(DType::f64, {2}),
              {257, 1.5});
}

// ---- coverage ----------------------------------------------------------------------------------

TEST(InterpCoverage, EveryOpHasATest) {
  // Filled by INTERP_OP_TEST in every interp_*_test.cpp; an op added to ops.def without a
  // test fails here.
  for (const OpInfo& info : allOps())
    EXPECT_TRUE(testedOps().count(info.kind))
        << "op '" << info.name << "' has no INTERP_OP_TEST case";
}

}  // namespace
}  // namespace tgc
