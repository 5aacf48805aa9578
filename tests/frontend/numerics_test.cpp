// The layer library and the models, run on the reference interpreter in float64 and compared
// with straightforward C++ implementations of the paper's formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "ir/interpreter.h"
#include "tests/frontend/fe_test_util.h"

namespace tgc {
namespace {

using testing::compileText;

const std::string kTransformer = std::string(TGC_SOURCE_DIR) + "/models/transformer.tg";
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// A dense f64 tensor with indexing helpers for the reference code.
struct Arr {
  Shape shape;
  std::vector<double> v;
  explicit Arr(Shape s, double fill = 0) : shape(std::move(s)), v(static_cast<size_t>(numElements(shape)), fill) {}
  double& at(std::initializer_list<int64_t> idx) {
    int64_t off = 0, k = 0;
    for (int64_t i : idx) off = off * shape[static_cast<size_t>(k++)] + i;
    return v[static_cast<size_t>(off)];
  }
  Tensor tensor() const { return Tensor(TensorType{DType::f64, shape}, v); }
  static Arr of(const Tensor& t) {
    Arr a(t.shape());
    a.v = t.toDoubles();
    return a;
  }
};

Arr randomArr(Shape s, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-scale, scale);
  Arr a(std::move(s));
  for (double& x : a.v) x = d(rng);
  return a;
}

Tensor boolTensor(Shape s, const std::vector<int>& v) {
  Tensor t(TensorType{DType::boolean, std::move(s)});
  for (size_t i = 0; i < v.size(); ++i) t.setF(static_cast<int64_t>(i), v[i]);
  return t;
}

Tensor ids(Shape s, const std::vector<int64_t>& v) {
  Tensor t(TensorType{DType::i64, std::move(s)});
  for (size_t i = 0; i < v.size(); ++i) t.setI(static_cast<int64_t>(i), v[i]);
  return t;
}

std::vector<Tensor> run(const CompiledModel& m, std::map<std::string, Tensor> inputs, uint64_t seed = 1) {
  for (auto& [name, t] : initParams(m.params, seed)) inputs.emplace(name, std::move(t));
  return Interpreter().run(*m.graph, inputs);
}

void expectNear(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << "element " << i;
}

// softmax(q k^T / sqrt(d)) v over keys with mask true; a row with no allowed key gives zeros.
Arr referenceAttention(Arr& q, Arr& k, Arr& v, const std::function<bool(int64_t, int64_t, int64_t)>& allowed) {
  int64_t B = q.shape[0], Tq = q.shape[1], D = q.shape[2], Tk = k.shape[1], Dv = v.shape[2];
  Arr out({B, Tq, Dv});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Tq; ++i) {
      std::vector<double> s(static_cast<size_t>(Tk), kNegInf);
      double mx = kNegInf;
      for (int64_t j = 0; j < Tk; ++j) {
        if (!allowed(b, i, j)) continue;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += q.at({b, i, d}) * k.at({b, j, d});
        s[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(D));
        mx = std::max(mx, s[static_cast<size_t>(j)]);
      }
      if (mx == kNegInf) continue;  // fully masked: zeros
      double sum = 0;
      for (double& x : s) sum += x = std::exp(x - mx);
      for (int64_t j = 0; j < Tk; ++j)
        for (int64_t d = 0; d < Dv; ++d) out.at({b, i, d}) += s[static_cast<size_t>(j)] / sum * v.at({b, j, d});
    }
  return out;
}

TEST(NumericsTest, ScaledDotProductAttentionWithAMask) {
  auto m = compileText(R"(
import "nn.tg"
graph g(q: f64[2, 3, 4], k: f64[2, 5, 4], v: f64[2, 5, 6], mask: bool[2, 1, 5]) {
  output y = attention(q, k, v, mask)
}
)");
  Arr q = randomArr({2, 3, 4}, 1), k = randomArr({2, 5, 4}, 2), v = randomArr({2, 5, 6}, 3);
  // Batch 0 sees keys 0, 1, 3; batch 1 sees none (every row fully masked).
  std::vector<int> mask = {1, 1, 0, 1, 0, 0, 0, 0, 0, 0};
  auto out = run(m, {{"q", q.tensor()}, {"k", k.tensor()}, {"v", v.tensor()},
                     {"mask", boolTensor({2, 1, 5}, mask)}});
  Arr want = referenceAttention(q, k, v, [&](int64_t b, int64_t, int64_t j) { return mask[static_cast<size_t>(b * 5 + j)] != 0; });
  expectNear(out[0].toDoubles(), want.v, 1e-12);
  for (int64_t i = 18; i < 36; ++i) EXPECT_EQ(out[0].getF(i), 0.0);  // zeros, not NaN
}

TEST(NumericsTest, MultiHeadAttentionHasDistinctPerHeadWeights) {
  auto m = compileText(R"(
import "nn.tg"
let mha = MultiHeadAttention(8, 2, true, 0.0, f64)
graph g(x: f64[2, 3, 8], mem: f64[2, 4, 8], mask: bool[2, 1, 1, 4]) {
  output y = mha(x, mem, mem, mask)
}
)");
  Arr x = randomArr({2, 3, 8}, 4), mem = randomArr({2, 4, 8}, 5);
  std::vector<int> mask = {1, 1, 1, 0, 1, 0, 1, 1};
  std::map<std::string, Tensor> params = initParams(m.params, 9);
  // Make the biases non-zero so that they are checked too.
  for (auto& [name, t] : params)
    if (name.ends_with(".bias"))
      for (int64_t i = 0; i < t.numel(); ++i) t.setF(i, 0.01 * static_cast<double>(i + 1));
  std::map<std::string, Tensor> inputs = params;
  inputs.emplace("x", x.tensor());
  inputs.emplace("mem", mem.tensor());
  inputs.emplace("mask", boolTensor({2, 1, 1, 4}, mask));
  auto out = Interpreter().run(*m.graph, inputs);

  auto linear = [&](Arr& in, const std::string& p) {
    Arr w = Arr::of(params.at("mha." + p + ".weight")), b = Arr::of(params.at("mha." + p + ".bias"));
    Arr r({in.shape[0], in.shape[1], 8});
    for (int64_t i = 0; i < in.shape[0]; ++i)
      for (int64_t t = 0; t < in.shape[1]; ++t)
        for (int64_t o = 0; o < 8; ++o) {
          double s = b.at({o});
          for (int64_t c = 0; c < 8; ++c) s += in.at({i, t, c}) * w.at({c, o});
          r.at({i, t, o}) = s;
        }
    return r;
  };
  Arr Q = linear(x, "w_q"), K = linear(mem, "w_k"), V = linear(mem, "w_v");
  // Head h uses columns 4h..4h+3 of each projection.
  Arr merged({2, 3, 8});
  for (int64_t h = 0; h < 2; ++h) {
    auto slice = [&](Arr& a) {
      Arr r({a.shape[0], a.shape[1], 4});
      for (int64_t i = 0; i < a.shape[0]; ++i)
        for (int64_t t = 0; t < a.shape[1]; ++t)
          for (int64_t d = 0; d < 4; ++d) r.at({i, t, d}) = a.at({i, t, 4 * h + d});
      return r;
    };
    Arr qh = slice(Q), kh = slice(K), vh = slice(V);
    Arr oh = referenceAttention(qh, kh, vh, [&](int64_t b, int64_t, int64_t j) { return mask[static_cast<size_t>(b * 4 + j)] != 0; });
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t t = 0; t < 3; ++t)
        for (int64_t d = 0; d < 4; ++d) merged.at({i, t, 4 * h + d}) = oh.at({i, t, d});
  }
  Arr want = linear(merged, "w_o");
  expectNear(out[0].toDoubles(), want.v, 1e-12);
}

TEST(NumericsTest, FeedForwardReluAndGelu) {
  for (const char* act : {"relu", "gelu"}) {
    SCOPED_TRACE(act);
    auto m = compileText(std::string(R"(
import "nn.tg"
let ffn = FeedForward(3, 5, ")") + act + R"(", 0.0, f64)
graph g(x: f64[2, 3]) { output y = ffn(x) }
)");
    Arr x = randomArr({2, 3}, 6, 2.0);
    auto params = initParams(m.params, 3);
    std::map<std::string, Tensor> in = params;
    in.emplace("x", x.tensor());
    auto out = Interpreter().run(*m.graph, in);
    Arr w1 = Arr::of(params.at("ffn.linear1.weight")), b1 = Arr::of(params.at("ffn.linear1.bias"));
    Arr w2 = Arr::of(params.at("ffn.linear2.weight")), b2 = Arr::of(params.at("ffn.linear2.bias"));
    Arr want({2, 3});
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t o = 0; o < 3; ++o) want.at({i, o}) = b2.at({o});
      for (int64_t h = 0; h < 5; ++h) {
        double s = b1.at({h});
        for (int64_t c = 0; c < 3; ++c) s += x.at({i, c}) * w1.at({c, h});
        s = std::string(act) == "relu" ? std::max(s, 0.0) : 0.5 * s * (1.0 + std::erf(s / std::sqrt(2.0)));
        for (int64_t o = 0; o < 3; ++o) want.at({i, o}) += s * w2.at({h, o});
      }
    }
    expectNear(out[0].toDoubles(), want.v, 1e-12);
  }
}

TEST(NumericsTest, SinusoidalPositionalEncoding) {
  auto m = compileText(R"(
import "nn.tg"
graph g(x: f64[1, 6, 8]) { output y = positional_encoding(x) }
)");
  auto out = run(m, {{"x", Arr({1, 6, 8}).tensor()}});
  for (int64_t pos = 0; pos < 6; ++pos)
    for (int64_t i = 0; i < 4; ++i) {
      double angle = static_cast<double>(pos) / std::pow(10000.0, 2.0 * static_cast<double>(i) / 8.0);
      EXPECT_NEAR(out[0].getF(pos * 8 + 2 * i), std::sin(angle), 1e-15) << pos << " " << i;
      EXPECT_NEAR(out[0].getF(pos * 8 + 2 * i + 1), std::cos(angle), 1e-15) << pos << " " << i;
    }
  EXPECT_EQ(out[0].getF(1), 1.0);                   // cos(0)
  EXPECT_NEAR(out[0].getF(8), std::sin(1.0), 1e-15);  // position 1, dimension 0
}

TEST(NumericsTest, LayerNormNormalizesTheLastAxis) {
  auto m = compileText(R"(
import "nn.tg"
let norm = LayerNorm(6, dtype=f64)
graph g(x: f64[3, 6]) { output y = norm(x) }
)");
  Arr x = randomArr({3, 6}, 8, 5.0);
  auto out = run(m, {{"x", x.tensor()}});
  for (int64_t r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < 6; ++c) mean += x.at({r, c}) / 6;
    for (int64_t c = 0; c < 6; ++c) var += (x.at({r, c}) - mean) * (x.at({r, c}) - mean) / 6;
    for (int64_t c = 0; c < 6; ++c)
      EXPECT_NEAR(out[0].getF(r * 6 + c), (x.at({r, c}) - mean) / std::sqrt(var + 1e-5), 1e-12);
  }
}

TEST(NumericsTest, LabelSmoothedCrossEntropyIgnoresPadding) {
  auto m = compileText(R"(
import "nn.tg"
graph g(logits: f64[1, 3, 5], targets: i64[1, 3]) {
  output loss = label_smoothed_cross_entropy(logits, targets, 0.1, 0)
  output plain = cross_entropy(logits, targets, 0)
}
)");
  Arr logits = randomArr({1, 3, 5}, 10, 3.0);
  std::vector<int64_t> tg = {1, 0, 4};  // the middle target is padding
  auto out = run(m, {{"logits", logits.tensor()}, {"targets", ids({1, 3}, tg)}});
  double smoothed = 0, plain = 0;
  for (int64_t t : {0, 2}) {
    double mx = kNegInf, sum = 0;
    for (int64_t c = 0; c < 5; ++c) mx = std::max(mx, logits.at({0, t, c}));
    for (int64_t c = 0; c < 5; ++c) sum += std::exp(logits.at({0, t, c}) - mx);
    auto logp = [&](int64_t c) { return logits.at({0, t, c}) - mx - std::log(sum); };
    double all = 0;
    for (int64_t c = 0; c < 5; ++c) all += logp(c);
    smoothed += -(0.9 * logp(tg[static_cast<size_t>(t)]) + 0.1 / 5 * all);
    plain += -logp(tg[static_cast<size_t>(t)]);
  }
  EXPECT_NEAR(out[0].getF(0), smoothed / 2, 1e-12);
  EXPECT_NEAR(out[1].getF(0), plain / 2, 1e-12);
}

TEST(NumericsTest, DropoutMasksAreDeterministicPerSeedAndStepAndDistinctPerSite) {
  auto m = compileText(R"(
graph train(x: f64[100, 100]) training {
  let a = dropout(x, 0.3)
  let b = dropout(x, 0.3)
  output loss = reduce_sum(a, axes=[0, 1])
  output a = a
  output b = b
}
)");
  auto at = [&](int64_t seed, int64_t step) {
    Tensor s(TensorType{DType::i64, {}}), k(TensorType{DType::i64, {}});
    s.setI(0, seed);
    k.setI(0, step);
    return run(m, {{"x", Arr({100, 100}, 1.0).tensor()}, {"seed", s}, {"step", k}});
  };
  auto r1 = at(7, 3), r2 = at(7, 3), r3 = at(7, 4), r4 = at(8, 3);
  EXPECT_TRUE(r1[1].bitwiseEqual(r2[1]));
  EXPECT_FALSE(r1[1].bitwiseEqual(r3[1]));  // next step: a new mask
  EXPECT_FALSE(r1[1].bitwiseEqual(r4[1]));  // other seed: a new mask
  EXPECT_FALSE(r1[1].bitwiseEqual(r1[2]));  // two sites: two masks
  int64_t zeros = 0;
  for (int64_t i = 0; i < 10000; ++i) {
    double v = r1[1].getF(i);
    if (v == 0) ++zeros;
    else EXPECT_NEAR(v, 1.0 / 0.7, 1e-12);
  }
  EXPECT_NEAR(static_cast<double>(zeros) / 10000.0, 0.3, 0.02);
}

// The tiny Transformer in f64 without dropout, with small vocabularies.
ModelOptions tinyF64(const char* graph, int64_t S, int64_t T) {
  return {.graph = graph, .preset = "tiny",
          .sets = {{"dtype", "f64"}, {"p_drop", "0"}, {"src_vocab", "23"}, {"tgt_vocab", "29"}},
          .dims = {{"B", 1}, {"S", S}, {"T", T}}};
}

TEST(NumericsTest, DecoderIsCausal) {
  auto m = compileModelFile(kTransformer, tinyF64("train", 4, 5));
  Tensor zero(TensorType{DType::i64, {}});
  auto logitsFor = [&](std::vector<int64_t> tgt) {
    return run(m, {{"src", ids({1, 4}, {3, 4, 5, 0})}, {"tgt_in", ids({1, 5}, tgt)},
                   {"tgt_out", ids({1, 5}, {1, 2, 3, 4, 5})}, {"seed", zero}, {"step", zero}},
               11)[1];
  };
  Tensor a = logitsFor({1, 6, 7, 8, 9}), b = logitsFor({1, 6, 7, 20, 21});
  // Positions 0..2 cannot see tokens 3 and 4; positions 3 and 4 can.
  for (int64_t i = 0; i < 3 * 29; ++i) ASSERT_EQ(a.getF(i), b.getF(i)) << i;
  double diff = 0;
  for (int64_t i = 3 * 29; i < 5 * 29; ++i) diff += std::abs(a.getF(i) - b.getF(i));
  EXPECT_GT(diff, 1e-6);
}

TEST(NumericsTest, SourcePaddingDoesNotChangeTheResult) {
  // The same sentence with one or three padding tokens: the encoder output at real positions
  // and the decoder's next-token distribution are the same.
  auto enc4 = compileModelFile(kTransformer, tinyF64("encode", 4, 2));
  auto enc6 = compileModelFile(kTransformer, tinyF64("encode", 6, 2));
  Tensor src4 = ids({1, 4}, {5, 7, 9, 0}), src6 = ids({1, 6}, {5, 7, 9, 0, 0, 0});
  Tensor mem4 = run(enc4, {{"src", src4}}, 5)[0], mem6 = run(enc6, {{"src", src6}}, 5)[0];
  for (int64_t i = 0; i < 3 * 64; ++i) ASSERT_NEAR(mem4.getF(i), mem6.getF(i), 1e-12) << i;

  auto dec4 = compileModelFile(kTransformer, tinyF64("decode_step", 4, 2));
  auto dec6 = compileModelFile(kTransformer, tinyF64("decode_step", 6, 2));
  Tensor tgt = ids({1, 2}, {1, 8});
  Tensor lp4 = run(dec4, {{"src", src4}, {"memory", mem4}, {"tgt", tgt}}, 5)[0];
  Tensor lp6 = run(dec6, {{"src", src6}, {"memory", mem6}, {"tgt", tgt}}, 5)[0];
  double total = 0;
  for (int64_t i = 0; i < 29; ++i) {
    ASSERT_NEAR(lp4.getF(i), lp6.getF(i), 1e-12) << i;
    total += std::exp(lp4.getF(i));
  }
  EXPECT_NEAR(total, 1.0, 1e-12);  // log-probabilities
}

TEST(NumericsTest, TrainLossIsFiniteAndNearLogVocabAtInitialization) {
  auto m = compileModelFile(kTransformer, tinyF64("train", 4, 5));
  Tensor zero(TensorType{DType::i64, {}});
  auto out = run(m, {{"src", ids({1, 4}, {3, 4, 5, 0})}, {"tgt_in", ids({1, 5}, {1, 6, 7, 0, 0})},
                     {"tgt_out", ids({1, 5}, {6, 7, 2, 0, 0})}, {"seed", zero}, {"step", zero}});
  double loss = out[0].getF(0);
  EXPECT_TRUE(std::isfinite(loss));
  // Untrained logits are small compared to log(29): the loss is within a factor of log V.
  EXPECT_GT(loss, 0.5 * std::log(29.0));
  EXPECT_LT(loss, 3.0 * std::log(29.0));
}

}  // namespace
}  // namespace tgc
