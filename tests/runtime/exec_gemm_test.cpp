// matmul through an Executable (GEMM launches) against the interpreter and, for shapes the
// interpreter would take too long on, against float64 dot products at sampled entries.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "codegen/gemm_small_m.h"
#include "ir/builder.h"
#include "runtime/executable.h"
#include "tests/runtime/exec_test_util.h"

namespace tgc {
namespace {

struct MatMulCase {
  Shape a, b;
  bool ta = false, tb = false;
  DType dtype = DType::f32;
};

std::unique_ptr<Graph> matmulGraph(const MatMulCase& c) {
  auto g = std::make_unique<Graph>("mm");
  Builder b(*g);
  Value* x = b.input("a", TensorType{c.dtype, c.a});
  Value* y = b.input("b", TensorType{c.dtype, c.b});
  g->setOutputs({b.matmul(x, y, c.ta, c.tb, "c")});
  return g;
}

std::string describe(const MatMulCase& c) {
  return fmt::format("{} {}{} x {}{}", dtypeName(c.dtype), shapeStr(c.a), c.ta ? "^T" : "",
                     shapeStr(c.b), c.tb ? "^T" : "");
}

void expectMatchesInterpreter(const MatMulCase& c) {
  SCOPED_TRACE(describe(c));
  auto g = matmulGraph(c);
  auto exe = runtime::Executable::compile(*g, testing::testExecOptions());
  EXPECT_EQ(exe->stats().gemms, 1);
  EXPECT_EQ(exe->stats().kernels, 0);
  auto in = testing::randomInputs(*g, 11);
  auto want = Interpreter().run(*g, in);
  auto got = exe->run(in);
  const double tol = c.dtype == DType::f32 ? 1e-5 : 1e-13;
  EXPECT_TRUE(testing::allClose(got[0], want[0], tol, tol));
}

TEST(ExecGemm, TransposesMatchTheInterpreter) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Shape a = ta ? Shape{13, 7} : Shape{7, 13};
      Shape b = tb ? Shape{9, 13} : Shape{13, 9};
      expectMatchesInterpreter({a, b, ta, tb, DType::f32});
      expectMatchesInterpreter({a, b, ta, tb, DType::f64});
    }
}

// Under constantParams a parameter B is packed at the first run and kept: later runs give
// the same result without reading it, until paramsChanged() has it packed again. A data B
// is read on every run.
TEST(ExecGemm, ConstantParamsArePackedOnceUntilTheyChange) {
  auto g = std::make_unique<Graph>("mm");
  Builder b(*g);
  Value* x = b.input("x", TensorType{DType::f32, {32, 600}});  // (K past one kc block: packed)
  Value* w = b.input("w", TensorType{DType::f32, {600, 200}}, "param");
  Value* v = b.input("v", TensorType{DType::f32, {600, 40}});
  g->setOutputs({b.matmul(x, w, false, false, "y"), b.matmul(x, v, false, false, "z")});
  runtime::ExecOptions opts = testing::testExecOptions();
  opts.constantParams = true;
  auto exe = runtime::Executable::compile(*g, opts);
  auto in = testing::randomInputs(*g, 5);
  const auto first = exe->run(in);
  auto want = Interpreter().run(*g, in);
  EXPECT_TRUE(testing::allClose(first[0], want[0], 1e-4, 1e-4));
  // New values in the same tensors: the kept panels still give the old y; z follows v.
  for (const char* name : {"w", "v"}) {
    float* p = in.at(name).as<float>();
    for (int64_t i = 0; i < in.at(name).numel(); ++i) p[i] = -2 * p[i];
  }
  auto stale = exe->run(in);
  want = Interpreter().run(*g, in);
  EXPECT_TRUE(testing::allClose(stale[0], first[0], 0, 0));
  EXPECT_TRUE(testing::allClose(stale[1], want[1], 1e-4, 1e-4));
  exe->paramsChanged();
  auto fresh = exe->run(in);
  EXPECT_TRUE(testing::allClose(fresh[0], want[0], 1e-4, 1e-4));
}

// Executables given one PackedWeights share the packed B of a weight: shapes of 32 and 16
// rows (more than the small-M kernels take, which read B in place) pack it once (paramsChanged alone takes the shared panels again), and after clear()
// both pack the new values.
TEST(ExecGemm, PackedWeightsAreSharedAcrossShapes) {
  auto graphFor = [](int64_t rows) {
    auto g = std::make_unique<Graph>("mm");
    Builder b(*g);
    Value* x = b.input("x", TensorType{DType::f32, {rows, 600}});
    Value* w = b.input("w", TensorType{DType::f32, {600, 200}}, "param");
    g->setOutputs({b.matmul(x, w, false, false, "y")});
    return g;
  };
  runtime::ExecOptions opts = testing::testExecOptions();
  opts.constantParams = true;
  opts.packedWeights = std::make_shared<runtime::PackedWeights>();
  static_assert(codegen::small_m::kMaxRows < 16);
  auto g32 = graphFor(32), g8 = graphFor(16);
  auto e32 = runtime::Executable::compile(*g32, opts), e8 = runtime::Executable::compile(*g8, opts);
  auto in32 = testing::randomInputs(*g32, 7);
  auto in8 = testing::randomInputs(*g8, 8);
  Tensor& w = in32.at("w");
  auto run8 = [&] {  // on the same weight tensor
    std::map<std::string, Tensor> data{{"x", in8.at("x")}};
    std::vector<Tensor> out;
    e8->run(data, in32, out);
    return out[0];
  };
  e32->run(in32);
  const Tensor first8 = run8();
  for (int64_t i = 0; i < w.numel(); ++i) w.as<float>()[i] *= -1;
  std::map<std::string, Tensor> in8w{{"x", in8.at("x")}, {"w", w}};
  const Tensor want8 = Interpreter().run(*g8, in8w)[0];
  e8->paramsChanged();
  EXPECT_TRUE(testing::allClose(run8(), first8, 0, 0));  // the shared panels, packed before
  opts.packedWeights->clear();
  e8->paramsChanged();
  EXPECT_TRUE(testing::allClose(run8(), want8, 1e-4, 1e-4));
  e32->paramsChanged();
  EXPECT_TRUE(testing::allClose(e32->run(in32)[0], Interpreter().run(*g32, in32)[0], 1e-4, 1e-4));
}

TEST(ExecGemm, BatchDimsBroadcastLikeNumpy) {
  // Equal batches, a matrix shared by the batch, size-1 dims on either side, rank
  // mismatch, and the attention shapes [B, H, S, D] x [B, H, D, S].
  expectMatchesInterpreter({{3, 5, 4}, {3, 4, 6}});
  expectMatchesInterpreter({{3, 5, 4}, {4, 6}});
  expectMatchesInterpreter({{5, 4}, {3, 4, 6}});
  expectMatchesInterpreter({{2, 1, 5, 4}, {3, 4, 6}});
  expectMatchesInterpreter({{2, 3, 5, 4}, {2, 1, 4, 6}, false, false, DType::f64});
  expectMatchesInterpreter({{2, 1, 5, 4}, {1, 3, 6, 4}, false, true});
  expectMatchesInterpreter({{2, 4, 9, 8}, {2, 4, 9, 8}, false, true});
  expectMatchesInterpreter({{2, 4, 9, 8}, {2, 4, 9, 8}, true, false});
  expectMatchesInterpreter({{1, 1, 3, 2}, {1, 2, 5}});
}

// Weight gradients: sum over the batch of x_i^T dy_i runs as one GEMM over the folded batch.
TEST(ExecGemm, BatchSumOfTransposedProductsIsOneGemm) {
  auto g = std::make_unique<Graph>("wgrad");
  Builder b(*g);
  Value* x = b.input("x", TensorType{DType::f32, {4, 3, 7, 5}});
  Value* dy = b.input("dy", TensorType{DType::f32, {4, 3, 7, 6}});
  Value* prod = b.matmul(x, dy, true, false, "prod");
  Value* w = b.op(OpKind::ReduceSum, {prod}, {{"axes", std::vector<int64_t>{0, -3}}}, "w");
  Value* other = b.op(OpKind::ReduceSum, {b.matmul(x, dy, true, false, "p2")},
                      {{"axes", std::vector<int64_t>{0}}}, "partial");  // not every batch dim
  g->setOutputs({w, other});
  auto exe = runtime::Executable::compile(*g, testing::testExecOptions());
  EXPECT_EQ(exe->stats().foldedReductions, 1);
  EXPECT_EQ(exe->stats().gemms, 2);
  EXPECT_EQ(exe->stats().kernels, 1);
  auto in = testing::randomInputs(*g, 4);
  auto want = Interpreter().run(*g, in);
  auto got = exe->run(in);
  EXPECT_TRUE(testing::allClose(got[0], want[0], 1e-5, 1e-5));
  EXPECT_TRUE(testing::allClose(got[1], want[1], 1e-5, 1e-5));
}

// A weight's cast to bf16 whose only uses are as the B of bf16 matmuls (the forward product
// and the backward's dY W^T) runs inside the GEMMs (runtime/gemm_cast_fold.h): no kernel,
// and bit for bit the results of the same products on the weight rounded beforehand. Casts
// used otherwise stay kernels: one that is also read elementwise, one read as A, one of a
// value computed by a kernel (fused with it, never in memory as f32).
TEST(ExecGemm, WeightCastToBf16FoldsIntoTheGemm) {
  auto g = std::make_unique<Graph>("fold");
  Builder b(*g);
  Value* w = b.input("w", TensorType{DType::f32, {13, 9}});
  Value* x = b.input("x", TensorType{DType::bf16, {2, 7, 13}});
  Value* dy = b.input("dy", TensorType{DType::bf16, {7, 9}});
  Value* wb = b.cast(w, DType::bf16, "wb");
  g->setOutputs({b.matmul(x, wb, false, false, "y"), b.matmul(dy, wb, false, true, "dx")});
  auto exe = runtime::Executable::compile(*g, testing::testExecOptions());
  EXPECT_EQ(exe->stats().castsInGemms, 1);
  EXPECT_EQ(exe->stats().kernels, 0);
  auto in = testing::randomInputs(*g, 5);
  in.at("w").setF(3, 1.0 + std::ldexp(1.0, -8));  // a tie: rounds to even (down)
  in.at("w").setF(4, 1.0 + 3 * std::ldexp(1.0, -8));  // a tie: rounds up
  const auto got = exe->run(in);

  // The same products with the weight rounded before, as an input.
  auto pre = std::make_unique<Graph>("prerounded");
  Builder p(*pre);
  Value* wr = p.input("wb", TensorType{DType::bf16, {13, 9}});
  Value* x2 = p.input("x", TensorType{DType::bf16, {2, 7, 13}});
  Value* dy2 = p.input("dy", TensorType{DType::bf16, {7, 9}});
  pre->setOutputs({p.matmul(x2, wr, false, false, "y"), p.matmul(dy2, wr, false, true, "dx")});
  Tensor rounded(TensorType{DType::bf16, {13, 9}});
  for (int64_t i = 0; i < rounded.numel(); ++i) rounded.setF(i, in.at("w").getF(i));
  auto preExe = runtime::Executable::compile(*pre, testing::testExecOptions());
  EXPECT_EQ(preExe->stats().castsInGemms, 0);
  const auto want = preExe->run({{"wb", rounded}, {"x", in.at("x")}, {"dy", in.at("dy")}});
  ASSERT_EQ(got.size(), 2u);
  for (size_t o = 0; o < 2; ++o) {
    ASSERT_EQ(got[o].nbytes(), want[o].nbytes());
    EXPECT_EQ(std::memcmp(got[o].data(), want[o].data(), got[o].nbytes()), 0) << "output " << o;
    EXPECT_TRUE(testing::allClose(got[o], Interpreter().run(*g, in)[o], 2e-2, 2e-2)) << "output " << o;
  }

  // The switch turns it off: the cast is a kernel again, with the same results.
  setenv("TGC_NO_GEMM_CAST_FOLD", "1", 1);
  auto off = runtime::Executable::compile(*g, testing::testExecOptions());
  unsetenv("TGC_NO_GEMM_CAST_FOLD");
  EXPECT_EQ(off->stats().castsInGemms, 0);
  EXPECT_EQ(off->stats().kernels, 1);
  const auto offGot = off->run(in);
  for (size_t o = 0; o < 2; ++o)
    EXPECT_EQ(std::memcmp(offGot[o].data(), got[o].data(), got[o].nbytes()), 0) << "output " << o;

  // Near misses: each keeps its cast kernel.
  auto near = std::make_unique<Graph>("near");
  Builder n(*near);
  Value* w1 = n.input("w1", TensorType{DType::f32, {13, 9}});
  Value* w2 = n.input("w2", TensorType{DType::f32, {7, 13}});
  Value* w3 = n.input("w3", TensorType{DType::f32, {13, 9}});
  Value* xb = n.input("x", TensorType{DType::bf16, {7, 13}});
  Value* c1 = n.cast(w1, DType::bf16, "c1");  // also read by a kernel
  Value* c2 = n.cast(w2, DType::bf16, "c2");  // read as A
  Value* c3 = n.cast(n.op(OpKind::Add, {w3, w3}), DType::bf16, "c3");  // computed by a kernel
  near->setOutputs({n.matmul(xb, c1, false, false, "y1"), n.op(OpKind::Neg, {c1}, {}, "neg"),
                    n.matmul(c2, c1, false, false, "y2"), n.matmul(xb, c3, false, false, "y3")});
  auto nearExe = runtime::Executable::compile(*near, testing::testExecOptions());
  EXPECT_EQ(nearExe->stats().castsInGemms, 0);
  auto nin = testing::randomInputs(*near, 6);
  const auto ngot = nearExe->run(nin);
  const auto nwant = Interpreter().run(*near, nin);
  for (size_t o = 0; o < ngot.size(); ++o)
    EXPECT_TRUE(testing::allClose(ngot[o], nwant[o], 2e-2, 2e-2)) << "output " << o;
}

TEST(ExecGemm, IntegerMatmulIsAClearError) {
  auto g = matmulGraph({{2, 3}, {3, 4}, false, false, DType::i32});
  try {
    runtime::Executable::compile(*g, testing::testExecOptions());
    FAIL() << "compiled an i32 matmul";
  } catch (const IRError& e) {
    EXPECT_NE(std::string(e.what()).find("f32, f64 and bf16"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("matmul %c"), std::string::npos) << e.what();
  }
}

TEST(ExecGemm, EmptyContractionGivesZeros) {
  auto g = matmulGraph({{3, 0}, {0, 4}});
  auto exe = runtime::Executable::compile(*g, testing::testExecOptions());
  auto got = exe->run(testing::randomInputs(*g, 1));
  for (int64_t i = 0; i < got[0].numel(); ++i) EXPECT_EQ(got[0].getF(i), 0.0);
}

// m x n x k from 1x1x1 to 1024x2048x512 (odd sizes, remainders of every tile size), checked
// at sampled entries of C against float64 dot products of the inputs.
TEST(ExecGemm, ShapeSweepAgainstSampledDotProducts) {
  struct Mnk {
    int64_t m, n, k;
  };
  const std::vector<Mnk> shapes{{1, 1, 1},     {1, 7, 3},     {5, 1, 9},      {2, 3, 1},
                                {17, 33, 65},  {64, 64, 64},  {127, 129, 31}, {6, 17, 300},
                                {257, 16, 75}, {256, 512, 128}, {1024, 2048, 512}};
  std::mt19937_64 rng(3);
  for (const Mnk& s : shapes)
    for (int variant = 0; variant < 2; ++variant) {
      const bool ta = variant == 1 && s.m > 1, tb = variant == 1;
      MatMulCase c{ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, tb ? Shape{s.n, s.k} : Shape{s.k, s.n},
                   ta, tb, DType::f32};
      SCOPED_TRACE(describe(c));
      auto g = matmulGraph(c);
      auto exe = runtime::Executable::compile(*g, testing::testExecOptions());
      auto in = testing::randomInputs(*g, 100 + static_cast<uint64_t>(s.m));
      const Tensor &a = in.at("a"), &b = in.at("b");
      const float* pa = a.as<float>();
      const float* pb = b.as<float>();
      Tensor got = exe->run(in)[0];
      const int64_t samples = std::min<int64_t>(s.m * s.n, 400);
      for (int64_t t = 0; t < samples; ++t) {
        const int64_t idx = s.m * s.n <= 400 ? t : static_cast<int64_t>(rng() % (s.m * s.n));
        const int64_t i = idx / s.n, j = idx % s.n;
        double want = 0, mag = 0;
        for (int64_t p = 0; p < s.k; ++p) {
          double x = pa[ta ? p * s.m + i : i * s.k + p], y = pb[tb ? j * s.k + p : p * s.n + j];
          want += x * y;
          mag += std::fabs(x * y);
        }
        // f32 accumulation: error grows with k and the size of the terms.
        ASSERT_NEAR(got.getF(idx), want, 1e-6 * (1 + mag) * std::sqrt(static_cast<double>(s.k)))
            << "C[" << i << "," << j << "]";
      }
    }
}

}  // namespace
}  // namespace tgc
