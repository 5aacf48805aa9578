// What a training run is made of, in a form a checkpoint can store and a later command can
// rebuild: the model (file, preset, overrides) and the data (built-in task or corpus).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "frontend/frontend.h"
#include "runtime/data/dataset.h"

namespace tgc::train {

struct ModelSpec {
  std::string path;    // the .tg file, absolute
  std::string preset;  // may be empty
  // --set overrides in order; the vocabulary sizes are appended by the trainer.
  std::vector<std::pair<std::string, std::string>> sets;
  std::vector<std::string> libPaths;

  // Options compiling `graph` with the given dims (B, S, T); `extra` sets come last.
  ModelOptions options(const std::string& graph,
                       const std::vector<std::pair<std::string, int64_t>>& dims,
                       const std::vector<std::pair<std::string, std::string>>& extra = {}) const;
  std::string toJson() const;
  static ModelSpec fromJson(std::string_view text);
};

struct DataSpec {
  std::string kind = "numerals";  // numerals | tsv | aligned
  std::string path;               // tsv: the file; aligned: the English file
  std::string path2;              // aligned: the Chinese file
  std::string source = "zh";      // translate from this language (zh | en)
  std::string english = "words";  // English tokens: words | sentencepiece
  int64_t sentencePieceVocab = 8000;
  int64_t maxTokens = 64;         // corpus pairs with a longer side are dropped
  double validFraction = 0.05;    // corpora
  int64_t trainSize = 100'000;    // the built-in task's training examples
  uint64_t seed = 1;

  std::string toJson() const;
  static DataSpec fromJson(std::string_view text);
  // One line for logs: "built-in numerals" or "corpus cmn.txt (zh→en)".
  std::string describe() const;
};

// Reads or generates the data (deterministic in the spec).
data::TranslationData loadData(const DataSpec& spec);

// The split that evaluation uses by default: the built-in test split (1,000 held-out
// numbers) or a corpus's validation split.
const std::vector<data::TokenizedPair>& evalSplit(const data::TranslationData& d);

}  // namespace tgc::train
