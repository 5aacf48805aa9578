// Generation with a decoder-only language model (models/gpt.tg, runtime/train/generator.h)
// on random parameters: the cached graphs (generate_prefill, generate_step) give the
// log-probabilities of the uncached next_token at every position; the generator is
// deterministic in its seed, greedy is temperature 0 is top-k 1, and a prompt that does not
// fit in the context is refused; `tgc generate` on a checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "frontend/frontend.h"
#include "runtime/data/rng.h"
#include "runtime/data/vocab.h"
#include "runtime/executable.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/generator.h"
#include "tests/tools/tool_test_util.h"
#include "tests/train/trainer_test_util.h"

using namespace tgc;
using namespace tgc::train;

namespace {

constexpr int64_t kVocab = 40;

ModelSpec lmModel(int64_t maxLen = 64) {
  ModelSpec m;
  m.path = std::string(TGC_SOURCE_DIR) + "/models/gpt.tg";
  m.preset = "tiny";
  m.sets = {{"vocab", std::to_string(kVocab)}, {"max_len", std::to_string(maxLen)}};
  return m;
}

// The model's parameters, initialized and then moved off their initial values (biases,
// LayerNorm gains and shifts are not zeros and ones), so every parameter matters.
std::map<std::string, Tensor> randomParams(const ModelSpec& m, uint64_t seed) {
  const CompiledModel c = compileModelFile(m.path, m.options("next_token", {{"B", 1}, {"T", 1}}));
  std::map<std::string, Tensor> params = initParams(c.params, seed);
  data::Rng rng(seed * 7 + 1);
  for (auto& [name, t] : params)
    for (int64_t i = 0; i < t.numel(); ++i) t.setF(i, t.getF(i) + 0.2 * (rng.uniform() - 0.5));
  return params;
}

runtime::ExecOptions execOptions() { return traintest::trainExecOptions(); }

std::unique_ptr<runtime::Executable> compileGraph(const ModelSpec& m, const std::string& graph,
                                                  int64_t B, int64_t T) {
  CompiledModel c = compileModelFile(m.path, m.options(graph, {{"B", B}, {"T", T}}));
  return runtime::Executable::compile(*c.graph, execOptions());
}

std::map<std::string, Tensor> with(const std::map<std::string, Tensor>& params,
                                   std::map<std::string, Tensor> data) {
  for (const auto& [k, v] : params) data.emplace(k, v);
  return data;
}

Tensor ids(int64_t B, int64_t T, const std::vector<int64_t>& values) {
  Tensor t(TensorType{DType::i64, {B, T}});
  for (int64_t i = 0; i < B * T; ++i) t.as<int64_t>()[i] = values[static_cast<size_t>(i)];
  return t;
}

double maxDiff(const Tensor& a, int64_t rowA, const Tensor& b, int64_t rowB) {
  const int64_t V = a.shape()[1];
  EXPECT_EQ(V, b.shape()[1]);
  double d = 0;
  for (int64_t v = 0; v < V; ++v)
    d = std::max(d, std::abs(a.getF(rowA * V + v) - b.getF(rowB * V + v)));
  return d;
}

constexpr double kTol = 2e-4;

// The proof that caching changes nothing: for every position t of three random sequences,
// the log-probabilities after tokens 0..t from next_token (the whole prefix, uncached)
// equal those of generate_step fed one token at a time, of generate_prefill over prompts of
// different lengths followed by steps at per-row positions, and of next_token_at.
TEST(GenerateGraphs, CachedLogProbsEqualNextTokenAtEveryPosition) {
  const ModelSpec m = lmModel();
  const auto params = randomParams(m, 11);
  constexpr int64_t B = 3, N = 10, T = 16;
  std::vector<int64_t> seq(B * N);
  data::Rng rng(5);
  for (auto& v : seq) v = 4 + static_cast<int64_t>(rng.below(kVocab - 4));  // no pad, bos, eos
  const auto prefix = [&](int64_t len) {
    std::vector<int64_t> v;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < len; ++t) v.push_back(seq[static_cast<size_t>(b * N + t)]);
    return ids(B, len, v);
  };
  // reference[t]: [B, V] after tokens 0..t.
  std::vector<Tensor> reference;
  for (int64_t t = 0; t < N; ++t)
    reference.push_back(compileGraph(m, "next_token", B, t + 1)->run(with(params, {{"tokens", prefix(t + 1)}}))[0]);
  const int64_t V = reference[0].shape()[1];
  ASSERT_EQ(V, kVocab);

  // generate_step alone, from empty caches: every row at the same position. The caches are
  // [n_layers, B, heads, T, d_k]; the step returns the new position's keys and values and the
  // caller writes them in.
  auto step = compileGraph(m, "generate_step", B, T);
  const CompiledModel sig = compileModelFile(m.path, m.options("generate_step", {{"B", B}, {"T", T}}));
  const TensorType cacheType = sig.graph->inputs()[2]->result()->type();
  constexpr int64_t L = 2, H = 4, Dk = 16;
  ASSERT_EQ(cacheType.shape, (Shape{L, B, H, T, Dk}));
  const auto runStep = [&](Tensor& ck, Tensor& cv, const std::vector<int64_t>& position) {
    Tensor tok(TensorType{DType::i64, {B, 1}}), pos(TensorType{DType::i64, {B}});
    for (int64_t b = 0; b < B; ++b) {
      tok.as<int64_t>()[b] = seq[static_cast<size_t>(b * N + position[static_cast<size_t>(b)])];
      pos.as<int64_t>()[b] = position[static_cast<size_t>(b)];
    }
    auto out = step->run(with(params, {{"tok", tok}, {"pos", pos}, {"cache_k", ck}, {"cache_v", cv}}));
    EXPECT_EQ(out[1].shape(), (Shape{L, B, H, 1, Dk}));
    for (int64_t r = 0; r < L * B * H; ++r) {
      const int64_t b = (r / H) % B;
      for (int64_t d = 0; d < Dk; ++d) {
        ck.as<float>()[(r * T + position[static_cast<size_t>(b)]) * Dk + d] = out[1].as<float>()[r * Dk + d];
        cv.as<float>()[(r * T + position[static_cast<size_t>(b)]) * Dk + d] = out[2].as<float>()[r * Dk + d];
      }
    }
    return out[0];
  };
  Tensor ck(cacheType), cv(cacheType);
  for (int64_t t = 0; t < N; ++t) {
    const Tensor lp = runStep(ck, cv, std::vector<int64_t>(B, t));
    for (int64_t b = 0; b < B; ++b)
      EXPECT_LT(maxDiff(lp, b, reference[static_cast<size_t>(t)], b), kTol) << "step, position " << t << " row " << b;
  }
  const Tensor stepK = ck;

  // generate_prefill over prompts of lengths 1, 4 and 7 (padded with pad to 8), then steps at
  // each row's own position up to N - 1.
  const std::vector<int64_t> lens{1, 4, 7};
  constexpr int64_t Tp = 8;
  std::vector<int64_t> padded(B * Tp, 0);
  Tensor rows(TensorType{DType::i64, {B}});
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < lens[static_cast<size_t>(b)]; ++t) padded[static_cast<size_t>(b * Tp + t)] = seq[static_cast<size_t>(b * N + t)];
    rows.as<int64_t>()[b] = b * Tp + lens[static_cast<size_t>(b)] - 1;
  }
  auto pre = compileGraph(m, "generate_prefill", B, Tp)->run(with(params, {{"tokens", ids(B, Tp, padded)}, {"rows", rows}}));
  ASSERT_EQ(pre[1].shape(), (Shape{L, B, H, Tp, Dk}));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t last = lens[static_cast<size_t>(b)] - 1;
    EXPECT_LT(maxDiff(pre[0], b, reference[static_cast<size_t>(last)], b), kTol) << "prefill row " << b;
    // Its keys at the prompt's positions are the step-by-step ones.
    for (int64_t l = 0; l < L; ++l)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t <= last; ++t)
          for (int64_t d = 0; d < Dk; ++d)
            ASSERT_NEAR(pre[1].getF((((l * B + b) * H + h) * Tp + t) * Dk + d),
                        stepK.getF((((l * B + b) * H + h) * T + t) * Dk + d), 1e-4)
                << "layer " << l << " row " << b << " head " << h << " position " << t;
  }
  // Into caches of T positions; then each row continues from its own position.
  Tensor k2(cacheType), v2(cacheType);
  for (int64_t r = 0; r < L * B * H; ++r)
    for (int64_t i = 0; i < Tp * Dk; ++i) {
      k2.as<float>()[r * T * Dk + i] = pre[1].as<float>()[r * Tp * Dk + i];
      v2.as<float>()[r * T * Dk + i] = pre[2].as<float>()[r * Tp * Dk + i];
    }
  for (int64_t s = 0;; ++s) {
    std::vector<int64_t> position(B);
    bool any = false;
    for (int64_t b = 0; b < B; ++b) {
      position[static_cast<size_t>(b)] = std::min(lens[static_cast<size_t>(b)] + s, N - 1);
      any = any || lens[static_cast<size_t>(b)] + s < N;
    }
    if (!any) break;
    const Tensor lp = runStep(k2, v2, position);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t p = position[static_cast<size_t>(b)];
      EXPECT_LT(maxDiff(lp, b, reference[static_cast<size_t>(p)], b), kTol) << "after prefill, row " << b << " position " << p;
    }
  }

  // next_token_at: every prefix length in one shape.
  auto at = compileGraph(m, "next_token_at", B, T);
  std::vector<int64_t> full(B * T, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < N; ++t) full[static_cast<size_t>(b * T + t)] = seq[static_cast<size_t>(b * N + t)];
  for (int64_t t = 0; t < N; ++t) {
    std::vector<int64_t> cut = full;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t u = t + 1; u < T; ++u) cut[static_cast<size_t>(b * T + u)] = 0;
    Tensor r(TensorType{DType::i64, {B}});
    for (int64_t b = 0; b < B; ++b) r.as<int64_t>()[b] = b * T + t;
    auto out = at->run(with(params, {{"tokens", ids(B, T, cut)}, {"rows", r}}));
    for (int64_t b = 0; b < B; ++b)
      EXPECT_LT(maxDiff(out[0], b, reference[static_cast<size_t>(t)], b), kTol) << "next_token_at, position " << t;
  }
}

std::vector<std::vector<int64_t>> somePrompts() {
  return {{1, 5, 6, 7}, {1}, {1, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 20}, {1, 30, 31}};
}

// Greedy decoding by hand with the uncached graph: the most likely token (never pad or bos),
// one compile per prefix length.
std::vector<int64_t> referenceGreedy(const ModelSpec& m, const std::map<std::string, Tensor>& params,
                                     std::vector<int64_t> prefix, int64_t maxNew) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < maxNew; ++i) {
    const int64_t T = static_cast<int64_t>(prefix.size());
    const Tensor lp = compileGraph(m, "next_token", 1, T)->run(with(params, {{"tokens", ids(1, T, prefix)}}))[0];
    int64_t best = 2;
    for (int64_t v = 2; v < lp.shape()[1]; ++v)
      if (lp.getF(v) > lp.getF(best)) best = v;
    if (best == data::Vocab::kEos) break;
    out.push_back(best);
    prefix.push_back(best);
  }
  return out;
}

TEST(LmGenerator, GreedyIsTemperatureZeroIsTopKOneAndMatchesTheUncachedGraph) {
  const ModelSpec m = lmModel();
  const auto params = randomParams(m, 3);
  LmGenerator g(m, params, execOptions());
  EXPECT_EQ(g.contextLength(), 64);
  EXPECT_EQ(g.vocabSize(), kVocab);
  SampleOptions greedy;
  greedy.temperature = 0;
  greedy.maxNew = 12;
  const auto prompts = somePrompts();
  const auto out = g.generate(prompts, greedy);
  ASSERT_EQ(out.size(), prompts.size());
  EXPECT_EQ(g.compiledShapes(), 2);  // one prefill and one step shape for the whole batch
  EXPECT_EQ(out[0], referenceGreedy(m, params, prompts[0], 12));
  EXPECT_EQ(out[3], referenceGreedy(m, params, prompts[3], 12));

  SampleOptions topK1;
  topK1.maxNew = 12;
  topK1.topK = 1;
  topK1.seed = 99;
  EXPECT_EQ(g.generate(prompts, topK1), out);
  SampleOptions tinyP = topK1;
  tinyP.topK = 0;
  tinyP.topP = 1e-9;
  EXPECT_EQ(g.generate(prompts, tinyP), out);
  SampleOptions uncached = greedy;
  uncached.kvCache = false;
  EXPECT_EQ(g.generate(prompts, uncached), out);
  SampleOptions oneByOne = greedy;
  oneByOne.batchSize = 1;
  EXPECT_EQ(g.generate(prompts, oneByOne), out);
}

TEST(LmGenerator, SamplingIsDeterministicInTheSeed) {
  const ModelSpec m = lmModel();
  LmGenerator g(m, randomParams(m, 4), execOptions());
  SampleOptions o;
  o.maxNew = 20;
  o.stopAtEos = false;
  o.seed = 7;
  const auto prompts = somePrompts();
  const auto a = g.generate(prompts, o);
  for (const auto& s : a) EXPECT_EQ(s.size(), 20u);
  EXPECT_EQ(g.generate(prompts, o), a);
  // Whatever the batch size and with or without the cache.
  SampleOptions other = o;
  other.batchSize = 1;
  EXPECT_EQ(g.generate(prompts, other), a);
  other = o;
  other.kvCache = false;
  EXPECT_EQ(g.generate(prompts, other), a);
  // Another seed, other text.
  other = o;
  other.seed = 8;
  const auto b = g.generate(prompts, other);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NE(a[i], b[i]) << "prompt " << i;
  // Identical prompts in one call are different samples (each its own stream).
  const auto twice = g.generate({prompts[0], prompts[0]}, o);
  EXPECT_NE(twice[0], twice[1]);
  EXPECT_EQ(twice[0], a[0]);
  // Never pad or bos.
  for (const auto& s : a)
    for (int64_t id : s) {
      EXPECT_GT(id, data::Vocab::kBos);
      EXPECT_LT(id, kVocab);
    }
}

TEST(LmGenerator, RefusesWhatDoesNotFitTheContext) {
  const ModelSpec m = lmModel(32);
  LmGenerator g(m, randomParams(m, 5), execOptions());
  SampleOptions o;
  o.maxNew = 10;
  const std::vector<int64_t> tooLong(33, 5);
  try {
    g.generate({{1, 5}, tooLong}, o);
    FAIL() << "a prompt of 33 tokens was accepted with a context of 32";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("prompt 2 is 33 tokens long, longer than the model's context of 32"), std::string::npos) << msg;
  }
  const std::vector<int64_t> fits(25, 5);
  try {
    g.generate({fits}, o);
    FAIL() << "25 + 10 tokens were accepted with a context of 32";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("25 tokens long; with 10 new tokens that makes 35"), std::string::npos) << msg;
    EXPECT_NE(msg.find("context of 32 tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("at most 7 new tokens"), std::string::npos) << msg;
  }
  o.maxNew = 7;  // exactly the context
  const auto out = g.generate({fits}, o);
  EXPECT_LE(out[0].size(), 7u);
  EXPECT_THROW(g.generate({{}}, o), std::invalid_argument);
  EXPECT_THROW(g.generate({{1, 0, 5}}, o), std::invalid_argument);   // pad
  EXPECT_THROW(g.generate({{1, kVocab}}, o), std::invalid_argument);  // outside the vocabulary
}

TEST(LmGenerator, WrongParametersAreAnError) {
  const ModelSpec m = lmModel();
  auto params = randomParams(m, 6);
  ModelSpec bigger = m;
  bigger.sets[0].second = "41";
  try {
    LmGenerator g(bigger, params, execOptions());
    FAIL() << "parameters of a vocabulary of 40 were accepted for 41";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 'tok_embed.weight' is f32[40,64], but the model makes it f32[41,64]"), std::string::npos) << e.what();
  }
}

TEST(SampleToken, TopKTopPAndTemperature) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 at ids 2..5 (0 and 1 are banned).
  const std::vector<float> lp{0.0f, 0.0f, std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  const std::vector<int64_t> banned{0, 1};
  const auto freq = [&](const SampleOptions& o) {
    data::Rng rng(1);
    std::vector<double> f(6, 0);
    constexpr int n = 40000;
    for (int i = 0; i < n; ++i) f[static_cast<size_t>(sampleToken(lp.data(), 6, o, rng.uniform(), banned))] += 1.0 / n;
    return f;
  };
  SampleOptions o;
  auto f = freq(o);
  EXPECT_EQ(f[0] + f[1], 0.0);
  EXPECT_NEAR(f[2], 0.5, 0.01);
  EXPECT_NEAR(f[3], 0.3, 0.01);
  EXPECT_NEAR(f[5], 0.05, 0.005);
  o.topK = 2;
  f = freq(o);
  EXPECT_NEAR(f[2], 0.625, 0.01);
  EXPECT_EQ(f[4] + f[5], 0.0);
  o.topK = 0;
  o.topP = 0.75;  // 0.5 + 0.3 reaches it
  f = freq(o);
  EXPECT_NEAR(f[3], 0.375, 0.01);
  EXPECT_EQ(f[4] + f[5], 0.0);
  o.topP = 1.0;
  o.temperature = 0.5;  // squares the probabilities: 0.25, 0.09, 0.0225, 0.0025 over 0.365
  f = freq(o);
  EXPECT_NEAR(f[2], 0.25 / 0.365, 0.01);
  o.temperature = 0;
  EXPECT_EQ(sampleToken(lp.data(), 6, o, 0.99, banned), 2);
  EXPECT_EQ(sampleToken(lp.data(), 6, o, 0.99, {0, 1, 2}), 3);
}

// A checkpoint of an lm run as the trainer writes one, with random parameters and a small
// character vocabulary.
std::string writeLmCheckpoint(const traintest::ScratchDir& dir, bool lm) {
  data::Vocab chars(data::TokenizerKind::chars);
  const data::Vocab vocab = data::Vocab::build(
      data::TokenizerKind::chars, false, {chars.tokenize("the quick brown fox jumps over a lazy dog")});
  ModelSpec m = lmModel();
  m.sets[0].second = std::to_string(vocab.size());
  const CompiledModel c = compileModelFile(m.path, m.options("next_token", {{"B", 1}, {"T", 1}}));
  Checkpoint ck;
  ck.tensors = initParams(c.params, 1);
  ck.model = m.toJson();
  ck.data = DataSpec{}.toJson();
  ck.options = "{}";
  if (lm) {
    nlohmann::json j;
    j["task"] = "lm";
    j["vocab"] = vocab.toJson();
    ck.taskState = j.dump();
  }
  std::filesystem::create_directories(checkpointDir(dir.str()));
  const std::string file = checkpointDir(dir.str()) + "/" + checkpointFileName(0);
  saveCheckpoint(file, ck);
  return file;
}

TEST(GenerateCommand, ContinuesPromptsDeterministically) {
  traintest::ScratchDir dir("tgc-generate");
  writeLmCheckpoint(dir, true);
  const std::vector<std::string> args{"generate", "--checkpoint", dir.str(), "--max-new", "12",
                                      "--seed", "3", "the ", "a"};
  auto r = tgc::testing::runTgc(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = [](const std::string& s) {
    std::vector<std::string> v;
    size_t at = 0;
    for (size_t nl; (nl = s.find('\n', at)) != std::string::npos; at = nl + 1) v.push_back(s.substr(at, nl - at));
    return v;
  };
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  EXPECT_TRUE(out[0].starts_with("the")) << out[0];
  EXPECT_TRUE(out[1].starts_with("a")) << out[1];
  EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;
  // The same seed, the same text, with or without the cache and at any batch size.
  auto again = tgc::testing::runTgc(args);
  EXPECT_EQ(again.out, r.out);
  auto more = args;
  more.insert(more.begin() + 1, {"--no-kv-cache", "--batch", "1"});
  EXPECT_EQ(tgc::testing::runTgc(more).out, r.out);
  more = args;
  more[6] = "4";
  EXPECT_NE(tgc::testing::runTgc(more).out, r.out);
  // --greedy is --temperature 0 is --top-k 1.
  auto greedy = tgc::testing::runTgc({"generate", "-c", dir.str(), "--max-new", "8", "--greedy", "the "});
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  EXPECT_EQ(tgc::testing::runTgc({"generate", "-c", dir.str(), "--max-new", "8", "--temperature", "0", "the "}).out, greedy.out);
  EXPECT_EQ(tgc::testing::runTgc({"generate", "-c", dir.str(), "--max-new", "8", "--top-k", "1", "--seed", "9", "the "}).out, greedy.out);
  // --count: several samples of one prompt.
  auto count = tgc::testing::runTgc({"generate", "-c", dir.str(), "--max-new", "8", "--count", "3", "fox"});
  ASSERT_EQ(count.exit_code, 0) << count.err;
  EXPECT_EQ(lines(count.out).size(), 3u) << count.out;
  // Too long for the context of 64: 1 + 60 tokens plus 10.
  auto tooLong = tgc::testing::runTgc({"generate", "-c", dir.str(), "--max-new", "10", std::string(60, 'a')});
  EXPECT_TRUE(tgc::testing::failsCleanly(tooLong));
  EXPECT_NE(tooLong.err.find("prompt 1 is 61 tokens long (its bos included); with --max-new 10 that makes 71, "
                             "more than the model's context of 64 tokens"),
            std::string::npos)
      << tooLong.err;
}

TEST(GenerateCommand, RefusesACheckpointThatIsNotALanguageModels) {
  traintest::ScratchDir dir("tgc-generate-not-lm");
  writeLmCheckpoint(dir, false);
  auto r = tgc::testing::runTgc({"generate", "--checkpoint", dir.str(), "hello"});
  EXPECT_TRUE(tgc::testing::failsCleanly(r));
  EXPECT_NE(r.err.find("not a language model's checkpoint"), std::string::npos) << r.err;
}

}  // namespace
