#include "runtime/data/dataset.h"

#include <fmt/format.h>

namespace tgc::data {

TranslationData numeralsData(const NumeralsOptions& o) {
  const NumeralsSplits s = makeNumeralsTask(o);
  TranslationData d;
  d.train = tokenizeNumerals(s.train);
  d.valid = tokenizeNumerals(s.valid);
  d.test = tokenizeNumerals(s.test);
  // The tokenizers numeralsData's pairs were made with: characters, and words as written.
  CorpusOptions co;
  co.lowercaseEnglish = false;
  d.srcVocab = buildSourceVocab(d.train, co);
  d.tgtVocab = buildTargetVocab(d.train, co);
  d.summary = fmt::format(
      "built-in numerals (seed {}): {} train, {} valid, {} test; vocabularies {} zh, {} en",
      o.seed, d.train.size(), d.valid.size(), d.test.size(), d.srcVocab.size(),
      d.tgtVocab.size());
  return d;
}

TranslationData corpusData(const std::vector<SentencePair>& pairs, const CorpusOptions& o,
                           const CorpusVocabOptions& v) {
  PreparedCorpus p = prepareCorpus(pairs, o);
  TranslationData d;
  d.srcVocab = buildSourceVocab(p.train, o, v.minCount, v.maxSrcVocab);
  d.tgtVocab = buildTargetVocab(p.train, o, v.minCount, v.maxTgtVocab);
  d.train = std::move(p.train);
  d.valid = std::move(p.valid);
  const char* dir = o.source == Language::zh ? "zh→en" : "en→zh";
  d.summary = fmt::format(
      "corpus {}: {} pairs, {} train, {} valid ({} empty and {} over-long dropped); "
      "vocabularies {} source, {} target",
      dir, pairs.size(), d.train.size(), d.valid.size(), p.droppedEmpty, p.droppedLong,
      d.srcVocab.size(), d.tgtVocab.size());
  return d;
}

}  // namespace tgc::data
