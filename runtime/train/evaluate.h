// Scoring a model on a split: decode every source, compare with the references.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/train/translator.h"

namespace tgc::train {

struct EvalResult {
  int64_t sentences = 0;
  double exactMatch = 0;  // 0..1
  double bleu = 0;        // sacreBLEU's corpus BLEU, 0..100
  double seconds = 0;     // decoding (compiles included)
  std::vector<std::string> hypotheses;  // in the order of the pairs
};

// The first `limit` pairs (0: all), decoded with `options`; references are pair.tgtText.
EvalResult evaluatePairs(Translator& translator, const data::TranslationData& d,
                         const std::vector<data::TokenizedPair>& pairs,
                         const DecodeOptions& options, int64_t limit = 0);

// Raw text (one sentence) → target text, through the source vocabulary's tokenizer; with
// `scores`, each translation's log-probability (Translator::translate). With `tokens`, the
// target tokens joined by spaces instead of the detokenized text (what another engine
// given the same vocabulary emits).
std::vector<std::string> translateTexts(Translator& translator, const data::Vocab& srcVocab,
                                        const data::Vocab& tgtVocab,
                                        const std::vector<std::string>& texts,
                                        const DecodeOptions& options,
                                        std::vector<double>* scores = nullptr, bool tokens = false);

}  // namespace tgc::train
