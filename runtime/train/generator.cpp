#include "runtime/train/generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "runtime/data/rng.h"
#include "runtime/data/vocab.h"
#include "runtime/train/feed_run.h"
#include "runtime/train/translator.h"

namespace tgc::train {

using data::Vocab;
using Clock = std::chrono::steady_clock;

namespace {

int64_t nextPow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

Tensor i64Tensor(Shape shape) { return Tensor(TensorType{DType::i64, std::move(shape)}); }

int64_t configInt(const CompiledModel& m, const std::string& name, const std::string& path) {
  for (const auto& [k, v] : m.config)
    if (k == name) {
      if (const auto* i = std::get_if<int64_t>(&v)) return *i;
      throw std::runtime_error(
          fmt::format("{}: config entry '{}' is not an integer, cannot generate", path, name));
    }
  throw std::runtime_error(fmt::format(
      "{}: there is no config entry '{}', which generation needs (as in models/gpt.tg)", path,
      name));
}

// Row b of a [B, V] log-probability tensor as floats (a copy unless it is f32).
const float* rowOf(const Tensor& lp, int64_t b, std::vector<float>& scratch) {
  const int64_t V = lp.shape()[1];
  if (lp.dtype() == DType::f32) return lp.as<float>() + b * V;
  scratch.resize(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) scratch[static_cast<size_t>(v)] = static_cast<float>(lp.getF(b * V + v));
  return scratch.data();
}

}  // namespace

int64_t sampleToken(const float* lp, int64_t V, const SampleOptions& o, double u,
                    const std::vector<int64_t>& banned) {
  std::vector<char> allowed(static_cast<size_t>(V), 1);
  for (int64_t b : banned)
    if (b >= 0 && b < V) allowed[static_cast<size_t>(b)] = 0;
  // Greedy: the most likely allowed token, ties to the lowest id.
  if (o.temperature <= 0 || o.topK == 1) {
    int64_t best = -1;
    for (int64_t v = 0; v < V; ++v)
      if (allowed[static_cast<size_t>(v)] && (best < 0 || lp[v] > lp[best])) best = v;
    if (best < 0) throw std::invalid_argument("no token may be generated (every id is banned)");
    return best;
  }
  // Candidates: allowed ids with a finite log-probability, most likely first (ties: lower
  // id first) when top-k or top-p needs the order, else in id order.
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(V));
  double zmax = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < V; ++v)
    if (allowed[static_cast<size_t>(v)] && std::isfinite(lp[v])) {
      ids.push_back(v);
      zmax = std::max(zmax, static_cast<double>(lp[v]));
    }
  if (ids.empty()) throw std::invalid_argument("no token has a finite log-probability");
  const bool sorted = o.topK > 0 || o.topP < 1.0;
  const auto before = [&](int64_t a, int64_t b) { return lp[a] > lp[b] || (lp[a] == lp[b] && a < b); };
  if (o.topK > 0 && static_cast<size_t>(o.topK) < ids.size()) {
    std::partial_sort(ids.begin(), ids.begin() + o.topK, ids.end(), before);
    ids.resize(static_cast<size_t>(o.topK));
  } else if (sorted) {
    std::sort(ids.begin(), ids.end(), before);
  }
  // Probabilities at the temperature, in float64.
  std::vector<double> p(ids.size());
  double total = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    p[i] = std::exp((static_cast<double>(lp[ids[i]]) - zmax) / o.temperature);
    total += p[i];
  }
  size_t keep = ids.size();
  if (o.topP < 1.0) {
    const double want = std::max(o.topP, 0.0) * total;
    double cum = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      cum += p[i];
      if (cum >= want) {
        keep = i + 1;
        break;
      }
    }
    total = 0;
    for (size_t i = 0; i < keep; ++i) total += p[i];
  }
  const double target = u * total;
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += p[i];
    if (target < cum) return ids[i];
  }
  return ids[keep - 1];  // u * total rounded up to the sum
}

LmGenerator::LmGenerator(ModelSpec model, std::map<std::string, Tensor> params,
                         runtime::ExecOptions exec)
    : model_(std::move(model)), exec_(exec), feed_(std::move(params)) {
  exec_.updateInPlace = false;
  exec_.constantParams = true;  // GEMMs pack their weights once, for every shape
  exec_.packedWeights = std::make_shared<runtime::PackedWeights>();
  // The config entries, from a lowering of the uncached graph (cheap: no code generation).
  const CompiledModel m =
      compileModelFile(model_.path, model_.options("next_token", {{"B", 1}, {"T", 1}}));
  maxLen_ = configInt(m, "max_len", model_.path);
  vocab_ = configInt(m, "vocab", model_.path);
  pad_ = configInt(m, "pad", model_.path);
  graphNames_ = m.graph_names;
  // Every parameter the model uses, of the model's type (a vocabulary size that the model
  // spec lost would otherwise fail inside a run).
  for (const ParamInit& p : m.params) {
    const auto it = feed_.find(p.name);
    if (it == feed_.end())
      throw std::runtime_error(
          fmt::format("{}: the parameters lack '{}' ({})", model_.path, p.name, p.type.str()));
    if (!(it->second.type() == p.type))
      throw std::runtime_error(fmt::format("{}: parameter '{}' is {}, but the model makes it {}",
                                           model_.path, p.name, it->second.type().str(),
                                           p.type.str()));
  }
  if (maxLen_ < 1) throw std::runtime_error(fmt::format("{}: max_len is {}", model_.path, maxLen_));
}

LmGenerator::~LmGenerator() = default;

int64_t LmGenerator::bucket(int64_t n) const { return std::min(lengthBucket(n), maxLen_); }

runtime::Executable& LmGenerator::graph(const std::string& name, int64_t B, int64_t T) {
  auto& slot = exes_[{name, B, T}];
  if (!slot) {
    const auto t0 = Clock::now();
    CompiledModel m = compileModelFile(model_.path, model_.options(name, {{"B", B}, {"T", T}}));
    slot = runtime::Executable::compile(*m.graph, exec_);
    const double s = since(t0);
    compileSeconds_ += s;
    stats_.compileSeconds += s;
  }
  return *slot;
}

void LmGenerator::run(runtime::Executable& exe, std::vector<std::pair<std::string, Tensor*>> data,
                      std::vector<Tensor>& out) {
  runWithFeed(exe, feed_, data, out);
}

std::vector<std::vector<int64_t>> LmGenerator::generate(
    const std::vector<std::vector<int64_t>>& prompts, const SampleOptions& o) {
  const auto t0 = Clock::now();
  stats_ = GenerateStats{};
  if (o.maxNew < 0) throw std::invalid_argument(fmt::format("maxNew is {}, less than 0", o.maxNew));
  if (o.batchSize < 1) throw std::invalid_argument(fmt::format("batch size {} is less than 1", o.batchSize));
  if (!(o.topP > 0) || o.topP > 1)
    throw std::invalid_argument(fmt::format("top-p {} is outside (0, 1]", o.topP));
  if (o.topK < 0) throw std::invalid_argument(fmt::format("top-k {} is less than 0", o.topK));
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw std::invalid_argument(fmt::format("temperature {} is not a number >= 0", o.temperature));
  for (const char* g : o.kvCache ? std::vector<const char*>{"generate_prefill", "generate_step"}
                                 : std::vector<const char*>{"next_token_at"})
    if (std::find(graphNames_.begin(), graphNames_.end(), g) == graphNames_.end())
      throw std::runtime_error(fmt::format(
          "{}: there is no graph '{}': generation needs generate_prefill and generate_step "
          "(with the key/value cache) and next_token_at (without), as in models/gpt.tg",
          model_.path, g));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& p = prompts[i];
    const int64_t L = static_cast<int64_t>(p.size());
    if (L == 0)
      throw std::invalid_argument(fmt::format("prompt {} is empty (it needs at least bos)", i + 1));
    for (int64_t id : p)
      if (id < 0 || id >= vocab_ || id == pad_)
        throw std::invalid_argument(fmt::format(
            "prompt {} holds token id {}, {}", i + 1, id,
            id == pad_ ? "the padding id" : fmt::format("outside the vocabulary of {}", vocab_)));
    if (L > maxLen_)
      throw std::invalid_argument(fmt::format(
          "prompt {} is {} tokens long, longer than the model's context of {} tokens "
          "(config entry max_len)",
          i + 1, L, maxLen_));
    if (L + o.maxNew > maxLen_)
      throw std::invalid_argument(fmt::format(
          "prompt {} is {} tokens long; with {} new tokens that makes {}, more than the model's "
          "context of {} tokens (config entry max_len): generate at most {} new tokens",
          i + 1, L, o.maxNew, L + o.maxNew, maxLen_, maxLen_ - L));
    stats_.promptTokens += L;
  }
  std::vector<std::vector<int64_t>> out(prompts.size());
  stats_.samples = static_cast<int64_t>(prompts.size());
  if (o.maxNew > 0 && !prompts.empty()) {
    // Longest first, so each batch holds prompts of similar length (less padding).
    std::vector<size_t> order(prompts.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return prompts[a].size() > prompts[b].size(); });
    for (size_t i = 0; i < order.size(); i += static_cast<size_t>(o.batchSize))
      batch(prompts, order, i, std::min(order.size() - i, static_cast<size_t>(o.batchSize)), o, out);
  }
  stats_.seconds = since(t0);
  return out;
}

void LmGenerator::batch(const std::vector<std::vector<int64_t>>& prompts,
                        const std::vector<size_t>& order, size_t first, size_t n,
                        const SampleOptions& o, std::vector<std::vector<int64_t>>& out) {
  const int64_t rows = static_cast<int64_t>(n), B = nextPow2(rows);
  // Rows past the real ones repeat the last prompt; their results are ignored.
  std::vector<const std::vector<int64_t>*> prompt(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) prompt[static_cast<size_t>(b)] = &prompts[order[first + static_cast<size_t>(std::min(b, rows - 1))]];
  int64_t longest = 1;
  for (const auto* p : prompt) longest = std::max<int64_t>(longest, static_cast<int64_t>(p->size()));
  const auto len = [&](int64_t b) { return static_cast<int64_t>(prompt[static_cast<size_t>(b)]->size()); };

  std::vector<data::Rng> rng;
  for (int64_t b = 0; b < rows; ++b)
    rng.emplace_back(data::mixSeed(o.seed, static_cast<uint64_t>(order[first + static_cast<size_t>(b)])));
  const std::vector<int64_t> banned{pad_, Vocab::kBos};
  std::vector<std::vector<int64_t>> gen(static_cast<size_t>(B));
  std::vector<char> done(static_cast<size_t>(B), 0);
  for (int64_t b = rows; b < B; ++b) done[static_cast<size_t>(b)] = 1;

  // A [B, T] batch of prefixes (prompt + generated) right-padded with pad, and the flat
  // index of each row's last real position.
  const auto prefixes = [&](int64_t T, Tensor& tokens, Tensor& last) {
    tokens = i64Tensor({B, T});
    last = i64Tensor({B});
    int64_t* t = tokens.as<int64_t>();
    std::fill_n(t, B * T, pad_);
    for (int64_t b = 0; b < B; ++b) {
      const auto& p = *prompt[static_cast<size_t>(b)];
      const auto& g = gen[static_cast<size_t>(b)];
      std::copy(p.begin(), p.end(), t + b * T);
      std::copy(g.begin(), g.end(), t + b * T + static_cast<int64_t>(p.size()));
      last.as<int64_t>()[b] = b * T + static_cast<int64_t>(p.size() + g.size()) - 1;
    }
  };

  std::vector<Tensor> res;  // outputs, written over in place from one step to the next
  Tensor cacheK, cacheV, tok = i64Tensor({B, 1}), pos = i64Tensor({B});
  if (o.kvCache) {
    const int64_t Tp = bucket(longest), T = bucket(longest + o.maxNew - 1);
    Tensor tokens, last;
    prefixes(Tp, tokens, last);
    runtime::Executable& exe = graph("generate_prefill", B, Tp);
    const auto t1 = Clock::now();
    run(exe, {{"tokens", &tokens}, {"rows", &last}}, res);
    if (T == Tp) {
      cacheK = std::move(res[1]);
      cacheV = std::move(res[2]);
    } else {  // into the longer caches the steps need
      const Shape& s = res[1].shape();  // [n_layers, B, heads, Tp, d_k]
      const TensorType full{res[1].dtype(), {s[0], s[1], s[2], T, s[4]}};
      const size_t from = static_cast<size_t>(Tp * s[4]) * dtypeSize(full.dtype);
      const size_t to = static_cast<size_t>(T * s[4]) * dtypeSize(full.dtype);
      cacheK = Tensor(full);
      cacheV = Tensor(full);
      for (int64_t r = 0; r < s[0] * s[1] * s[2]; ++r) {
        std::memcpy(static_cast<char*>(cacheK.data()) + static_cast<size_t>(r) * to,
                    static_cast<const char*>(res[1].data()) + static_cast<size_t>(r) * from, from);
        std::memcpy(static_cast<char*>(cacheV.data()) + static_cast<size_t>(r) * to,
                    static_cast<const char*>(res[2].data()) + static_cast<size_t>(r) * from, from);
      }
    }
    stats_.prefillSeconds += since(t1);
    res.resize(1);  // the step's new keys and values get their own buffers
  } else {
    Tensor tokens, last;
    const int64_t T = bucket(longest);
    prefixes(T, tokens, last);
    run(graph("next_token_at", B, T), {{"tokens", &tokens}, {"rows", &last}}, res);
    ++stats_.steps;
  }

  std::vector<float> scratch;
  for (;;) {
    // Sample each live row's next token from res[0], the log-probabilities [B, V].
    const Tensor& lp = res[0];
    const int64_t V = lp.shape()[1];
    bool all = true;
    for (int64_t b = 0; b < rows; ++b) {
      auto& d = done[static_cast<size_t>(b)];
      if (d) continue;
      const double u = o.temperature > 0 && o.topK != 1 ? rng[static_cast<size_t>(b)].uniform() : 0.0;
      const int64_t id = sampleToken(rowOf(lp, b, scratch), V, o, u, banned);
      gen[static_cast<size_t>(b)].push_back(id);
      ++stats_.tokens;
      if ((o.stopAtEos && id == Vocab::kEos) || static_cast<int64_t>(gen[static_cast<size_t>(b)].size()) >= o.maxNew)
        d = 1;
      all = all && d;
    }
    if (all) break;
    if (o.kvCache) {
      // Row b feeds its newest token at its position, len_b + its tokens - 1: a live row's is
      // below T, which covers the longest prompt plus maxNew - 1; done rows repeat theirs,
      // the padding rows their prompt's last.
      const Shape& s = cacheK.shape();  // [n_layers, B, heads, T, d_k]
      const int64_t T = s[3];
      for (int64_t b = 0; b < B; ++b) {
        const auto& g = gen[static_cast<size_t>(b)];
        tok.as<int64_t>()[b] = g.empty() ? prompt[static_cast<size_t>(b)]->back() : g.back();
        pos.as<int64_t>()[b] = std::min(len(b) + static_cast<int64_t>(g.size()) - 1, T - 1);
      }
      runtime::Executable& exe = graph("generate_step", B, T);
      run(exe, {{"tok", &tok}, {"pos", &pos}, {"cache_k", &cacheK}, {"cache_v", &cacheV}}, res);
      // The new position's keys and values ([n_layers, B, heads, 1, d_k]) into the caches.
      const size_t row = static_cast<size_t>(s[4]) * dtypeSize(cacheK.dtype());
      for (int64_t l = 0; l < s[0]; ++l)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < s[2]; ++h) {
            const int64_t r = (l * B + b) * s[2] + h;
            const size_t at = (static_cast<size_t>(r * T + pos.as<int64_t>()[b])) * row;
            std::memcpy(static_cast<char*>(cacheK.data()) + at,
                        static_cast<const char*>(res[1].data()) + static_cast<size_t>(r) * row, row);
            std::memcpy(static_cast<char*>(cacheV.data()) + at,
                        static_cast<const char*>(res[2].data()) + static_cast<size_t>(r) * row, row);
          }
    } else {
      int64_t longestNow = 1;
      for (int64_t b = 0; b < B; ++b)
        longestNow = std::max<int64_t>(longestNow, len(b) + static_cast<int64_t>(gen[static_cast<size_t>(b)].size()));
      Tensor tokens, last;
      const int64_t T = bucket(longestNow);
      prefixes(T, tokens, last);
      run(graph("next_token_at", B, T), {{"tokens", &tokens}, {"rows", &last}}, res);
    }
    ++stats_.steps;
  }
  for (int64_t b = 0; b < rows; ++b) {
    auto& g = gen[static_cast<size_t>(b)];
    if (o.stopAtEos && !g.empty() && g.back() == Vocab::kEos) g.pop_back();
    out[order[first + static_cast<size_t>(b)]] = std::move(g);
  }
}

}  // namespace tgc::train
