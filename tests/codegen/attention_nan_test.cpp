// The CPU attention kernels (codegen/attention_cpu.h) propagate a NaN like the unfused
// softmax and the reference (ir/interp_attention.cpp): a NaN score makes its query row's out
// and lse NaN, never a fully masked row of zeros, and the backward carries it into the
// gradients; rows and heads the NaN cannot reach are bit-for-bit those of the clean run.
// Two heads, 70 queries and keys (two key blocks), f32 and f64, AVX2 and portable loops.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "codegen/attention_cpu.h"
#include "support/thread_pool.h"

namespace tgc {
namespace {

using codegen::AttentionIsa;

constexpr int64_t kHeads = 2, kL = 70, kD = 16;
constexpr int64_t kNanKey = 66;  // in the second key block
constexpr int64_t kNanQuery = 5;
constexpr int64_t kNanCol = 3;

enum class Where { Q, K, V };

template <class T>
struct Results {
  std::vector<T> out, lse, dq, dk, dv;
};

template <class T>
struct Inputs {
  std::vector<T> q, k, v, dout;
};

template <class T>
Inputs<T> randomInputs() {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  auto fill = [&](int64_t n) {
    std::vector<T> x(static_cast<size_t>(n));
    for (T& e : x) e = static_cast<T>(u(rng));
    return x;
  };
  const int64_t n = kHeads * kL * kD;
  return {fill(n), fill(n), fill(n), fill(n)};
}

template <class T>
Results<T> run(const Inputs<T>& in, bool causal, ThreadPool& pool) {
  codegen::AttentionParams p;
  p.dtype = std::is_same_v<T, float> ? DType::f32 : DType::f64;
  p.batch = kHeads;
  p.tq = p.tk = kL;
  p.d = p.dv = kD;
  p.scale = 0.25;
  p.causal = causal;
  Results<T> r;
  r.out.resize(in.q.size());
  r.lse.resize(static_cast<size_t>(kHeads * kL));
  r.dq.resize(in.q.size());
  r.dk.resize(in.k.size());
  r.dv.resize(in.v.size());
  codegen::attentionForward(p, in.q.data(), in.k.data(), in.v.data(), nullptr, r.out.data(),
                            r.lse.data(), pool);
  codegen::attentionBackward(p, in.q.data(), in.k.data(), in.v.data(), r.out.data(),
                             r.lse.data(), in.dout.data(), nullptr, r.dq.data(), r.dk.data(),
                             r.dv.data(), pool);
  return r;
}

// Row `row` (of `width` elements) of x is NaN when nan (only in column onlyCol if >= 0),
// else equal to clean's.
template <class T>
void expectRow(const std::vector<T>& x, const std::vector<T>& clean, int64_t row, int64_t width,
               bool nan, const std::string& what, int64_t onlyCol = -1) {
  for (int64_t c = 0; c < width; ++c) {
    const auto e = static_cast<size_t>(row * width + c);
    if (nan && (onlyCol < 0 || c == onlyCol))
      ASSERT_TRUE(std::isnan(x[e])) << what << " row " << row << " col " << c << ": " << x[e];
    else
      ASSERT_EQ(x[e], clean[e]) << what << " row " << row << " col " << c;
  }
}

class AttentionNaN : public ::testing::TestWithParam<AttentionIsa> {
 protected:
  void SetUp() override {
    if (GetParam() == AttentionIsa::Avx2 && !codegen::attentionHasAvx2())
      GTEST_SKIP() << "no AVX2+FMA on this CPU";
    saved_ = codegen::attentionIsa();
    codegen::setAttentionIsa(GetParam());
  }
  void TearDown() override { codegen::setAttentionIsa(saved_); }

  // A NaN in one element of q (query kNanQuery), k or v (key kNanKey) of head 0. Asserted:
  // what the reference makes NaN is NaN, and what the kernel's blocks never combine with the
  // NaN equals the clean run. In between (a causal block's masked part, where the kernel
  // multiplies a 0 probability by a NaN) the result is not specified.
  template <class T>
  void check(Where where, bool causal) {
    SCOPED_TRACE(std::string(std::is_same_v<T, float> ? "f32 " : "f64 ") +
                 (where == Where::Q ? "q" : where == Where::K ? "k" : "v") +
                 (causal ? " causal" : ""));
    const Inputs<T> clean = randomInputs<T>();
    Inputs<T> bad = clean;
    const T nan = std::numeric_limits<T>::quiet_NaN();
    if (where == Where::Q) bad.q[kNanQuery * kD + kNanCol] = nan;
    if (where == Where::K) bad.k[kNanKey * kD + kNanCol] = nan;
    if (where == Where::V) bad.v[kNanKey * kD + kNanCol] = nan;
    const Results<T> want = run(clean, causal, pool_), got = run(bad, causal, pool_);
    auto sees = [&](int64_t i, int64_t j) { return !causal || j <= i; };
    auto sameBlock = [](int64_t i, int64_t j) { return i / 64 == j / 64; };
    // Query rows of head 0 whose out is NaN: the NaN query, or every row that sees the key.
    auto nanRow = [&](int64_t i) { return where == Where::Q ? i == kNanQuery : sees(i, kNanKey); };
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t i = 0; i < kL; ++i) {
        const int64_t row = h * kL + i;
        const bool reached = h == 0 && nanRow(i);
        // out[i, c] = sum_j p[i, j] v[j, c]: a NaN in v reaches its own column only.
        expectRow(got.out, want.out, row, kD, reached, "out", where == Where::V ? kNanCol : -1);
        expectRow(got.lse, want.lse, row, 1, reached && where != Where::V, "lse");
        // dq[i] = scale * sum_j ds[i, j] k[j], NaN in ds[i, :] for a NaN row; a masked
        // ds = 0 times the NaN key is left open.
        if (h == 0 && !reached && where == Where::K && sameBlock(i, kNanKey)) continue;
        expectRow(got.dq, want.dq, row, kD, reached, "dq");
      }
    // dk[j] and dv[j] sum p[i, j] (dv) and ds[i, j] (dk) over the rows i: NaN when a NaN
    // row sees j, except dv for a NaN in v (p does not depend on v).
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t j = 0; j < kL; ++j) {
        bool mustNan = false, touched = false;
        for (int64_t i = 0; h == 0 && i < kL; ++i)
          if (nanRow(i)) {
            mustNan |= sees(i, j);
            touched |= sees(i, j) || sameBlock(i, j) || !causal;
          }
        if (touched && !mustNan) continue;
        expectRow(got.dk, want.dk, h * kL + j, kD, mustNan, "dk");
        expectRow(got.dv, want.dv, h * kL + j, kD, mustNan && where != Where::V, "dv");
      }
  }

  ThreadPool pool_{2};
  AttentionIsa saved_ = AttentionIsa::Portable;
};

TEST_P(AttentionNaN, InQueryReachesOnlyItsRow) {
  check<float>(Where::Q, false);
  check<double>(Where::Q, false);
  check<float>(Where::Q, true);
}

TEST_P(AttentionNaN, InKeyReachesTheRowsThatSeeIt) {
  check<float>(Where::K, false);
  check<double>(Where::K, false);
  check<float>(Where::K, true);  // causal: only queries >= the key
  check<double>(Where::K, true);
}

TEST_P(AttentionNaN, InValueReachesOutButNotLse) {
  check<float>(Where::V, false);
  check<double>(Where::V, false);
}

INSTANTIATE_TEST_SUITE_P(Isa, AttentionNaN,
                         ::testing::Values(AttentionIsa::Avx2, AttentionIsa::Portable),
                         [](const auto& p) {
                           return p.param == AttentionIsa::Avx2 ? "Avx2" : "Portable";
                         });

}  // namespace
}  // namespace tgc
