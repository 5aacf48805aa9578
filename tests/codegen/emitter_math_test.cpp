// The inline f32 exp, log, tanh and erf (codegen/llvm_math.cpp), run as vectorized
// kernels over 4M float bit patterns spread over every exponent and sign, plus the edge
// cases, against the double-precision libm results: error in ulps of the exact value, and
// exact results at +-0, +-inf, NaN, overflow and underflow.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <string_view>
#include <vector>

#include "codegen/llvm_emitter.h"
#include "ir/tensor.h"

namespace tgc::codegen {
namespace {

using namespace kir;

constexpr int64_t kChunk = 1024;
constexpr int64_t kChunks = 4096;
constexpr int64_t kN = kChunk * kChunks;

std::vector<float> edgeCases() {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v = {
      0.0f, -0.0f, inf, -inf, nan, -nan, std::numeric_limits<float>::denorm_min(),
      -std::numeric_limits<float>::denorm_min(), 1e-40f, FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX, 1.0f,
      -1.0f, std::nextafter(1.0f, 2.0f), std::nextafter(1.0f, 0.0f),
      // exp: the last finite result, the first inf, subnormal results, the last nonzero
      88.72283f, 88.722839f, 88.7228394f, 89.0f, 100.0f, -87.33654f, -87.3366f, -100.0f,
      -103.27893f, -103.972076f, -103.972084f, -104.0f, -150.0f,
      // tanh and erf branch points
      0.625f, std::nextafter(0.625f, 0.0f), -0.625f, 0.9999999f, 1.0000001f, 3.92f, 4.0f, 4.5f,
      9.0f, 9.1f, 20.0f, -20.0f, 1e-20f, -1e-20f, 1e-7f, 0.5f, 2.0f, 10.0f, 0.1f,
      // log near 1 and sqrt(2)
      0.70710677f, 0.7071068f, 1.4142135f, 1.4142137f, 0.99999f, 1.00001f, 2.7182817f};
  return v;
}

// The inputs: bit patterns i * 1024 + (i * 7) % 1024 (every exponent, both signs, varied
// mantissas), the edge cases first.
std::vector<float> inputs() {
  std::vector<float> x(kN);
  for (int64_t i = 0; i < kN; ++i)
    x[i] = std::bit_cast<float>(static_cast<uint32_t>(i * 1024 + (i * 7) % 1024));
  auto edges = edgeCases();
  std::copy(edges.begin(), edges.end(), x.begin());
  return x;
}

KernelFn compileMath(UnaryOp op, const std::string& name, Jit& jit) {
  Kernel k;
  k.name = name;
  int xb = k.addBuffer("x", DType::f32, kN, Access::Read);
  int yb = k.addBuffer("y", DType::f32, kN, Access::Write);
  k.parallelVar = k.addVar("p", DType::i64);
  k.parallelExtent = kChunks;
  int j = k.addVar("j", DType::i64);
  auto idx = add(mul(varRef(k, k.parallelVar), kChunk), varRef(k, j));
  k.body = {loop(j, kChunk, {store(yb, idx, unary(op, load(k, xb, idx)))}, LoopKind::Vector)};
  return compileKernels(jit, {&k})[0];
}

// Error of `got` against the exact value `ref` in ulps of ref (f32 spacing; subnormal
// spacing below FLT_MIN). Infinite when the special cases differ.
double ulpError(float got, double ref) {
  if (std::isnan(ref)) return std::isnan(got) ? 0 : INFINITY;
  const auto refF = static_cast<float>(ref);
  if (std::isinf(refF) || std::isinf(got)) return got == refF ? 0 : INFINITY;
  if (ref == 0) return got == 0 && std::signbit(got) == std::signbit(ref) ? 0 : INFINITY;
  int e = 0;
  std::frexp(ref, &e);
  const double ulp = std::ldexp(1.0, std::max(e - 1, -126) - 23);
  return std::fabs(static_cast<double>(got) - ref) / ulp;
}

struct MathCase {
  UnaryOp op;
  const char* name;
  double (*ref)(double);
  double maxUlps;
};

class EmitterMath : public ::testing::TestWithParam<MathCase> {};

TEST_P(EmitterMath, UlpErrorOverFourMillionPoints) {
  const MathCase& c = GetParam();
  JitOptions o;
  o.useCache = false;
  Jit jit(o);
  KernelFn fn = compileMath(c.op, std::string("math_") + c.name, jit);
  // Tensors: the kernel may assume 64-byte aligned buffers.
  Tensor tx(TensorType{DType::f32, {kN}}), ty(tx.type());
  float* x = tx.as<float>();
  const float* y = ty.as<float>();
  std::vector<float> in = inputs();
  std::copy(in.begin(), in.end(), x);
  void* bufs[] = {tx.data(), ty.data()};
  fn(bufs, 0, kChunks / 2);  // two chunks of the parallel range
  fn(bufs, kChunks / 2, kChunks);
  double worst = 0;
  float worstAt = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < kN; ++i) {
    double err = ulpError(y[i], c.ref(static_cast<double>(x[i])));
    if (err > worst) {
      worst = err;
      worstAt = x[i];
    }
    if (err > c.maxUlps && bad++ < 10)
      ADD_FAILURE() << c.name << "(" << x[i] << " = 0x" << std::hex << std::bit_cast<uint32_t>(x[i])
                    << std::dec << ") = " << y[i] << ", want " << c.ref(static_cast<double>(x[i]))
                    << " (" << err << " ulp)";
  }
  std::cout << c.name << ": max error " << worst << " ulp at " << worstAt << "\n";
  RecordProperty("max_ulp", std::to_string(worst));
  EXPECT_EQ(bad, 0);
}

// Every one of the 2^32 inputs (minutes per function, so only on request:
// TGC_MATH_EXHAUSTIVE=1 emitter_tests --gtest_filter='*Exhaustive*').
TEST_P(EmitterMath, ExhaustiveOnRequest) {
  const char* on = std::getenv("TGC_MATH_EXHAUSTIVE");
  if (!on || std::string_view(on) != "1") GTEST_SKIP() << "set TGC_MATH_EXHAUSTIVE=1";
  const MathCase& c = GetParam();
  JitOptions o;
  o.useCache = false;
  Jit jit(o);
  KernelFn fn = compileMath(c.op, std::string("all_") + c.name, jit);
  Tensor tx(TensorType{DType::f32, {kN}}), ty(tx.type());
  uint32_t* x = tx.as<uint32_t>();
  const float* y = ty.as<float>();
  void* bufs[] = {tx.data(), ty.data()};
  double worst = 0;
  uint32_t worstBits = 0;
  for (uint64_t base = 0; base < (uint64_t{1} << 32); base += kN) {
    for (int64_t i = 0; i < kN; ++i) x[i] = static_cast<uint32_t>(base + static_cast<uint64_t>(i));
    fn(bufs, 0, kChunks);
    for (int64_t i = 0; i < kN; ++i) {
      double err = ulpError(y[i], c.ref(static_cast<double>(std::bit_cast<float>(x[i]))));
      if (err > worst) {
        worst = err;
        worstBits = x[i];
      }
    }
  }
  std::cout << c.name << ": all 2^32 inputs, max error " << worst << " ulp at "
            << std::bit_cast<float>(worstBits) << "\n";
  EXPECT_LE(worst, c.maxUlps);
}

INSTANTIATE_TEST_SUITE_P(
    F32, EmitterMath,
    ::testing::Values(MathCase{UnaryOp::Exp, "exp", [](double v) { return std::exp(v); }, 1.5},
                      MathCase{UnaryOp::Log, "log", [](double v) { return std::log(v); }, 1.5},
                      MathCase{UnaryOp::Tanh, "tanh", [](double v) { return std::tanh(v); }, 2.0},
                      MathCase{UnaryOp::Erf, "erf", [](double v) { return std::erf(v); }, 1.5}),
    [](const ::testing::TestParamInfo<MathCase>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace tgc::codegen
