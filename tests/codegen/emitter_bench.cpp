// Throughput of emitted kernels against plain C++ loops compiled with -O3 -march=native
// (std::exp from libm), single thread, best of several runs:
//   exp      y[i] = exp(x[i]) over 1M floats
//   rowsum   s[r] = sum_j x[r, j] over 1024 x 1024 floats
//   softmax  y[r, :] = softmax(x[r, :]) over 1024 rows of 1024 (max, exp-sum, scale)
// Usage: emitter_bench [reps]   (prints elements/s and the ratio)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>

#include "codegen/llvm_emitter.h"
#include "ir/tensor.h"

namespace {

using namespace tgc;
using namespace tgc::codegen;
using namespace tgc::codegen::kir;

constexpr int64_t kRows = 1024;
constexpr int64_t kCols = 1024;
constexpr int64_t kN = kRows * kCols;

double bestSeconds(int reps, const std::function<void()>& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

void report(const char* name, double kernelS, double cppS) {
  std::printf(
      "%-8s kernel %7.0f M elements/s   C++ -O3 -march=native %7.0f M elements/s   speedup %.2fx\n",
      name, kN / kernelS / 1e6, kN / cppS / 1e6, cppS / kernelS);
}

// Each kernel: parallel over rows, the column loop vectorized.
Kernel expKernel() {
  Kernel k;
  k.name = "bench_exp";
  int x = k.addBuffer("x", DType::f32, kN, Access::Read);
  int y = k.addBuffer("y", DType::f32, kN, Access::Write);
  k.parallelVar = k.addVar("r", DType::i64);
  k.parallelExtent = kRows;
  int j = k.addVar("j", DType::i64);
  auto idx = add(mul(varRef(k, k.parallelVar), kCols), varRef(k, j));
  k.body = {
      loop(j, kCols, {store(y, idx, unary(UnaryOp::Exp, load(k, x, idx)))}, LoopKind::Vector)};
  return k;
}

Kernel rowsumKernel() {
  Kernel k;
  k.name = "bench_rowsum";
  int x = k.addBuffer("x", DType::f32, kN, Access::Read);
  int s = k.addBuffer("s", DType::f32, kRows, Access::Write);
  k.parallelVar = k.addVar("r", DType::i64);
  k.parallelExtent = kRows;
  int j = k.addVar("j", DType::i64);
  int acc = k.addVar("acc", DType::f32);
  auto r = varRef(k, k.parallelVar);
  auto idx = add(mul(r, kCols), varRef(k, j));
  k.body = {assign(acc, constFloat(0)),
            loop(j, kCols, {assign(acc, binary(BinaryOp::Add, varRef(k, acc), load(k, x, idx)))},
                 LoopKind::Vector),
            store(s, r, varRef(k, acc))};
  return k;
}

Kernel softmaxKernel() {
  Kernel k;
  k.name = "bench_softmax";
  int x = k.addBuffer("x", DType::f32, kN, Access::Read);
  int y = k.addBuffer("y", DType::f32, kN, Access::Write);
  k.parallelVar = k.addVar("r", DType::i64);
  k.parallelExtent = kRows;
  int j1 = k.addVar("j1", DType::i64), j2 = k.addVar("j2", DType::i64),
      j3 = k.addVar("j3", DType::i64);
  int mx = k.addVar("mx", DType::f32), sum = k.addVar("sum", DType::f32),
      inv = k.addVar("inv", DType::f32);
  auto r = varRef(k, k.parallelVar);
  auto at = [&](int j) { return add(mul(r, kCols), varRef(k, j)); };
  auto e = unary(UnaryOp::Exp, binary(BinaryOp::Sub, load(k, x, at(j2)), varRef(k, mx)));
  k.body = {
      assign(mx, constFloat(-std::numeric_limits<double>::infinity())),
      loop(j1, kCols, {assign(mx, binary(BinaryOp::Max, varRef(k, mx), load(k, x, at(j1))))},
           LoopKind::Vector),
      assign(sum, constFloat(0)),
      loop(j2, kCols,
           {store(y, at(j2), e),
            assign(sum, binary(BinaryOp::Add, varRef(k, sum), load(k, y, at(j2))))},
           LoopKind::Vector),
      assign(inv, binary(BinaryOp::Div, constFloat(1), varRef(k, sum))),
      loop(j3, kCols, {store(y, at(j3), binary(BinaryOp::Mul, load(k, y, at(j3)), varRef(k, inv)))},
           LoopKind::Vector)};
  return k;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  JitOptions o;
  o.useCache = false;
  Jit jit(o);
  Kernel ke = expKernel(), kr = rowsumKernel(), ks = softmaxKernel();
  auto fns = compileKernels(jit, {&ke, &kr, &ks});

  Tensor x(TensorType{DType::f32, {kN}}), y(x.type()), s(TensorType{DType::f32, {kRows}});
  float* xp = x.as<float>();
  float* yp = y.as<float>();
  float* sp = s.as<float>();
  for (int64_t i = 0; i < kN; ++i)
    xp[i] = static_cast<float>(std::sin(static_cast<double>(i)) * 8.0);
  void* buf2[] = {xp, yp};
  void* bufS[] = {xp, sp};

  double k1 = bestSeconds(reps, [&] { fns[0](buf2, 0, kRows); });
  double c1 = bestSeconds(reps, [&] {
    for (int64_t i = 0; i < kN; ++i) yp[i] = std::exp(xp[i]);
  });
  report("exp", k1, c1);

  double k2 = bestSeconds(reps, [&] { fns[1](bufS, 0, kRows); });
  double c2 = bestSeconds(reps, [&] {
    for (int64_t r = 0; r < kRows; ++r) {
      float acc = 0;
      for (int64_t j = 0; j < kCols; ++j) acc += xp[r * kCols + j];
      sp[r] = acc;
    }
  });
  report("rowsum", k2, c2);

  double k3 = bestSeconds(reps, [&] { fns[2](buf2, 0, kRows); });
  double c3 = bestSeconds(reps, [&] {
    for (int64_t r = 0; r < kRows; ++r) {
      const float* row = xp + r * kCols;
      float* out = yp + r * kCols;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < kCols; ++j) m = std::max(m, row[j]);
      float sum = 0;
      for (int64_t j = 0; j < kCols; ++j) sum += (out[j] = std::exp(row[j] - m));
      float inv = 1.0f / sum;
      for (int64_t j = 0; j < kCols; ++j) out[j] *= inv;
    }
  });
  report("softmax", k3, c3);
  return 0;
}
