#include "runtime/train/evaluate.h"

#include <algorithm>
#include <chrono>

#include "runtime/data/bleu.h"

namespace tgc::train {

EvalResult evaluatePairs(Translator& translator, const data::TranslationData& d,
                         const std::vector<data::TokenizedPair>& pairs,
                         const DecodeOptions& options, int64_t limit) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = limit > 0 ? std::min(pairs.size(), static_cast<size_t>(limit)) : pairs.size();
  std::vector<std::vector<int64_t>> sources;
  std::vector<std::string> refs;
  for (size_t i = 0; i < n; ++i) {
    sources.push_back(d.srcVocab.encode(pairs[i].src));
    refs.push_back(pairs[i].tgtText);
  }
  EvalResult r;
  r.sentences = static_cast<int64_t>(n);
  for (const auto& ids : translator.translate(sources, options))
    r.hypotheses.push_back(d.tgtVocab.decode(ids));
  if (n > 0) {
    r.exactMatch = data::exactMatch(r.hypotheses, refs);
    r.bleu = data::corpusBleu(r.hypotheses, refs).score;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::vector<std::string> translateTexts(Translator& translator, const data::Vocab& srcVocab,
                                        const data::Vocab& tgtVocab,
                                        const std::vector<std::string>& texts,
                                        const DecodeOptions& options) {
  std::vector<std::vector<int64_t>> sources;
  for (const std::string& t : texts) sources.push_back(srcVocab.encodeText(t));
  std::vector<std::string> out;
  for (const auto& ids : translator.translate(sources, options)) out.push_back(tgtVocab.decode(ids));
  return out;
}

}  // namespace tgc::train
