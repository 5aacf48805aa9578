#include "runtime/train/translator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "passes/pass.h"
#include "passes/passes.h"
#include "runtime/data/batching.h"
#include "runtime/data/vocab.h"
#include "runtime/train/feed_run.h"
#include "support/thread_pool.h"

namespace tgc::train {

using data::Vocab;

namespace {

int64_t nextPow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

Tensor i64Tensor(Shape shape) { return Tensor(TensorType{DType::i64, std::move(shape)}); }

// Source rows padded to S (filled up with copies of the last one, never all-padding rows).
Tensor sourceRows(const std::vector<const std::vector<int64_t>*>& sources, int64_t B, int64_t S) {
  std::vector<std::vector<int64_t>> rows;
  for (const auto* s : sources) rows.push_back(*s);
  return data::sourceTensor(rows, B, S, /*repeatLast=*/true);
}

int64_t longest(const std::vector<const std::vector<int64_t>*>& sources) {
  int64_t n = 1;
  for (const auto* s : sources) n = std::max<int64_t>(n, static_cast<int64_t>(s->size()));
  return n;
}

int64_t maxSteps(const std::vector<const std::vector<int64_t>*>& sources, const DecodeOptions& o) {
  if (o.maxLen > 0) return o.maxLen;
  const int64_t n = 2 * longest(sources) + 10;
  return o.lengthCap > 0 ? std::min(n, o.lengthCap) : n;
}

// The best token after a prefix: never pad or bos.
int64_t argmaxToken(const float* lp, int64_t V) {
  int64_t best = Vocab::kEos;
  for (int64_t v = Vocab::kEos; v < V; ++v)
    if (lp[v] > lp[best]) best = v;
  return best;
}

// The k best tokens of a row of log-probabilities, best first (never pad or bos; ties go to
// the lower id): one pass keeping a sorted list of k, without sorting the vocabulary. Once
// k are held, blocks of 16 with nothing above the k-th best are skipped with one
// comparison each (an equal value comes later, so it has the higher id and loses).
std::vector<int64_t> bestTokens(const float* lp, int64_t V, int64_t k) {
  std::vector<int64_t> best;
  best.reserve(static_cast<size_t>(k) + 1);
  auto better = [&](int64_t a, int64_t b) { return lp[a] > lp[b] || (lp[a] == lp[b] && a < b); };
  auto consider = [&](int64_t v) {
    if (static_cast<int64_t>(best.size()) == k && !better(v, best.back())) return;
    best.insert(std::upper_bound(best.begin(), best.end(), v, better), v);
    if (static_cast<int64_t>(best.size()) > k) best.pop_back();
  };
  constexpr int64_t kBlock = 16;
  int64_t v = Vocab::kEos;
  for (; v < V && static_cast<int64_t>(best.size()) < k; ++v) consider(v);
  for (; v + kBlock <= V; v += kBlock) {
    const float kth = lp[best.back()];
    bool above = false;
    for (int64_t j = 0; j < kBlock; ++j) above |= lp[v + j] > kth;
    if (above)
      for (int64_t j = 0; j < kBlock; ++j) consider(v + j);
  }
  for (; v < V; ++v) consider(v);
  return best;
}

double lengthPenalty(int64_t len, double alpha) {
  return std::pow((5.0 + static_cast<double>(len)) / 6.0, alpha);
}

}  // namespace

int64_t lengthBucket(int64_t n) { return std::max<int64_t>(16, nextPow2(n)); }

namespace {
// Buffers kept for reuse between batches and shrinks: a batch's caches at each of its sizes.
constexpr size_t kSpareBuffers = 24;
}  // namespace

Translator::Translator(ModelSpec model, std::map<std::string, Tensor> params,
                       runtime::ExecOptions exec)
    : model_(std::move(model)), feed_(std::move(params)), exec_(exec) {
  exec_.updateInPlace = false;
  exec_.constantParams = true;  // GEMMs pack their weights once (setParams says when not)
  exec_.packedWeights = std::make_shared<runtime::PackedWeights>();  // ... for every shape
  // decode_cached writes each step's keys and values into the caches it is given.
  exec_.donatedInputs = {"self_k", "self_v"};
}

Translator::~Translator() = default;

void Translator::setParams(std::map<std::string, Tensor> params) {
  feed_ = std::move(params);
  if (quantize_) {
    forgetCompiled();
    return;
  }
  exec_.packedWeights->clear();
  auto changed = [](auto& table) {
    for (auto& [key, exe] : table)
      if (exe) exe->paramsChanged();
  };
  changed(encoders_);
  changed(decoders_);
  changed(graphs_);
}

void Translator::setQuantize(bool on) {
  if (on != quantize_) forgetCompiled();
  quantize_ = on;
}

void Translator::forgetCompiled() {
  encoders_.clear();
  decoders_.clear();
  graphs_.clear();
}

runtime::Executable& Translator::compiled(std::unique_ptr<runtime::Executable>& slot,
                                          const std::string& name, const Dims& dims) {
  if (!slot) {
    if (decoding_) ++stats_.compilesWhileDecoding;
    const auto t0 = std::chrono::steady_clock::now();
    CompiledModel m = compileModelFile(model_.path, model_.options(name, dims));
    if (quantize_) {
      PassContext ctx;
      runQuantize(*m.graph, ctx);
    }
    slot = runtime::Executable::compile(*m.graph, exec_);
    compileSeconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return *slot;
}

runtime::Executable& Translator::encoder(int64_t B, int64_t S) {
  return compiled(encoders_[{B, S}], "encode", {{"B", B}, {"S", S}});
}

runtime::Executable& Translator::decoder(int64_t B, int64_t S, int64_t T) {
  return compiled(decoders_[{B, S, T}], "decode_at", {{"B", B}, {"S", S}, {"T", T}});
}

runtime::Executable& Translator::graph(const std::string& name, int64_t B, int64_t S, int64_t T) {
  Dims dims{{"B", B}, {"S", S}};
  if (T > 0) dims.emplace_back("T", T);
  return compiled(graphs_[{name, B, S, T}], name, dims);
}

template <class F>
auto Translator::timed(double& seconds, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  const double compiled = compileSeconds_;
  auto r = f();
  seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() -
             (compileSeconds_ - compiled);
  return r;
}

namespace {

// Rows `keep` of a [L, B, X, D] tensor (or of a [B, X] one when rank 2) into `to` of the
// same type but B' = to's rows; rows past keep.size() repeat its last row. Only the first
// `used` bytes of each row are copied (0: all of it).
void gatherRows(const Tensor& from, const std::vector<int64_t>& keep, Tensor& to, size_t used = 0) {
  const Shape& fs = from.shape();
  const bool stacked = fs.size() == 4;
  const int64_t layers = stacked ? fs[0] : 1, B = stacked ? fs[1] : fs[0], B2 = stacked ? to.shape()[1] : to.shape()[0];
  const size_t stride = static_cast<size_t>(from.numel() / (layers * B)) * dtypeSize(from.dtype());
  const size_t row = used > 0 ? std::min(used, stride) : stride;
  const auto* src = static_cast<const char*>(from.data());
  auto* dst = static_cast<char*>(to.data());
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t j = 0; j < B2; ++j) {
      const int64_t r = keep[static_cast<size_t>(std::min<int64_t>(j, static_cast<int64_t>(keep.size()) - 1))];
      std::memcpy(dst + static_cast<size_t>(l * B2 + j) * stride, src + static_cast<size_t>(l * B + r) * stride, row);
    }
}

TensorType withRows(const Tensor& t, int64_t rows) {
  TensorType type = t.type();
  type.shape[type.rank() == 4 ? 1 : 0] = rows;
  return type;
}

}  // namespace

Translator::Cache Translator::startCache(const Tensor& src, const Tensor& memory, int64_t limit,
                                         int64_t sentences, int64_t repeat) {
  const int64_t S = src.shape()[1];
  auto cross = timed(stats_.encodeSeconds, [&] {
    Tensor mem = memory;  // (once a batch)
    std::vector<Tensor> out;
    run(graph("decode_memory", src.shape()[0], S, 0), {{"memory", &mem}}, out);
    return out;
  });
  Cache c;
  c.src = src;
  c.crossK = std::move(cross[0]);
  c.crossV = std::move(cross[1]);
  if (repeat > 1) {  // each sentence's rows repeated for its hypotheses: row r is r / repeat's
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < nextPow2(sentences * repeat); ++r) rows.push_back(std::min(r / repeat, sentences - 1));
    for (Tensor* t : {&c.src, &c.crossK, &c.crossV}) {
      Tensor to = takeBuffer(withRows(*t, static_cast<int64_t>(rows.size())));
      gatherRows(*t, rows, to);
      *t = std::move(to);
    }
  }
  const int64_t B = c.src.shape()[0];
  const Shape& ks = c.crossK.shape();  // [n_dec, B, S, d_model]
  const TensorType self{c.crossK.dtype(), {ks[0], B, lengthBucket(limit + 1), ks[3]}};
  c.selfK = takeBuffer(self);
  c.selfV = takeBuffer(self);
  return c;
}

const Tensor& Translator::cachedStep(Cache& c, const std::vector<int64_t>& tokens, int64_t pos) {
  const int64_t B = c.src.shape()[0], S = c.src.shape()[1], T = c.selfK.shape()[2];
  Tensor tok = i64Tensor({B, 1}), at = i64Tensor({1});
  for (int64_t b = 0; b < B; ++b)
    tok.as<int64_t>()[b] = tokens[static_cast<size_t>(std::min<int64_t>(b, static_cast<int64_t>(tokens.size()) - 1))];
  at.as<int64_t>()[0] = pos;
  runtime::Executable& exe = graph("decode_cached", B, S, T);
  timed(stats_.stepSeconds, [&] {
    run(exe, {{"src", &c.src}, {"cross_k", &c.crossK}, {"cross_v", &c.crossV}, {"self_k", &c.selfK},
              {"self_v", &c.selfV}, {"tok", &tok}, {"pos", &at}},
        c.out);
    return 0;
  });
  stepDone();
  // Written into the caches themselves (the model's dynamic_update_slice on donated
  // inputs), or into the output buffers: then the caches just read become the next step's
  // output buffers, so that no tensor is allocated (and no page faulted in) per step.
  if (!exe.outputInDonatedInput(1)) std::swap(c.selfK, c.out[1]);
  if (!exe.outputInDonatedInput(2)) std::swap(c.selfV, c.out[2]);
  return c.out[0];
}

// A cache buffer of `type`: one an earlier batch gave back, of that type or else the
// smallest of its dtype that holds it (retyped: no allocation, no page faulted in), else a
// new one (zeros). What an old buffer holds beyond the positions written so far is never
// attended to (those keys are masked), and it is finite (cache values, or zeros), so it
// needs no clearing.
Tensor Translator::takeBuffer(const TensorType& type) {
  const size_t bytes = static_cast<size_t>(type.numel()) * dtypeSize(type.dtype);
  auto pick = spare_.end();
  for (auto it = spare_.begin(); it != spare_.end(); ++it) {
    if (it->type() == type) {
      pick = it;
      break;
    }
    if (it->dtype() == type.dtype && it->capacityBytes() >= bytes &&
        (pick == spare_.end() || it->capacityBytes() < pick->capacityBytes()))
      pick = it;
  }
  if (pick == spare_.end()) return Tensor(type);
  Tensor t = std::move(*pick);
  spare_.erase(pick);
  t.retype(type);
  return t;
}

void Translator::giveBack(Cache& c) {
  for (Tensor* t : {&c.src, &c.crossK, &c.crossV, &c.selfK, &c.selfV})
    if (t->numel() > 0) spare_.push_back(std::move(*t));
  for (size_t i = 1; i < c.out.size(); ++i)
    if (c.out[i].data()) spare_.push_back(std::move(c.out[i]));
  c.out.clear();
  while (spare_.size() > kSpareBuffers) spare_.erase(spare_.begin());  // the oldest go
}

void Translator::shrinkCache(Cache& c, const std::vector<int64_t>& keep, int64_t rows, int64_t written) {
  // (Buffers from the pool: fresh ones would fault their pages in on every shrink.)
  auto gathered = [&](Tensor& t, size_t used) {
    Tensor to = takeBuffer(withRows(t, rows));
    gatherRows(t, keep, to, used);
    spare_.push_back(std::move(t));
    t = std::move(to);
  };
  gathered(c.src, 0);
  gathered(c.crossK, 0);
  gathered(c.crossV, 0);
  const TensorType self = withRows(c.selfK, rows);
  if (written > 0) {  // positions 0..written-1 hold keys and values so far
    const size_t used = static_cast<size_t>(written * c.selfK.shape()[3]) * dtypeSize(c.selfK.dtype());
    gathered(c.selfK, used);
    gathered(c.selfV, used);
  }
  // The output buffers of the old shape go back to the pool (the next step, or the beam's
  // reordering, takes ones of the new shape).
  for (size_t i = 1; i < c.out.size(); ++i) {
    if (c.out[i].data() && c.out[i].type() != self) spare_.push_back(std::move(c.out[i]));
    if (c.out[i].type() != self) c.out[i] = Tensor();
  }
  while (spare_.size() > kSpareBuffers) spare_.erase(spare_.begin());
}

void Translator::run(runtime::Executable& exe, std::vector<std::pair<std::string, Tensor*>> data,
                     std::vector<Tensor>& out) {
  runWithFeed(exe, feed_, data, out);
}

Tensor Translator::encode(const Tensor& src) {
  const int64_t B = src.shape()[0], S = src.shape()[1];
  Tensor s = src;
  std::vector<Tensor> out;
  timed(stats_.encodeSeconds, [&] {
    run(encoder(B, S), {{"src", &s}}, out);
    return 0;
  });
  return std::move(out[0]);
}

void Translator::stepDone() {
  if (stats_.steps++ > 0) return;
  stats_.firstTokenSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  stats_.firstTokenCompileSeconds = compileSeconds_ - compiledBefore_;
}

Tensor Translator::step(const Tensor& src, const Tensor& memory,
                        const std::vector<std::vector<int64_t>>& prefixes) {
  const int64_t B = src.shape()[0], S = src.shape()[1];
  int64_t len = 1;
  for (const auto& p : prefixes) len = std::max<int64_t>(len, static_cast<int64_t>(p.size()));
  const int64_t T = lengthBucket(len);
  Tensor tgt = i64Tensor({B, T}), rows = i64Tensor({B});
  auto* t = tgt.as<int64_t>();
  auto* r = rows.as<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    // Rows past the real ones repeat the last prefix (their results are ignored).
    const auto& p = prefixes[static_cast<size_t>(std::min<int64_t>(b, static_cast<int64_t>(prefixes.size()) - 1))];
    std::copy(p.begin(), p.end(), t + b * T);
    r[b] = b * T + static_cast<int64_t>(p.size()) - 1;
  }
  Tensor lp = timed(stats_.stepSeconds, [&] {
    Tensor s = src, mem = memory;  // (the uncached path: a copy a step)
    std::vector<Tensor> out;
    run(decoder(B, S, T), {{"src", &s}, {"memory", &mem}, {"tgt", &tgt}, {"rows", &rows}}, out);
    return std::move(out[0]);
  });
  stepDone();
  return lp;
}

void Translator::prepare(const std::vector<const std::vector<int64_t>*>& batch, const DecodeOptions& o) {
  const auto n = static_cast<int64_t>(batch.size());
  const int64_t S = lengthBucket(longest(batch)), limit = maxSteps(batch, o);
  encoder(nextPow2(n), S);  // (beam: the encoder runs once per sentence)
  const int64_t B = nextPow2(n * o.beam);
  if (o.kvCache) {
    graph("decode_memory", nextPow2(n), S, 0);  // (beam: once per sentence too)
    // Every batch size the rows shrink to as sentences finish (shrinkCache).
    for (int64_t b = B; b >= nextPow2(o.beam); b /= 2) graph("decode_cached", b, S, lengthBucket(limit + 1));
  } else {  // the prefix (bos and up to limit - 1 tokens) in every bucket it passes
    for (int64_t T = lengthBucket(1); T <= lengthBucket(limit); T *= 2) decoder(B, S, T);
  }
}

std::vector<std::vector<int64_t>> Translator::translate(
    const std::vector<std::vector<int64_t>>& sources, const DecodeOptions& o,
    std::vector<double>* scores) {
  if (o.beam < 1) throw std::invalid_argument("beam size must be at least 1");
  stats_ = DecodeStats{};
  started_ = std::chrono::steady_clock::now();
  const double compiled = compiledBefore_ = compileSeconds_;
  std::vector<std::vector<int64_t>> out(sources.size());
  std::vector<double> logp(sources.size(), 0.0);
  // Longest first, so each batch holds sources of similar length (less padding).
  std::vector<size_t> order(sources.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sources[a].size() > sources[b].size(); });
  const int64_t perBatch =
      std::max<int64_t>(1, o.beam == 1 ? o.batchSize : o.batchSize / o.beam);
  // The batches, then every shape they run compiled before the first is decoded.
  std::vector<std::vector<const std::vector<int64_t>*>> batches;
  for (size_t i = 0; i < order.size();) {
    // The first source is the batch's longest: rows x its length (with eos) bounds the tokens.
    const auto longestRow = static_cast<int64_t>(sources[order[i]].size()) + 1;
    size_t n = std::min(order.size() - i, static_cast<size_t>(perBatch));
    if (o.maxTokens > 0)
      n = std::clamp<size_t>(static_cast<size_t>(o.maxTokens / (longestRow * o.beam)), 1, n);
    batches.emplace_back();
    for (size_t k = 0; k < n; ++k) batches.back().push_back(&sources[order[i + k]]);
    i += n;
  }
  for (const auto& batch : batches) prepare(batch, o);
  decoding_ = true;
  struct Done {
    bool& flag;
    ~Done() { flag = false; }
  } done{decoding_};
  for (size_t i = 0, b = 0; b < batches.size(); ++b) {
    const auto& batch = batches[b];
    const size_t n = batch.size();
    std::vector<std::vector<int64_t>> result(n);
    std::vector<double> batchScores(n, 0.0);
    if (o.beam == 1)
      greedyBatch(batch, static_cast<int64_t>(n), o, result, batchScores);
    else
      beamBatch(batch, static_cast<int64_t>(n), o, result, batchScores);
    for (size_t k = 0; k < n; ++k) {
      stats_.tokens += static_cast<int64_t>(result[k].size());
      out[order[i + k]] = std::move(result[k]);
      logp[order[i + k]] = batchScores[k];
    }
    i += n;
    ++stats_.batches;
    if (o.progress) o.progress(i, order.size());
  }
  stats_.sentences = static_cast<int64_t>(sources.size());
  stats_.compileSeconds = compileSeconds_ - compiled;
  stats_.totalSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  stats_.searchSeconds = std::max(0.0, stats_.totalSeconds - stats_.compileSeconds -
                                           stats_.encodeSeconds - stats_.stepSeconds);
  if (scores) *scores = std::move(logp);
  return out;
}

void Translator::greedyBatch(const std::vector<const std::vector<int64_t>*>& sources,
                             int64_t rows, const DecodeOptions& o,
                             std::vector<std::vector<int64_t>>& out, std::vector<double>& scores) {
  const int64_t B = nextPow2(rows), S = lengthBucket(longest(sources));
  const Tensor src = sourceRows(sources, B, S);
  const Tensor memory = encode(src);
  std::vector<std::vector<int64_t>> prefixes(static_cast<size_t>(rows), {Vocab::kBos});
  const int64_t limit = maxSteps(sources, o);
  Cache cache;
  if (o.kvCache) cache = startCache(src, memory, limit);
  // The sentence each row runs (done ones keep running until the batch shrinks past them:
  // with the cache, once nextPow2 of the rows still decoding drops, they are dropped).
  std::vector<int64_t> rowOf(static_cast<size_t>(rows));
  std::iota(rowOf.begin(), rowOf.end(), int64_t{0});
  std::vector<bool> done(static_cast<size_t>(rows), false);
  int64_t live = rows;
  for (int64_t t = 0; t < limit && live > 0; ++t) {
    Tensor uncached;
    const Tensor* lpp = &uncached;
    if (o.kvCache) {
      std::vector<int64_t> last;
      for (int64_t b : rowOf) last.push_back(prefixes[static_cast<size_t>(b)].back());
      lpp = &cachedStep(cache, last, t);
    } else {
      uncached = step(src, memory, prefixes);
    }
    const Tensor& lp = *lpp;
    const int64_t V = lp.shape()[1];
    std::vector<int64_t> best(rowOf.size());  // each row's best token, rows split over the threads
    ThreadPool::global().parallelFor(static_cast<int64_t>(rowOf.size()), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) best[static_cast<size_t>(r)] = argmaxToken(lp.as<float>() + r * V, V);
    });
    for (size_t r = 0; r < rowOf.size(); ++r) {
      const auto b = static_cast<size_t>(rowOf[r]);
      if (done[b]) continue;
      const int64_t tok = best[r];
      scores[b] += lp.as<float>()[static_cast<int64_t>(r) * V + tok];
      if (tok == Vocab::kEos) {
        done[b] = true;
        --live;
      } else {
        prefixes[b].push_back(tok);
      }
    }
    if (o.kvCache && live > 0 && nextPow2(live) < cache.src.shape()[0]) {
      std::vector<int64_t> keep, sentences;
      for (size_t r = 0; r < rowOf.size(); ++r)
        if (!done[static_cast<size_t>(rowOf[r])]) {
          keep.push_back(static_cast<int64_t>(r));
          sentences.push_back(rowOf[r]);
        }
      shrinkCache(cache, keep, nextPow2(live), t + 1);
      rowOf = std::move(sentences);
    }
  }
  for (int64_t b = 0; b < rows; ++b)
    out[static_cast<size_t>(b)].assign(prefixes[static_cast<size_t>(b)].begin() + 1,
                                       prefixes[static_cast<size_t>(b)].end());
  giveBack(cache);
}

// Beam search over `sentences` sentences at once, `beam` rows each. Every step extends each
// live hypothesis by its best `beam` tokens; a candidate ending in eos is set aside as
// finished (scored by log-probability over the length penalty), the best others stay live.
// A sentence is done when it has `beam` finished hypotheses or the best live one cannot beat
// its best finished one any more (live scores only fall).
void Translator::beamBatch(const std::vector<const std::vector<int64_t>*>& sources,
                           int64_t sentences, const DecodeOptions& o,
                           std::vector<std::vector<int64_t>>& out, std::vector<double>& scores) {
  const int64_t K = o.beam;
  const int64_t Benc = nextPow2(sentences), S = lengthBucket(longest(sources));
  const Tensor encSrc = sourceRows(sources, Benc, S);
  const Tensor encMemory = encode(encSrc);
  // Each sentence's source and memory repeated for its K rows (the encoder ran once; with the
  // cache, so does decode_memory, and its keys and values are repeated instead).
  const int64_t B = nextPow2(sentences * K), D = encMemory.shape()[2];
  Tensor src, memory;
  if (!o.kvCache) {
    src = i64Tensor({B, S});
    memory = Tensor(TensorType{encMemory.dtype(), {B, S, D}});
    const size_t memRow = static_cast<size_t>(S * D) * dtypeSize(encMemory.dtype());
    for (int64_t r = 0; r < B; ++r) {
      const int64_t s = std::min(r / K, sentences - 1);
      std::copy_n(encSrc.as<int64_t>() + s * S, S, src.as<int64_t>() + r * S);
      std::memcpy(static_cast<char*>(memory.data()) + static_cast<size_t>(r) * memRow,
                  static_cast<const char*>(encMemory.data()) + static_cast<size_t>(s) * memRow, memRow);
    }
  }

  struct Hyp {
    std::vector<int64_t> tokens;  // bos first
    double logp = 0;
    int64_t cacheRow = 0;  // the row of the latest caches that holds its earlier positions
  };
  struct Finished {
    std::vector<int64_t> tokens;  // without bos and eos
    double score = 0;             // logp over the length penalty: what ranks them
    double logp = 0;
  };
  std::vector<std::vector<Hyp>> live(static_cast<size_t>(sentences), {Hyp{{Vocab::kBos}, 0.0, 0}});
  Cache cache;
  if (o.kvCache) cache = startCache(encSrc, encMemory, maxSteps(sources, o), sentences, K);
  std::vector<std::vector<Finished>> finished(static_cast<size_t>(sentences));
  const int64_t limit = maxSteps(sources, o);
  // Sentence s runs in rows blockOf[s] * K .. + K - 1 of the current batch of Bnow rows; with
  // the cache, the batch shrinks to a smaller compiled shape as sentences finish.
  std::vector<int64_t> blockOf(static_cast<size_t>(sentences));
  std::iota(blockOf.begin(), blockOf.end(), int64_t{0});
  int64_t Bnow = B;
  for (int64_t t = 0; t < limit; ++t) {
    if (o.kvCache) {
      std::vector<int64_t> keep;  // a source row of each sentence still decoding, K times
      std::vector<int64_t> next(static_cast<size_t>(sentences), 0);
      for (int64_t s = 0; s < sentences; ++s)
        if (!live[static_cast<size_t>(s)].empty()) {
          next[static_cast<size_t>(s)] = static_cast<int64_t>(keep.size()) / K;
          keep.insert(keep.end(), static_cast<size_t>(K), blockOf[static_cast<size_t>(s)] * K);
        }
      const int64_t rows = nextPow2(static_cast<int64_t>(keep.size()));
      if (!keep.empty() && rows < Bnow) {
        // The caches' rows move with the reordering below (from the old batch's rows).
        shrinkCache(cache, keep, rows, 0);
        blockOf = std::move(next);
        Bnow = rows;
      }
    }
    // One row per live hypothesis; unused rows repeat a live one.
    std::vector<std::vector<int64_t>> prefixes;
    std::vector<std::pair<int64_t, size_t>> owner;  // row -> (sentence, hypothesis)
    for (int64_t s = 0; s < sentences; ++s)
      for (size_t h = 0; h < live[static_cast<size_t>(s)].size(); ++h) {
        prefixes.push_back(live[static_cast<size_t>(s)][h].tokens);
        owner.emplace_back(s, h);
      }
    if (prefixes.empty()) break;
    // Rows are laid out sentence by sentence in blocks of K, matching src and memory. A
    // hypothesis keeps its parent's row where it can (the first child of each parent), so
    // that only the others' caches move: a row no child claims is nobody's parent, so the
    // copies into such rows read rows that stay as they are.
    const bool moved = o.kvCache && cache.selfK.shape()[1] != Bnow;  // shrunk: every row moves
    std::vector<std::vector<int64_t>> rowsPrefix(static_cast<size_t>(Bnow), prefixes.front());
    std::vector<int64_t> rowOf(prefixes.size(), -1);
    std::vector<bool> taken(static_cast<size_t>(Bnow), false);
    auto parentRow = [&](size_t i) { return live[static_cast<size_t>(owner[i].first)][owner[i].second].cacheRow; };
    if (o.kvCache && !moved)
      for (size_t i = 0; i < prefixes.size(); ++i) {
        const int64_t p = parentRow(i), block = blockOf[static_cast<size_t>(owner[i].first)];
        if (p / K == block && !taken[static_cast<size_t>(p)]) {
          rowOf[i] = p;
          taken[static_cast<size_t>(p)] = true;
        }
      }
    for (size_t i = 0; i < prefixes.size(); ++i) {
      if (rowOf[i] < 0) {
        int64_t row = blockOf[static_cast<size_t>(owner[i].first)] * K;
        while (taken[static_cast<size_t>(row)]) ++row;
        rowOf[i] = row;
        taken[static_cast<size_t>(row)] = true;
      }
      rowsPrefix[static_cast<size_t>(rowOf[i])] = prefixes[i];
    }
    Tensor uncached;
    const Tensor* lpp = &uncached;
    if (o.kvCache) {
      const int64_t layers = cache.selfK.shape()[0], rowFloats = cache.selfK.shape()[2] * cache.selfK.shape()[3];
      const int64_t written = t * cache.selfK.shape()[3];  // positions 0..t-1 hold keys so far
      const int64_t Bfrom = cache.selfK.shape()[1];  // the rows before a shrink, else Bnow
      auto copyRows = [&](const Tensor& from, Tensor& to, int64_t fromRow, int64_t toRow) {
        for (int64_t l = 0; l < layers; ++l)
          std::copy_n(from.as<float>() + (l * Bfrom + fromRow) * rowFloats, written,
                      to.as<float>() + (l * Bnow + toRow) * rowFloats);
      };
      if (moved) {  // into buffers of the new shape
        if (cache.out.size() < 3) cache.out.resize(3);
        const TensorType now = withRows(cache.selfK, Bnow);
        for (size_t b : {1, 2})
          if (cache.out[b].type() != now) cache.out[b] = takeBuffer(now);
        for (size_t i = 0; i < prefixes.size(); ++i) {
          copyRows(cache.selfK, cache.out[1], parentRow(i), rowOf[i]);
          copyRows(cache.selfV, cache.out[2], parentRow(i), rowOf[i]);
        }
        std::swap(cache.selfK, cache.out[1]);
        std::swap(cache.selfV, cache.out[2]);
      } else {  // in place: only the hypotheses not in their parent's row
        for (size_t i = 0; i < prefixes.size(); ++i)
          if (parentRow(i) != rowOf[i]) {
            copyRows(cache.selfK, cache.selfK, parentRow(i), rowOf[i]);
            copyRows(cache.selfV, cache.selfV, parentRow(i), rowOf[i]);
          }
      }
      std::vector<int64_t> last;
      for (const auto& p : rowsPrefix) last.push_back(p.back());
      lpp = &cachedStep(cache, last, t);
    } else {
      uncached = step(src, memory, rowsPrefix);
    }
    const Tensor& lp = *lpp;
    const int64_t V = lp.shape()[1];

    std::vector<std::vector<std::pair<double, std::pair<size_t, int64_t>>>> cands(
        static_cast<size_t>(sentences));
    // Each hypothesis's best K tokens (never pad or bos), the rows split over the threads.
    std::vector<std::vector<int64_t>> best(prefixes.size());
    ThreadPool::global().parallelFor(static_cast<int64_t>(prefixes.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        best[static_cast<size_t>(i)] = bestTokens(lp.as<float>() + rowOf[static_cast<size_t>(i)] * V, V, K);
    });
    for (size_t i = 0; i < prefixes.size(); ++i) {
      const auto [s, h] = owner[i];
      const float* row = lp.as<float>() + rowOf[i] * V;
      const std::vector<int64_t>& ids = best[i];
      for (size_t j = 0; j < ids.size(); ++j)
        cands[static_cast<size_t>(s)].push_back(
            {live[static_cast<size_t>(s)][h].logp + row[ids[j]], {i, ids[j]}});
    }
    for (int64_t s = 0; s < sentences; ++s) {
      auto& c = cands[static_cast<size_t>(s)];
      auto& fin = finished[static_cast<size_t>(s)];
      std::stable_sort(c.begin(), c.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      std::vector<Hyp> next;
      for (const auto& [logp, hk] : c) {
        if (static_cast<int64_t>(next.size()) >= K || static_cast<int64_t>(fin.size()) >= K) break;
        const size_t i = hk.first;  // the candidate's parent: prefixes[i], run in row rowOf[i]
        const Hyp& parent = live[static_cast<size_t>(s)][owner[i].second];
        if (hk.second == Vocab::kEos) {
          std::vector<int64_t> toks(parent.tokens.begin() + 1, parent.tokens.end());
          const double score = logp / lengthPenalty(static_cast<int64_t>(toks.size()) + 1, o.lengthPenalty);
          fin.push_back({std::move(toks), score, logp});
        } else {
          Hyp h{parent.tokens, logp, rowOf[i]};
          h.tokens.push_back(hk.second);
          next.push_back(std::move(h));
        }
      }
      // Done: K finished, or no live hypothesis can still beat the best finished one (its
      // log-probability only falls; the penalty is largest at the length limit).
      double bestFin = -std::numeric_limits<double>::infinity();
      for (const auto& f : fin) bestFin = std::max(bestFin, f.score);
      bool hopeless = !fin.empty() && o.lengthPenalty >= 0;
      for (const Hyp& h : next)
        hopeless = hopeless && h.logp / lengthPenalty(limit + 1, o.lengthPenalty) <= bestFin;
      if (static_cast<int64_t>(fin.size()) >= K || hopeless) next.clear();
      live[static_cast<size_t>(s)] = std::move(next);
    }
  }
  for (int64_t s = 0; s < sentences; ++s) {
    auto& fin = finished[static_cast<size_t>(s)];
    for (const Hyp& h : live[static_cast<size_t>(s)])  // unfinished at the length limit
      fin.push_back({std::vector<int64_t>(h.tokens.begin() + 1, h.tokens.end()),
                     h.logp / lengthPenalty(static_cast<int64_t>(h.tokens.size()), o.lengthPenalty),
                     h.logp});
    const auto best = std::max_element(fin.begin(), fin.end(), [](const auto& a, const auto& b) {
      return a.score < b.score;
    });
    if (best != fin.end()) {
      out[static_cast<size_t>(s)] = best->tokens;
      scores[static_cast<size_t>(s)] = best->logp;
    }
  }
  giveBack(cache);
}

}  // namespace tgc::train
