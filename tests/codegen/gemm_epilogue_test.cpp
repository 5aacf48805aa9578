// GEMM epilogues (codegen/gemm_epilogue.h) against a double-precision reference that applies
// the stages as the interpreter defines them (ir/interpreter.cpp: relu keeps NaN and maps -0
// to +0, gelu with erf or tanh), over shapes with remainders in every blocking dimension,
// transposes, batches with the addend and mask in their own layouts, f32 and f64, one and two
// threads, and the direct-A and packed-A paths.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/gemm.h"
#include "support/thread_pool.h"
#include "tests/codegen/gemm_test_util.h"

namespace tgc::codegen {
namespace {

using testing::randomVector;

double activate(GemmActivation act, double x) {
  switch (act) {
    case GemmActivation::none: return x;
    case GemmActivation::relu: return std::isnan(x) || x > 0 ? x : 0.0;
    case GemmActivation::gelu: return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2));
    case GemmActivation::geluTanh:
      return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case GemmActivation::silu: return x / (1.0 + std::exp(-x));
  }
  return x;
}

struct Case {
  int64_t m, n, k;
  bool transA = false, transB = false;
  int64_t batch = 1;
  GemmEpilogue epi;
  double alpha = 1.0, beta = 0.0;
};

std::string describe(const Case& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
         (c.transA ? " tA" : "") + (c.transB ? " tB" : "") + " batch " + std::to_string(c.batch) +
         " epilogue " + c.epi.tag() + " alpha " + std::to_string(c.alpha) + " beta " +
         std::to_string(c.beta);
}

// Runs the case with A, B and C contiguous per item, the addend with a row padding of 3 and
// items 5 elements apart beyond that, the mask with a padding of 1; checks every element.
template <class T>
void check(const Case& cs, ThreadPool& pool, uint32_t seed) {
  SCOPED_TRACE(describe(cs) + " threads " + std::to_string(pool.numThreads()));
  GemmDesc d = GemmDesc::contiguous(std::is_same_v<T, float> ? DType::f32 : DType::f64, cs.m,
                                    cs.n, cs.k, cs.transA, cs.transB);
  d.alpha = cs.alpha;
  d.beta = cs.beta;
  d.epilogue = cs.epi;
  GemmEpilogue& e = d.epilogue;
  const int64_t addLd = cs.n + 3, addItem = cs.m * addLd + 5;
  const int64_t maskLd = cs.n + 1, maskItem = cs.m * maskLd;
  if (cs.batch > 1) {
    d.addBatch(cs.batch);
    e.strideAddend = {addItem};
    e.strideMask = {maskItem};
  }
  e.ldAddend = addLd;
  e.ldMask = maskLd;
  const size_t items = static_cast<size_t>(cs.batch);
  auto a = randomVector<T>(items * static_cast<size_t>(cs.m * cs.k), seed);
  auto b = randomVector<T>(items * static_cast<size_t>(cs.k * cs.n), seed + 1);
  auto c = randomVector<T>(items * static_cast<size_t>(cs.m * cs.n), seed + 2);
  if (cs.beta == 0.0)
    for (auto& x : c) x = std::numeric_limits<T>::quiet_NaN();  // must not be read
  const auto c0 = c;
  auto bias = randomVector<T>(static_cast<size_t>(cs.n), seed + 3);
  auto addend = randomVector<T>(items * static_cast<size_t>(addItem), seed + 4);
  // Value masks: some exactly 0, some negative, a NaN (never kept); byte masks 0/1/255.
  auto maskV = randomVector<T>(items * static_cast<size_t>(maskItem), seed + 5);
  std::vector<unsigned char> maskB(maskV.size());
  for (size_t i = 0; i < maskV.size(); ++i) {
    if (i % 7 == 0) maskV[i] = 0;
    if (i % 11 == 3) maskV[i] = std::numeric_limits<T>::quiet_NaN();
    maskB[i] = i % 3 == 0 ? 0 : (i % 3 == 1 ? 1 : 255);
  }
  auto gate = randomVector<T>(maskV.size(), seed + 6);  // a product's factors: any value
  for (size_t i = 0; i < gate.size(); i += 5) gate[i] = 0;
  GemmEpilogueOperands ops;
  if (e.bias) ops.bias = bias.data();
  if (e.addend) ops.addend = addend.data();
  if (e.mask == GemmMask::positive) ops.mask = maskV.data();
  if (e.mask == GemmMask::nonzero) ops.mask = maskB.data();
  if (e.mask == GemmMask::multiply) ops.mask = gate.data();
  GemmEngine::host(d.dtype).run(d, a.data(), b.data(), c.data(), &pool, ops);

  const double eps = std::numeric_limits<T>::epsilon();
  for (int64_t it = 0; it < cs.batch; ++it)
    for (int64_t i = 0; i < cs.m; ++i)
      for (int64_t j = 0; j < cs.n; ++j) {
        double sum = 0, absSum = 0;
        for (int64_t p = 0; p < cs.k; ++p) {
          const double av = a[it * cs.m * cs.k + (cs.transA ? p * cs.m + i : i * cs.k + p)];
          const double bv = b[it * cs.k * cs.n + (cs.transB ? j * cs.k + p : p * cs.n + j)];
          sum += av * bv;
          absSum += std::abs(av * bv);
        }
        const size_t ci = static_cast<size_t>(it * cs.m * cs.n + i * cs.n + j);
        const double old = cs.beta == 0.0 ? 0.0 : static_cast<double>(c0[ci]);
        double v = cs.alpha * sum + cs.beta * old;
        double mag = std::abs(cs.alpha) * absSum + std::abs(cs.beta * old);
        if (e.bias) {
          v += bias[static_cast<size_t>(j)];
          mag += std::abs(bias[static_cast<size_t>(j)]);
        }
        if (e.addend) {
          const double ad = addend[static_cast<size_t>(it * addItem + i * addLd + j)];
          v += ad;
          mag += std::abs(ad);
        }
        v = activate(e.activation, v) * e.scale;
        const size_t mi = static_cast<size_t>(it * maskItem + i * maskLd + j);
        if (e.mask == GemmMask::positive && !(maskV[mi] > 0)) v = 0;
        if (e.mask == GemmMask::nonzero && maskB[mi] == 0) v = 0;
        if (e.mask == GemmMask::multiply) {
          v *= gate[mi];
          mag *= std::abs(gate[mi]);
        }
        // The product's rounding bound, through activations of slope <= 1.13, plus a few
        // ulp for erf/tanh.
        const double tol = ((cs.k + 8) * eps * mag * 1.2 + 8 * eps * std::abs(v)) * std::abs(e.scale) + 1e-300;
        ASSERT_NEAR(static_cast<double>(c[ci]), v, tol) << "item " << it << " at (" << i << ", " << j << ")";
      }
}

const std::vector<std::vector<int64_t>> kShapes = {
    {1, 1, 1}, {1, 17, 3}, {5, 1, 7}, {6, 16, 8}, {7, 33, 9}, {13, 31, 97}, {37, 130, 43},
    {150, 200, 260},  // past mc = 144 rows and kc = 256
};

GemmEpilogue full(GemmActivation act, GemmMask mask) {
  GemmEpilogue e;
  e.bias = true;
  e.addend = true;
  e.activation = act;
  e.scale = -1.5;
  e.mask = mask;
  return e;
}

template <class T>
void sweep(ThreadPool& pool) {
  const std::vector<GemmEpilogue> epilogues = [] {
    std::vector<GemmEpilogue> v;
    GemmEpilogue bias;
    bias.bias = true;
    v.push_back(bias);
    GemmEpilogue biasRelu = bias;
    biasRelu.activation = GemmActivation::relu;
    v.push_back(biasRelu);
    GemmEpilogue addend;
    addend.addend = true;
    v.push_back(addend);
    GemmEpilogue reluGrad;  // dH * (H > 0)
    reluGrad.mask = GemmMask::positive;
    v.push_back(reluGrad);
    v.push_back(full(GemmActivation::gelu, GemmMask::none));
    v.push_back(full(GemmActivation::geluTanh, GemmMask::nonzero));
    v.push_back(full(GemmActivation::silu, GemmMask::none));
    GemmEpilogue siluGate;  // SwiGLU's silu(x W1), then (x W3) * silu(x W1)
    siluGate.activation = GemmActivation::silu;
    v.push_back(siluGate);
    GemmEpilogue upTimesGate;
    upTimesGate.mask = GemmMask::multiply;
    v.push_back(upTimesGate);
    v.push_back(full(GemmActivation::relu, GemmMask::multiply));
    return v;
  }();
  uint32_t seed = 1;
  for (const auto& s : kShapes)
    for (int t = 0; t < 4; ++t)
      for (const GemmEpilogue& e : epilogues) {
        Case c{s[0], s[1], s[2], (t & 1) != 0, (t & 2) != 0, 1, e};
        check<T>(c, pool, seed++);
        if (::testing::Test::HasFatalFailure()) return;
      }
}

TEST(GemmEpilogue, SweepF32) {
  ThreadPool pool(2);
  sweep<float>(pool);
}

TEST(GemmEpilogue, SweepF64) {
  ThreadPool pool(1);
  sweep<double>(pool);
}

TEST(GemmEpilogue, BatchesWithTheirOwnLayouts) {
  ThreadPool one(1), two(2);
  for (ThreadPool* pool : {&one, &two})
    for (int64_t batch : {2, 3, 8}) {
      check<float>({9, 21, 17, false, true, batch, full(GemmActivation::relu, GemmMask::positive)}, *pool, 7);
      check<double>({9, 21, 17, true, false, batch, full(GemmActivation::gelu, GemmMask::nonzero)}, *pool, 8);
      // Few rows, many columns: the threads split the B slivers.
      check<float>({3, 300, 20, false, false, batch, full(GemmActivation::geluTanh, GemmMask::none)}, *pool, 9);
      check<float>({3, 300, 20, false, true, batch, full(GemmActivation::silu, GemmMask::multiply)}, *pool, 10);
      check<double>({9, 21, 17, false, false, batch, full(GemmActivation::silu, GemmMask::multiply)}, *pool, 16);
    }
}

TEST(GemmEpilogue, AlphaBetaComeFirst) {
  ThreadPool pool(2);
  GemmEpilogue e = full(GemmActivation::relu, GemmMask::none);
  check<float>({40, 50, 30, false, false, 1, e, 0.5, 0.75}, pool, 11);
  check<double>({40, 50, 30, true, true, 2, e, -2.0, 1.0}, pool, 12);
}

TEST(GemmEpilogue, EmptyContractionAppliesTheEpilogueToZeros) {
  ThreadPool pool(1);
  check<float>({5, 9, 0, false, false, 1, full(GemmActivation::gelu, GemmMask::positive)}, pool, 13);
  check<double>({5, 9, 0, false, false, 2, full(GemmActivation::relu, GemmMask::none)}, pool, 14);
}

TEST(GemmEpilogue, LargeMultiThreaded) {
  ThreadPool pool(2);
  GemmEpilogue e;
  e.bias = true;
  e.activation = GemmActivation::gelu;
  check<float>({300, 520, 128, false, false, 1, e}, pool, 15);
}

TEST(GemmEpilogue, MissingOperandsAndBadLayoutsAreRejected) {
  GemmDesc d = GemmDesc::contiguous(DType::f32, 4, 4, 4);
  std::vector<float> a(16, 1), b(16, 1), c(16);
  d.epilogue.bias = true;
  EXPECT_THROW(gemm(d, a.data(), b.data(), c.data()), std::invalid_argument);
  d.epilogue.bias = false;
  d.epilogue.addend = true;
  d.epilogue.ldAddend = 3;  // less than n
  GemmEpilogueOperands ops;
  ops.addend = a.data();
  EXPECT_THROW(gemm(d, a.data(), b.data(), c.data(), nullptr, ops), std::invalid_argument);
  d.epilogue.ldAddend = 4;
  d.addBatch(2);  // no addend batch stride given
  EXPECT_THROW(d.validate(), std::invalid_argument);
}

TEST(GemmEpilogue, VariantsAreDistinct) {
  std::vector<bool> seen(GemmEpilogue::kVariants, false);
  for (bool bias : {false, true})
    for (bool addend : {false, true})
      for (auto act : {GemmActivation::none, GemmActivation::relu, GemmActivation::gelu,
                       GemmActivation::geluTanh, GemmActivation::silu})
        for (double scale : {1.0, 2.0})
          for (auto mask : {GemmMask::none, GemmMask::positive, GemmMask::nonzero, GemmMask::multiply}) {
            GemmEpilogue e;
            e.bias = bias;
            e.addend = addend;
            e.activation = act;
            e.scale = scale;
            e.mask = mask;
            const int v = e.variant();
            ASSERT_GE(v, 0);
            ASSERT_LT(v, GemmEpilogue::kVariants);
            EXPECT_FALSE(seen[static_cast<size_t>(v)]) << e.tag();
            seen[static_cast<size_t>(v)] = true;
          }
}

}  // namespace
}  // namespace tgc::codegen
