// Greedy and beam-search decoding with a trained model, compiled for the CPU.
//
// The encoder runs once per sentence (graph `encode`, one executable per (B, S)), and so do
// the cross-attention projections of every decoder layer (`decode_memory`). Each step then
// runs `decode_cached` for one position per row: the keys and values of the earlier
// positions come from caches [n_dec, B, T, d_model] that the step updates in place (T: a
// length bucket 16, 32, ... covering the longest output; the caches are donated inputs). As
// sentences finish, the rows shrink to the next smaller compiled batch (B/2, B/4, ...).
// Beam search moves the cache rows of hypotheses that fork from their parent's row. Without the cache (DecodeOptions::kvCache false) each step
// runs `decode_at` over the whole prefix padded to a length bucket. Sentences are decoded in
// batches of up to `batchSize` rows (and `maxTokens` source tokens), sorted by length, and
// returned in their input order. Every shape the batches need is compiled (or taken from the
// per-process cache) before the first one is decoded, so no step waits for a compile.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "ir/tensor.h"
#include "runtime/executable.h"
#include "runtime/train/spec.h"

namespace tgc::train {

struct DecodeOptions {
  int beam = 1;                // 1: greedy
  double lengthPenalty = 0.6;  // beam: scores divided by ((5 + len) / 6)^alpha (GNMT)
  int64_t maxLen = 0;          // tokens generated at most; 0: 2 * source length + 10, capped
  int64_t lengthCap = 0;       // by this when > 0 (from the longest training target)
  int64_t batchSize = 64;      // rows per run (beam: sentences x beam)
  // Reuse keys and values between steps (graphs decode_memory and decode_cached); false
  // recomputes the whole prefix every step (decode_at).
  bool kvCache = true;
  // Batches by tokens too: rows x the longest source (with eos) of a batch at most this
  // (0: rows only; a batch holds at least one sentence).
  int64_t maxTokens = 0;
  // Called after each batch with the sentences done so far and the total.
  std::function<void(size_t, size_t)> progress;
};

// What a translate() call did: the figures `tgc translate --stats` prints. Times exclude
// compiling (compileSeconds, spent the first time a shape runs).
struct DecodeStats {
  int64_t sentences = 0, batches = 0;
  int64_t tokens = 0;  // target tokens generated (without eos)
  int64_t steps = 0;   // decoder runs, one position each (with the cache)
  double encodeSeconds = 0;      // encode and decode_memory
  double stepSeconds = 0;        // the decoder steps (graph runs)
  double searchSeconds = 0;      // everything else: selecting tokens, reordering caches
  double firstTokenSeconds = 0;  // from the call to the first batch's first step's output
  double firstTokenCompileSeconds = 0;  // the part of it spent compiling
  double totalSeconds = 0;
  double compileSeconds = 0;
  int64_t compilesWhileDecoding = 0;  // shapes prepare() missed: 0, which the tests hold
};

class Translator {
 public:
  // `model` must carry the vocabulary sizes among its sets; `params` every parameter.
  Translator(ModelSpec model, std::map<std::string, Tensor> params,
             runtime::ExecOptions exec = runtime::ExecOptions::fromEnv());
  ~Translator();

  // New parameter values (the trainer's, before a validation). Quantized graphs pack their
  // weights once, so they are compiled again for new values.
  void setParams(std::map<std::string, Tensor> params);

  // int8 matmuls (pass quantize, codegen/gemm_int8.h) in every graph compiled from now on.
  void setQuantize(bool on);
  bool quantized() const { return quantize_; }

  // Target ids of each source (without bos or eos); with `scores`, the log-probability of
  // each translation (its tokens and eos) under the model.
  std::vector<std::vector<int64_t>> translate(const std::vector<std::vector<int64_t>>& sources,
                                              const DecodeOptions& options = {},
                                              std::vector<double>* scores = nullptr);
  // The figures of the latest translate() call.
  const DecodeStats& stats() const { return stats_; }

  double compileSeconds() const { return compileSeconds_; }
  int compiledShapes() const { return static_cast<int>(encoders_.size() + decoders_.size()); }

 private:
  // Compiles every shape decoding `batch` runs, so that no step waits for a compile.
  void prepare(const std::vector<const std::vector<int64_t>*>& batch, const DecodeOptions& o);
  using Dims = std::vector<std::pair<std::string, int64_t>>;
  runtime::Executable& compiled(std::unique_ptr<runtime::Executable>& slot, const std::string& name,
                                const Dims& dims);
  runtime::Executable& encoder(int64_t B, int64_t S);
  runtime::Executable& decoder(int64_t B, int64_t S, int64_t T);
  runtime::Executable& graph(const std::string& name, int64_t B, int64_t S, int64_t T);
  // The state of cached decoding for one batch.
  struct Cache {
    Tensor src, crossK, crossV, selfK, selfV;
    std::vector<Tensor> out;  // the last step's outputs: log-probabilities, then buffers of
                              // the caches' type (written by a step that cannot update the
                              // caches in place; beam search's scratch after a shrink)
  };
  // The cross-attention keys and values of `memory` ([B, S, D] of src's sources), and room
  // for `limit` positions; with repeat > 1, each of the first `sentences` rows repeated for
  // its hypotheses (beam search).
  Cache startCache(const Tensor& src, const Tensor& memory, int64_t limit, int64_t sentences = 0,
                   int64_t repeat = 1);
  // Log-probabilities [B, V] after feeding tokens[b] at position pos; updates the caches.
  // (The result lives in c until the next step.)
  const Tensor& cachedStep(Cache& c, const std::vector<int64_t>& tokens, int64_t pos);
  Tensor encode(const Tensor& src);
  // Log-probabilities [B, V] after each row's prefix.
  Tensor step(const Tensor& src, const Tensor& memory, const std::vector<std::vector<int64_t>>& prefixes);
  void greedyBatch(const std::vector<const std::vector<int64_t>*>& sources, int64_t rows,
                   const DecodeOptions& o, std::vector<std::vector<int64_t>>& out,
                   std::vector<double>& scores);
  void beamBatch(const std::vector<const std::vector<int64_t>*>& sources, int64_t sentences,
                 const DecodeOptions& o, std::vector<std::vector<int64_t>>& out,
                 std::vector<double>& scores);
  void stepDone();  // counts a decoder step; the first one's end is the first token
  void forgetCompiled();
  Tensor takeBuffer(const TensorType& type);
  void giveBack(Cache& c);  // its cache buffers, for the next batch
  // Keeps rows `keep` of the batch (in that order) in `rows` rows, a smaller compiled shape:
  // the source, both caches (the self-attention ones up to position `written`) and the
  // next step's output buffers.
  void shrinkCache(Cache& c, const std::vector<int64_t>& keep, int64_t rows, int64_t written);
  // Runs f, adding its time less what compiling took to `seconds`.
  template <class F>
  auto timed(double& seconds, F&& f);
  // Runs exe on the parameters and `data` (moved in and back out, not copied).
  void run(runtime::Executable& exe, std::vector<std::pair<std::string, Tensor*>> data,
           std::vector<Tensor>& out);

  ModelSpec model_;
  std::map<std::string, Tensor> feed_;  // the parameters; a run's data moves in beside them
  runtime::ExecOptions exec_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<runtime::Executable>> encoders_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<runtime::Executable>> decoders_;
  std::map<std::tuple<std::string, int64_t, int64_t, int64_t>, std::unique_ptr<runtime::Executable>> graphs_;
  double compileSeconds_ = 0;
  DecodeStats stats_;
  std::chrono::steady_clock::time_point started_;
  double compiledBefore_ = 0;  // compileSeconds_ when the translate() call began
  bool decoding_ = false;      // inside translate()'s decoding loop
  bool quantize_ = false;
  std::vector<Tensor> spare_;  // cache buffers of finished batches
};

// The smallest of 16, 32, 64, ... that is at least n (source and prefix lengths).
int64_t lengthBucket(int64_t n);

}  // namespace tgc::train
