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
                       const std::vector<std::pair<std::string, int64_t>>& dims = {},
                       const std::vector<std::pair<std::string, std::string>>& extra = {}) const;
  std::string toJson() const;
  static ModelSpec fromJson(std::string_view text);
};

struct DataSpec {
  // Where the data comes from: "numerals" (the translation task's built-in data), "builtin"
  // (the built-in data of the lm and classification tasks), "tsv" (a file given with --data:
  // a Tatoeba corpus for translation, text for lm, label and text for classification, a
  // safetensors file or folder of shards for tensors), "aligned" (translation: two files).
  std::string kind = "numerals";
  std::string path;               // tsv: the file; aligned: the English file
  std::string path2;              // aligned: the Chinese file
  std::string source = "zh";      // translation: from this language (zh | en)
  std::string english = "words";  // translation: English tokens: words | sentencepiece
  int64_t sentencePieceVocab = 8000;
  int64_t maxTokens = 64;         // longer examples are dropped (translation: either side)
  double validFraction = 0.05;    // files
  int64_t trainSize = 100'000;    // the built-in data's training examples
  uint64_t seed = 1;
  // lm and classification: tokens as chars, words or sentencepiece ("": the task's default:
  // chars for lm, words for classification), lowercased (-1: the task's default).
  std::string tokens;
  int lowercase = -1;
  // lm: sequences are lines, or the text packed into blocks of blockLength tokens.
  std::string packing = "lines";
  int64_t blockLength = 64;
  // classification: which column of the TSV holds the label (first | last).
  std::string labelColumn = "first";

  std::string toJson() const;
  static DataSpec fromJson(std::string_view text);
  // One line for logs: "built-in numerals" or "corpus cmn.txt (zh→en)".
  std::string describe(const std::string& task = "translation") const;
  bool builtin() const { return kind == "numerals" || kind == "builtin"; }
};

// Reads or generates the data (deterministic in the spec).
data::TranslationData loadData(const DataSpec& spec);

// The split that evaluation uses by default: the built-in test split (1,000 held-out
// numbers) or a corpus's validation split.
const std::vector<data::TokenizedPair>& evalSplit(const data::TranslationData& d);

}  // namespace tgc::train
