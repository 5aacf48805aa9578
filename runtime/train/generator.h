// Text generation with a trained decoder-only language model (models/gpt.tg), compiled for
// the CPU.
//
// Prompts are token ids (the caller puts bos first) and are generated in batches of up to
// SampleOptions::batchSize rows, longest prompts first. Rows are left-aligned: row b's
// prompt sits at positions 0..len_b-1 and the row then advances one position per step on
// its own (per-row positions), so prompts of different lengths share a batch without
// left padding moving their positions.
//
// With the key/value cache (the default) the whole prompt runs once (graph
// generate_prefill, prompts right-padded with pad up to a length bucket), which returns the
// distribution of the first new token and every layer's keys and values; each further step
// runs generate_step for one position per row: it reads those caches ([n_layers, B, heads,
// T, d_k], T: a length bucket covering the longest prompt plus maxNew) in place and returns
// the new position's keys and values, which the host writes into them at each row's
// position (no copy of the caches per step).
// Without it (SampleOptions::kvCache false, the baseline and the check) every step runs
// next_token_at over each row's whole prefix, padded to a length bucket.
//
// Executables are cached by (graph, B, T): B is a power of two (rows rounded up; the extra
// rows repeat the last prompt and are discarded), T one of 16, 32, 64, ... capped at the
// model's context, config entry max_len. A batch compiles at most one prefill and one step
// shape (or one next_token_at shape per bucket its prefixes grow through), never one per
// step.
//
// Sampling runs on the host in float64 from each row's log-probabilities: temperature
// (0: greedy, the most likely token, ties to the lowest id), then top-k, then top-p
// (nucleus: the fewest most likely tokens whose probabilities sum to at least topP). The
// padding and bos ids are never generated. Each sample draws from its own SplitMix64
// stream (runtime/data/rng.h), seeded from (seed, index of the sample), so a seed gives
// the same text on every machine and whatever the batch size (up to the float rounding of
// different batch shapes, which can only matter on near ties).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "ir/tensor.h"
#include "runtime/executable.h"
#include "runtime/train/spec.h"

namespace tgc::train {

struct SampleOptions {
  int64_t maxNew = 100;      // new tokens per sample at most
  double temperature = 1.0;  // 0: greedy
  int64_t topK = 0;          // keep the k most likely tokens (0: all)
  double topP = 1.0;         // keep the smallest set whose probability is at least p (1: all)
  uint64_t seed = 1;
  bool kvCache = true;       // false: recompute each row's whole prefix every step
  int64_t batchSize = 16;    // rows generated together
  bool stopAtEos = true;     // a sample ends at eos (not included in its tokens)
};

struct GenerateStats {
  int64_t samples = 0;
  int64_t tokens = 0;         // new tokens, eos included
  int64_t promptTokens = 0;
  double seconds = 0;         // the whole call, compiles included
  double compileSeconds = 0;  // of those, compiling
  double prefillSeconds = 0;  // running generate_prefill (kvCache)
  int64_t steps = 0;          // generate_step or next_token_at runs
  double tokensPerSecond() const {
    const double s = seconds - compileSeconds;
    return s > 0 ? static_cast<double>(tokens) / s : 0.0;
  }
};

class LmGenerator {
 public:
  // `params` holds every parameter of the model (more are ignored). Reads the model's
  // config (max_len, vocab, pad) by lowering next_token; throws when the file does not
  // compile or lacks the graphs generation needs.
  LmGenerator(ModelSpec model, std::map<std::string, Tensor> params,
              runtime::ExecOptions exec = runtime::ExecOptions::fromEnv());
  ~LmGenerator();

  // The new tokens of each prompt (without the prompt; without the final eos when
  // stopAtEos). Throws std::invalid_argument for an empty prompt, a token outside the
  // vocabulary, or a prompt that with maxNew does not fit in the context (the message
  // names both numbers).
  std::vector<std::vector<int64_t>> generate(const std::vector<std::vector<int64_t>>& prompts,
                                             const SampleOptions& options = {});

  int64_t contextLength() const { return maxLen_; }  // config max_len
  int64_t vocabSize() const { return vocab_; }
  const GenerateStats& lastStats() const { return stats_; }
  double compileSeconds() const { return compileSeconds_; }
  int compiledShapes() const { return static_cast<int>(exes_.size()); }

 private:
  runtime::Executable& graph(const std::string& name, int64_t B, int64_t T);
  int64_t bucket(int64_t n) const;  // lengthBucket(n), at most max_len
  // Generates rows [first, first + n) of `order` (indices into prompts).
  void batch(const std::vector<std::vector<int64_t>>& prompts, const std::vector<size_t>& order,
             size_t first, size_t n, const SampleOptions& o,
             std::vector<std::vector<int64_t>>& out);
  // Runs `exe` on the parameters and `data` (moved in for the run and back), outputs into
  // `out` (written over in place where the types match).
  void run(runtime::Executable& exe, std::vector<std::pair<std::string, Tensor*>> data,
           std::vector<Tensor>& out);

  ModelSpec model_;
  runtime::ExecOptions exec_;
  // The parameters with the data inputs of the latest run: a run reads them in place.
  std::map<std::string, Tensor> feed_;
  int64_t maxLen_ = 0, vocab_ = 0, pad_ = 0;
  std::vector<std::string> graphNames_;
  std::map<std::tuple<std::string, int64_t, int64_t>, std::unique_ptr<runtime::Executable>> exes_;
  double compileSeconds_ = 0;
  GenerateStats stats_;
};

// Draws one token from log-probabilities (V of them) as SampleOptions says; `u` is a
// uniform number in [0, 1) (unused when greedy). Ids in `banned` are never drawn.
// Exposed for tests.
int64_t sampleToken(const float* logProbs, int64_t V, const SampleOptions& o, double u,
                    const std::vector<int64_t>& banned);

}  // namespace tgc::train
