#include "runtime/train/evaluate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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
                                        const DecodeOptions& options, std::vector<double>* scores,
                                        bool tokens) {
  // A blank line translates to a blank line (the model is not asked what nothing means).
  auto blank = [](const std::string& t) { return t.find_first_not_of(" \t\r\n") == std::string::npos; };
  std::vector<std::vector<int64_t>> sources;
  std::vector<size_t> from;  // texts index of each source
  for (size_t i = 0; i < texts.size(); ++i)
    if (!blank(texts[i])) {
      sources.push_back(srcVocab.encodeText(texts[i]));
      from.push_back(i);
    }
  std::vector<double> got;
  const auto ids = translator.translate(sources, options, scores ? &got : nullptr);
  std::vector<std::string> out(texts.size());
  if (scores) scores->assign(texts.size(), 0.0);
  for (size_t k = 0; k < ids.size(); ++k) {
    out[from[k]] = tokens ? fmt::format("{}", fmt::join(tgtVocab.decodeTokens(ids[k]), " "))
                          : tgtVocab.decode(ids[k]);
    if (scores) (*scores)[from[k]] = got[k];
  }
  return out;
}

}  // namespace tgc::train
