// The loss library kernels (codegen/loss_kernels.h) against the interpreter's reference
// kernels: odd sizes, f32 and f64, extreme logits, targets at 0 and V - 1 and out of range,
// both instruction sets, and layer_norm_grad's independence of the thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "codegen/loss_kernels.h"
#include "support/thread_pool.h"
#include "tests/ir/interp_test_util.h"

using namespace tgc;
using namespace tgc::codegen;
using tgc::interp_test::runOpResults;

namespace {

Tensor random(TensorType t, std::mt19937_64& rng, double lo, double hi) {
  Tensor r(t);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < r.numel(); ++i) r.setF(i, u(rng));
  return r;
}

// |got - want| <= tol * max(1, |want|), elementwise; an infinity or NaN must be matched by the
// same (the loss of a row with -inf logits is inf, or NaN where eps = 0 multiplies it).
void expectClose(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.type(), want.type()) << what;
  int bad = 0;
  for (int64_t i = 0; i < got.numel() && bad < 5; ++i) {
    double g = got.getF(i), w = want.getF(i);
    if (g == w || (std::isnan(g) && std::isnan(w))) continue;
    if (!(std::fabs(g - w) <= tol * std::max(1.0, std::fabs(w)))) {
      ++bad;
      ADD_FAILURE() << what << " element " << i << ": got " << g << ", want " << w;
    }
  }
}

struct IsaGuard {
  LossIsa saved = lossIsa();
  ~IsaGuard() { setLossIsa(saved); }
};

std::vector<LossIsa> isas() {
  std::vector<LossIsa> r{LossIsa::Portable};
  if (lossIsa() == LossIsa::Avx2) r.push_back(LossIsa::Avx2);
  return r;
}

double tolOf(DType d) { return d == DType::f32 ? 2e-5 : 1e-12; }

// Logits with some rows extreme: a huge spread, equal large values, one dominant entry (last:
// the forward's running max rises in the last block or the tail), -inf entries (the first
// 600 and every third, spanning the forward's first 2 KB block: its max is -inf; the targets'
// columns stay finite), a ramp from -1e4 to 1e4 (the max rises in every block).
Tensor logitsFor(DType dt, int64_t rows, int64_t v, std::mt19937_64& rng) {
  Tensor x = random({dt, {rows, v}}, rng, -4, 4);
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < v; ++c) {
    if (rows > 1) x.setF(1 * v + c, c % 2 ? 3e4 : -3e4);
    if (rows > 2) x.setF(2 * v + c, 80);
    if (rows > 3) x.setF(3 * v + c, c == v - 1 ? 50 : -50);
    const bool keep = c == 0 || c == v / 2 || c == v - 1;
    if (rows > 4 && !keep && (c < 600 || c % 3 == 1)) x.setF(4 * v + c, -inf);
    if (rows > 5) x.setF(5 * v + c, -1e4 + 2e4 * static_cast<double>(c) / static_cast<double>(v));
  }
  return x;
}

// No NaN in lse and dlogits of the rows where the reference has none.
void expectNoNewNaN(const Tensor& got, const Tensor& want, const std::string& what) {
  for (int64_t i = 0; i < got.numel(); ++i)
    if (std::isnan(got.getF(i)) && !std::isnan(want.getF(i))) {
      ADD_FAILURE() << what << " element " << i << " is NaN";
      return;
    }
}

// Targets cycling through 0, V - 1 and the middle.
Tensor targetsFor(DType it, int64_t rows, int64_t v) {
  Tensor t({it, {rows}});
  for (int64_t r = 0; r < rows; ++r) t.setI(r, r % 3 == 0 ? 0 : r % 3 == 1 ? v - 1 : v / 2);
  return t;
}

TEST(LossKernels, ExpMatchesStdExp) {
  IsaGuard guard;
  for (LossIsa isa : isas()) {
    setLossIsa(isa);
    for (DType dt : {DType::f32, DType::f64}) {
      const bool f32 = dt == DType::f32;
      std::vector<double> xs;
      for (double x = f32 ? -103 : -744; x < (f32 ? 88.7 : 709.7); x += f32 ? 0.01337 : 0.0713)
        xs.push_back(x);
      const double inf = std::numeric_limits<double>::infinity();
      xs.insert(xs.end(), {0.0, -0.0, 1e-30, -inf, inf, f32 ? 89.0 : 710.0, -1e6});
      Tensor in({dt, {static_cast<int64_t>(xs.size())}}, xs), out(in.type());
      lossExp(dt, in.data(), out.data(), in.numel());
      double worst = 0;
      for (int64_t i = 0; i < in.numel(); ++i) {
        const double x = in.getF(i), want = std::exp(x), got = out.getF(i);
        Tensor w({dt, {}}, {want});
        const double wr = w.getF(0);  // the correctly rounded value in the dtype
        if (std::isinf(wr) || wr == 0) {
          EXPECT_EQ(got, wr) << "exp(" << x << ")";
          continue;
        }
        // Relative error, measured against the smallest normal in the subnormal range.
        const double normal = f32 ? 1.1754943508222875e-38 : 2.2250738585072014e-308;
        worst = std::max(worst, std::fabs(got - want) / std::max(std::fabs(want), normal));
      }
      EXPECT_LT(worst, f32 ? 2.5e-7 : 2e-15) << dtypeName(dt);
      Tensor nan({dt, {1}}, {std::numeric_limits<double>::quiet_NaN()}), r(nan.type());
      lossExp(dt, nan.data(), r.data(), 1);
      EXPECT_TRUE(std::isnan(r.getF(0)));
    }
  }
}

// The cross-entropy loops' exp for arguments <= 0: ~1 ulp down to its clamp (-87 in f32,
// -708 in f64), e^clamp below it (an absolute error under the smallest normal), NaN kept.
TEST(LossKernels, NonPositiveExpMatchesStdExp) {
  IsaGuard guard;
  for (LossIsa isa : isas()) {
    setLossIsa(isa);
    for (DType dt : {DType::f32, DType::f64}) {
      const bool f32 = dt == DType::f32;
      const double lo = f32 ? -87 : -708;
      std::vector<double> xs;
      for (double x = f32 ? -103 : -744; x <= 0; x += f32 ? 0.00731 : 0.0391) xs.push_back(x);
      xs.insert(xs.end(), {0.0, -0.0, -1e-30, lo, -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN()});
      Tensor in({dt, {static_cast<int64_t>(xs.size())}}, xs), out(in.type());
      lossExp(dt, in.data(), out.data(), in.numel(), /*nonPositive=*/true);
      double worst = 0;
      for (int64_t i = 0; i < in.numel(); ++i) {
        const double x = in.getF(i), got = out.getF(i);
        if (std::isnan(x)) {
          EXPECT_TRUE(std::isnan(got));
          continue;
        }
        const double want = std::exp(std::max(x, lo));
        worst = std::max(worst, std::fabs(got - want) / want);
        if (x < lo) {
          EXPECT_LE(std::fabs(got - std::exp(x)), std::exp(lo) * 1.000001) << x;
        }
      }
      EXPECT_LT(worst, f32 ? 2.5e-7 : 2e-15) << dtypeName(dt);
    }
  }
}

TEST(LossKernels, SoftmaxCrossEntropyMatchesTheInterpreter) {
  IsaGuard guard;
  ThreadPool pool(2);
  std::mt19937_64 rng(7);
  for (DType dt : {DType::f32, DType::f64})
    for (DType it : {DType::i32, DType::i64})
      for (int64_t v : {1, 2, 7, 15, 17, 100, 1031, 8000, 8001})
        for (int64_t rows : {1, 5, 13})
          for (double eps : {0.0, 0.1}) {
            if (v >= 8000 && rows != 13) continue;  // the interpreter is slow at 8000
            const std::string what = fmt::format("{} {} rows={} V={} eps={}", dtypeName(dt),
                                                 dtypeName(it), rows, v, eps);
            Tensor x = logitsFor(dt, rows, v, rng), t = targetsFor(it, rows, v);
            Tensor dloss = random({dt, {rows}}, rng, -2, 2);
            if (rows > 6) dloss.setF(6, 0);  // a padding token: zeros, as 0 * (p - ...)
            AttrMap a{{"smoothing", eps}};
            auto fwd = runOpResults(OpKind::SoftmaxCrossEntropy, {x, t}, a);
            Tensor dref =
                runOpResults(OpKind::SoftmaxCrossEntropyGrad, {x, t, fwd[1], dloss}, a)[0];
            CrossEntropyShape s{dt, it, rows, v, eps};
            for (LossIsa isa : isas()) {
              setLossIsa(isa);
              Tensor loss(fwd[0].type()), lse(fwd[1].type()), dx(x.type());
              softmaxCrossEntropyForward(s, x.data(), t.data(), loss.data(), lse.data(), pool);
              softmaxCrossEntropyBackward(s, x.data(), t.data(), lse.data(), dloss.data(),
                                          dx.data(), pool);
              expectClose(loss, fwd[0], tolOf(dt), what + " loss");
              expectClose(lse, fwd[1], tolOf(dt), what + " lse");
              expectClose(dx, dref, tolOf(dt), what + " dlogits");
              expectNoNewNaN(lse, fwd[1], what + " lse");
              expectNoNewNaN(dx, dref, what + " dlogits");
            }
          }
}

TEST(LossKernels, TargetOutOfRangeGivesZeroLossAndGradient) {
  ThreadPool pool(2);
  std::mt19937_64 rng(3);
  const int64_t v = 9;
  Tensor x = random({DType::f32, {3, v}}, rng, -1, 1);
  Tensor t({DType::i64, {3}});
  t.setI(0, -1);
  t.setI(1, 4);
  t.setI(2, v);
  Tensor loss({DType::f32, {3}}), lse({DType::f32, {3}}), dx(x.type());
  Tensor dloss({DType::f32, {3}}, {1, 1, 1});
  CrossEntropyShape s{DType::f32, DType::i64, 3, v, 0.1};
  softmaxCrossEntropyForward(s, x.data(), t.data(), loss.data(), lse.data(), pool);
  softmaxCrossEntropyBackward(s, x.data(), t.data(), lse.data(), dloss.data(), dx.data(), pool);
  EXPECT_EQ(loss.getF(0), 0);
  EXPECT_GT(loss.getF(1), 0);
  EXPECT_EQ(loss.getF(2), 0);
  for (int64_t c = 0; c < v; ++c) {
    EXPECT_EQ(dx.getF(c), 0);
    EXPECT_NE(dx.getF(v + c), 0);
    EXPECT_EQ(dx.getF(2 * v + c), 0);
  }
}

// dloss 0 (a padding token masked out of the mean) gives a zero row without computing it: a
// NaN logit there stays out of dlogits; with dloss 1 it shows.
TEST(LossKernels, ZeroDlossGivesZeroRow) {
  IsaGuard guard;
  ThreadPool pool(2);
  std::mt19937_64 rng(5);
  const int64_t v = 37;
  for (LossIsa isa : isas()) {
    setLossIsa(isa);
    Tensor x = random({DType::f32, {2, v}}, rng, -1, 1);
    x.setF(3, std::numeric_limits<double>::quiet_NaN());
    x.setF(v + 3, std::numeric_limits<double>::quiet_NaN());
    Tensor t({DType::i64, {2}}, {5, 5}), lse({DType::f32, {2}}, {1, 1});
    Tensor dloss({DType::f32, {2}}, {0, 1}), dx(x.type());
    CrossEntropyShape s{DType::f32, DType::i64, 2, v, 0.1};
    softmaxCrossEntropyBackward(s, x.data(), t.data(), lse.data(), dloss.data(), dx.data(), pool);
    for (int64_t c = 0; c < v; ++c) EXPECT_EQ(dx.getF(c), 0) << c;
    EXPECT_TRUE(std::isnan(dx.getF(v + 3)));
    EXPECT_FALSE(std::isnan(dx.getF(v + 4)));
  }
}

TEST(LossKernels, LayerNormGradMatchesTheInterpreter) {
  IsaGuard guard;
  ThreadPool two(2), one(1);
  std::mt19937_64 rng(11);
  for (DType dt : {DType::f32, DType::f64})
    for (int64_t d : {1, 7, 16, 64, 129})
      for (int64_t rows : {1, 31, 33, 70}) {
        const std::string what = fmt::format("{} rows={} d={}", dtypeName(dt), rows, d);
        Tensor x = random({dt, {rows, d}}, rng, -3, 3);
        if (rows > 1)  // a constant row: xhat = 0, rstd = 1 / sqrt(eps)
          for (int64_t j = 0; j < d; ++j) x.setF(d + j, 2.5);
        Tensor gamma = random({dt, {d}}, rng, -2, 2), dy = random({dt, {rows, d}}, rng, -1, 1);
        auto ref = runOpResults(OpKind::LayerNormGrad, {x, gamma, dy}, {{"eps", 1e-5}});
        LayerNormShape s{dt, rows, d, 1e-5};
        for (LossIsa isa : isas()) {
          std::vector<Tensor> firstRun;
          for (ThreadPool* pool : {&two, &one}) {
            setLossIsa(isa);
            Tensor dx(x.type()), dg(gamma.type()), db(gamma.type());
            layerNormBackward(s, x.data(), gamma.data(), dy.data(), dx.data(), dg.data(),
                              db.data(), *pool);
            // dx's error grows with rstd (1 / sqrt(eps) on the constant row).
            expectClose(dx, ref[0], dt == DType::f32 ? 3e-4 : 1e-10, what + " dx");
            expectClose(dg, ref[1], tolOf(dt) * 10, what + " dgamma");
            expectClose(db, ref[2], tolOf(dt) * 10, what + " dbeta");
            // Deterministic: the same bits for every thread count.
            if (firstRun.empty()) firstRun = {dx, dg, db};
            else {
              EXPECT_TRUE(dx.bitwiseEqual(firstRun[0])) << what;
              EXPECT_TRUE(dg.bitwiseEqual(firstRun[1])) << what;
              EXPECT_TRUE(db.bitwiseEqual(firstRun[2])) << what;
            }
          }
        }
      }
}

}  // namespace
