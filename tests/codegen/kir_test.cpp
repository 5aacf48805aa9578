// Kernel IR: builder type checks, the verifier's errors and the printed form.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "codegen/kernel_ir.h"

namespace tgc::codegen::kir {
namespace {

// Expects `f` to throw std::logic_error whose message contains `part`.
void expectError(const std::function<void()>& f, const std::string& part) {
  try {
    f();
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "message: " << e.what();
    return;
  }
  ADD_FAILURE() << "no std::logic_error (expected one mentioning '" << part << "')";
}

// y[p] = x[p] * 2 + 1 over 8 elements, parallel over p.
Kernel axpb() {
  Kernel k;
  k.name = "axpb";
  int x = k.addBuffer("x", DType::f32, 8, Access::Read);
  int y = k.addBuffer("y", DType::f32, 8, Access::Write);
  k.parallelVar = k.addVar("p", DType::i64);
  k.parallelExtent = 8;
  auto p = varRef(k, k.parallelVar);
  k.body = {store(
      y, p,
      binary(BinaryOp::Add, binary(BinaryOp::Mul, load(k, x, p), constFloat(2)), constFloat(1)))};
  return k;
}

TEST(KirBuilders, ResultTypes) {
  Kernel k = axpb();
  EXPECT_EQ(binary(BinaryOp::Lt, constFloat(1), constFloat(2))->type, DType::boolean);
  EXPECT_EQ(unary(UnaryOp::Not, constInt(3, DType::i32))->type, DType::i32);
  EXPECT_EQ(select(constBool(true), constInt(1), constInt(2))->type, DType::i64);
  EXPECT_EQ(cast(load(k, 0, constInt(0)), DType::bf16)->type, DType::bf16);
  auto x = load(k, 0, constInt(0));
  EXPECT_EQ(cast(x, DType::f32), x);  // no-op cast returns its operand
}

TEST(KirBuilders, RejectBadTypes) {
  Kernel k = axpb();
  expectError([] { binary(BinaryOp::Add, constFloat(1), constInt(1)); },
              "differ in type: f32 and i64");
  expectError([] { unary(UnaryOp::Exp, constInt(1)); }, "exp needs f32 or f64, got i64");
  expectError([] { unary(UnaryOp::Exp, constFloat(1, DType::bf16)); }, "storage type");
  expectError([] { binary(BinaryOp::Pow, constInt(1), constInt(1)); }, "pow needs f32 or f64");
  expectError([] { binary(BinaryOp::Shl, constFloat(1), constFloat(1)); }, "<< needs i32 or i64");
  expectError([] { binary(BinaryOp::And, constFloat(1), constFloat(1)); },
              "& needs bool, i32 or i64");
  expectError([] { unary(UnaryOp::Not, constFloat(1)); }, "not needs bool, i32 or i64");
  expectError([] { select(constInt(1), constInt(1), constInt(2)); },
              "select condition must be bool");
  expectError([] { select(constBool(true), constInt(1), constFloat(2)); }, "select arms differ");
  expectError([&] { load(k, 0, constInt(0, DType::i32)); }, "index must be i64");
  expectError([&] { load(k, 7, constInt(0)); }, "buffer 7 out of range");
  expectError([&] { varRef(k, 9); }, "variable 9 out of range");
  expectError([] { constInt(1, DType::f32); }, "constInt of type f32");
  expectError([] { constInt(int64_t{1} << 40, DType::i32); }, "does not fit in i32");
  expectError([] { constFloat(1, DType::i64); }, "constFloat of type i64");
  expectError([] { loop(0, -1, {}); }, "negative");
  expectError([] { loop(0, 4, {}, LoopKind::Unroll, 0); }, "unroll factor");
  expectError([] { ifThen(constInt(1), {}); }, "if condition must be bool");
  expectError([] { store(0, constFloat(0), constFloat(0)); }, "index must be i64");
}

TEST(KirBuilders, IndexArithmeticFolds) {
  Kernel k;
  k.name = "fold";
  int i = k.addVar("i", DType::i64);
  int j = k.addVar("j", DType::i64);
  auto vi = varRef(k, i), vj = varRef(k, j);
  EXPECT_EQ(add(vi, constInt(0)), vi);
  EXPECT_EQ(add(constInt(0), vi), vi);
  EXPECT_EQ(mul(vi, 1), vi);
  auto zero = mul(vi, 0);
  EXPECT_TRUE(zero->kind == ExprKind::Const && zero->i == 0);
  auto c = add(constInt(3), constInt(4));
  EXPECT_TRUE(c->kind == ExprKind::Const && c->i == 7);
  // (x + 1) + 2 -> x + 3 and (x * 4) * 8 -> x * 32
  auto s = add(add(vi, constInt(1)), constInt(2));
  ASSERT_EQ(s->kind, ExprKind::Binary);
  EXPECT_EQ(s->args[0], vi);
  EXPECT_EQ(s->args[1]->i, 3);
  auto m = mul(mul(vj, 4), 8);
  EXPECT_EQ(m->args[0], vj);
  EXPECT_EQ(m->args[1]->i, 32);
  // Constants go to the right.
  auto r = add(constInt(5), vi);
  EXPECT_EQ(r->args[0], vi);
  // i32 folding wraps like i32 arithmetic.
  auto w = add(constInt(INT32_MAX, DType::i32), constInt(1, DType::i32));
  EXPECT_EQ(w->i, INT32_MIN);
}

TEST(KirVerify, AcceptsWellFormedKernel) { EXPECT_NO_THROW(verify(axpb())); }

TEST(KirVerify, Errors) {
  {
    Kernel k = axpb();
    k.name = "not an identifier";
    expectError([&] { verify(k); }, "is not a C identifier");
  }
  {
    Kernel k = axpb();
    k.body.push_back(store(0, constInt(0), constFloat(1)));  // x is read-only
    expectError([&] { verify(k); }, "kernel axpb: store to read-only buffer x");
  }
  {
    Kernel k = axpb();
    k.body.push_back(store(1, constInt(0), constFloat(1, DType::f64)));
    expectError([&] { verify(k); }, "store of f64 to buffer y of f32");
  }
  {
    Kernel k = axpb();
    int j = k.addVar("j", DType::i64);
    k.body.push_back(store(1, varRef(k, j), constFloat(1)));
    k.body.push_back(loop(j, 4, {}));
    expectError([&] { verify(k); }, "loop variable j used outside its loop");
  }
  {
    Kernel k = axpb();
    int j = k.addVar("j", DType::i64);
    k.body.push_back(loop(j, 4, {loop(j, 2, {})}));
    expectError([&] { verify(k); }, "bound twice");
  }
  {
    Kernel k = axpb();
    int j = k.addVar("j", DType::i32);
    k.body.push_back(loop(j, 4, {}));
    expectError([&] { verify(k); }, "loop variable j must be i64");
  }
  {
    Kernel k = axpb();
    int acc = k.addVar("acc", DType::f32);
    k.body.push_back(store(1, constInt(0), varRef(k, acc)));
    k.body.push_back(assign(acc, constFloat(0)));
    expectError([&] { verify(k); }, "local acc read before it is assigned");
  }
  {
    Kernel k = axpb();
    int acc = k.addVar("acc", DType::f32);
    k.body.push_back(assign(acc, constFloat(0, DType::f64)));
    expectError([&] { verify(k); }, "assignment of f64 to acc of f32");
  }
  {
    Kernel k = axpb();
    k.body.push_back(assign(k.parallelVar, constInt(0)));
    expectError([&] { verify(k); }, "assignment to loop variable p");
  }
  {
    Kernel k = axpb();
    k.body.push_back(store(5, constInt(0), constFloat(0)));
    expectError([&] { verify(k); }, "refers to buffer 5");
  }
  {
    Kernel k = axpb();
    k.buffers[1].inPlaceOf = 0;
    k.buffers[1].numel = 4;
    expectError([&] { verify(k); }, "of another type or size");
  }
  {
    Kernel k = axpb();
    k.buffers[0].inPlaceOf = 1;
    expectError([&] { verify(k); }, "read-only but in place of");
  }
  {
    // A hand-built expression with a wrong type is caught too.
    Kernel k = axpb();
    auto e = std::make_shared<Expr>(*constFloat(1));
    e->type = DType::i64;
    k.body.push_back(store(1, constInt(0), cast(ExprP(e), DType::f32)));
    Expr bad = *binary(BinaryOp::Add, constFloat(1), constFloat(2));
    bad.args[1] = constInt(2);
    k.body.push_back(store(1, constInt(0), std::make_shared<const Expr>(bad)));
    expectError([&] { verify(k); }, "kernel axpb: operands of + differ in type");
  }
}

TEST(KirPrint, Elementwise) {
  EXPECT_EQ(print(axpb()),
            "kernel axpb(x: f32[8] read, y: f32[8] write) cost 1 {\n"
            "  parallel p in [0, 8) {\n"
            "    y[p] = x[p] * 2.0 + 1.0\n"
            "  }\n"
            "}\n");
}

// Row sums of a 4x10 matrix with an accumulator, a vector loop, an unrolled loop, an if.
TEST(KirPrint, LoopsLocalsIf) {
  Kernel k;
  k.name = "rowsum";
  int x = k.addBuffer("x", DType::f32, 40, Access::Read);
  int y = k.addBuffer("y", DType::f64, 4, Access::Write);
  int m = k.addBuffer("m", DType::boolean, 4, Access::ReadWrite);
  k.parallelVar = k.addVar("p", DType::i64);
  k.parallelExtent = 4;
  k.costPerIteration = 10;
  int j = k.addVar("j", DType::i64);
  int u = k.addVar("u", DType::i64);
  int acc = k.addVar("acc", DType::f32);
  auto p = varRef(k, k.parallelVar);
  auto idx = add(mul(p, 10), varRef(k, j));
  k.body = {
      assign(acc, constFloat(0)),
      loop(j, 10, {assign(acc, binary(BinaryOp::Add, varRef(k, acc), load(k, x, idx)))},
           LoopKind::Vector),
      loop(u, 2, {assign(acc, binary(BinaryOp::Mul, varRef(k, acc), constFloat(0.5)))},
           LoopKind::Unroll, 2),
      ifThen(binary(BinaryOp::Gt, varRef(k, acc), constFloat(0)),
             {store(y, p, cast(varRef(k, acc), DType::f64))},
             {store(y, p, constFloat(-1, DType::f64)),
              store(m, p, unary(UnaryOp::Not, load(k, m, p)))}),
  };
  EXPECT_NO_THROW(verify(k));
  EXPECT_EQ(print(k),
            "kernel rowsum(x: f32[40] read, y: f64[4] write, m: bool[4] readwrite) cost 10 {\n"
            "  local acc: f32\n"
            "  parallel p in [0, 4) {\n"
            "    acc = 0.0\n"
            "    vector for j in [0, 10) {\n"
            "      acc = acc + x[p * 10 + j]\n"
            "    }\n"
            "    unroll(2) for u in [0, 2) {\n"
            "      acc = acc * 0.5\n"
            "    }\n"
            "    if acc > 0.0 {\n"
            "      y[p] = f64(acc)\n"
            "    } else {\n"
            "      y[p] = -1.0f64\n"
            "      m[p] = not(m[p])\n"
            "    }\n"
            "  }\n"
            "}\n");
}

// Shared subexpressions print once, as lets: 30 doublings print in linear size.
TEST(KirPrint, SharedValuesAsLets) {
  Kernel k;
  k.name = "lets";
  int x = k.addBuffer("x", DType::f32, 4, Access::Read);
  int y = k.addBuffer("y", DType::f32, 4, Access::Write);
  k.parallelVar = k.addVar("p", DType::i64);
  k.parallelExtent = 4;
  auto p = varRef(k, k.parallelVar);
  auto e = unary(UnaryOp::Exp, load(k, x, p));
  auto sub = binary(BinaryOp::Sub, load(k, x, p), constFloat(1));
  k.body = {store(y, p, binary(BinaryOp::Div, e, binary(BinaryOp::Add, constFloat(1), e))),
            store(y, p, binary(BinaryOp::Mul, sub, sub))};
  EXPECT_EQ(print(k),
            "kernel lets(x: f32[4] read, y: f32[4] write) cost 1 {\n"
            "  parallel p in [0, 4) {\n"
            "    let t0 = exp(x[p])\n"
            "    y[p] = t0 / (1.0 + t0)\n"
            "    let t1 = x[p] - 1.0\n"
            "    y[p] = t1 * t1\n"
            "  }\n"
            "}\n");
  ExprP d = load(k, x, p);
  for (int i = 0; i < 30; ++i) d = binary(BinaryOp::Add, d, d);
  k.body = {store(y, p, d)};
  EXPECT_LT(print(k).size(), 2000u);
}

TEST(KirPrint, ParenthesesAndCalls) {
  Kernel k;
  k.name = "ops";
  int a = k.addVar("a", DType::i64);
  int b = k.addVar("b", DType::i64);
  int f = k.addVar("f", DType::f32);
  k.body = {assign(a, constInt(1)), assign(b, constInt(2)), assign(f, constFloat(1.5))};
  auto va = varRef(k, a), vb = varRef(k, b), vf = varRef(k, f);
  k.body.push_back(assign(
      a, binary(BinaryOp::Mul, binary(BinaryOp::Add, va, vb), binary(BinaryOp::Sub, va, vb))));
  k.body.push_back(assign(a, binary(BinaryOp::Sub, va, binary(BinaryOp::Sub, vb, constInt(1)))));
  k.body.push_back(assign(
      f, binary(BinaryOp::Max, unary(UnaryOp::Exp, vf), binary(BinaryOp::Pow, vf, constFloat(2)))));
  k.body.push_back(
      assign(a, select(binary(BinaryOp::Eq, va, vb), cast(vf, DType::i64), constInt(-3))));
  k.body.push_back(assign(b, binary(BinaryOp::Shr, va, constInt(3))));
  k.body.push_back(assign(f, constFloat(std::numeric_limits<double>::infinity())));
  std::string text = print(k);
  EXPECT_NE(text.find("a = (a + b) * (a - b)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("a = a - (b - 1)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("f = max(exp(f), pow(f, 2.0))\n"), std::string::npos) << text;
  EXPECT_NE(text.find("a = select(a == b, i64(f), -3)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("b = a >> 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("f = inf\n"), std::string::npos) << text;
  EXPECT_NE(text.find("parallel _ in [0, 1)"), std::string::npos) << text;
}

}  // namespace
}  // namespace tgc::codegen::kir
