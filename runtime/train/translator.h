// Greedy and beam-search decoding with a trained model, compiled for the CPU.
//
// The encoder runs once per sentence (graph `encode`, one executable per (B, S)); each
// decoding step runs graph `decode_at` of models/transformer.tg on the prefixes padded up to
// a length bucket T (16, 32, 64, ...), so a handful of compiled shapes serve every prefix
// length. Sentences are decoded in batches of up to `batchSize` rows, sorted by length.
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

struct DecodeOptions {
  int beam = 1;                // 1: greedy
  double lengthPenalty = 0.6;  // beam: scores divided by ((5 + len) / 6)^alpha (GNMT)
  int64_t maxLen = 0;          // tokens generated at most; 0: 2 * source length + 10, capped
  int64_t lengthCap = 0;       // by this when > 0 (from the longest training target)
  int64_t batchSize = 64;      // rows per run (beam: sentences x beam)
};

class Translator {
 public:
  // `model` must carry the vocabulary sizes among its sets; `params` every parameter.
  Translator(ModelSpec model, std::map<std::string, Tensor> params,
             runtime::ExecOptions exec = runtime::ExecOptions::fromEnv());
  ~Translator();

  // New parameter values (the trainer's, before a validation).
  void setParams(std::map<std::string, Tensor> params) { params_ = std::move(params); }

  // Target ids of each source (without bos or eos).
  std::vector<std::vector<int64_t>> translate(const std::vector<std::vector<int64_t>>& sources,
                                              const DecodeOptions& options = {});

  double compileSeconds() const { return compileSeconds_; }
  int compiledShapes() const { return static_cast<int>(encoders_.size() + decoders_.size()); }

 private:
  runtime::Executable& encoder(int64_t B, int64_t S);
  runtime::Executable& decoder(int64_t B, int64_t S, int64_t T);
  Tensor encode(const Tensor& src);
  // Log-probabilities [B, V] after each row's prefix.
  Tensor step(const Tensor& src, const Tensor& memory, const std::vector<std::vector<int64_t>>& prefixes);
  void greedyBatch(const std::vector<const std::vector<int64_t>*>& sources, int64_t rows,
                   const DecodeOptions& o, std::vector<std::vector<int64_t>>& out);
  void beamBatch(const std::vector<const std::vector<int64_t>*>& sources, int64_t sentences,
                 const DecodeOptions& o, std::vector<std::vector<int64_t>>& out);
  std::map<std::string, Tensor> inputs(std::map<std::string, Tensor> data) const;

  ModelSpec model_;
  std::map<std::string, Tensor> params_;
  runtime::ExecOptions exec_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<runtime::Executable>> encoders_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<runtime::Executable>> decoders_;
  double compileSeconds_ = 0;
};

// The smallest of 16, 32, 64, ... that is at least n (source and prefix lengths).
int64_t lengthBucket(int64_t n);

}  // namespace tgc::train
