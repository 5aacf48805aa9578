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

namespace {

// Replaces the English side's words by the subwords of a SentencePiece model trained on the
// training split's English, dropping pairs that become longer than the limit.
Vocab toSentencePiece(PreparedCorpus& p, const CorpusOptions& o) {
  const bool englishIsSource = o.source == Language::en;
  std::vector<std::string> texts;
  for (const auto& t : p.train) texts.push_back(englishIsSource ? t.srcText : t.tgtText);
  Vocab spm = Vocab::trainSentencePiece(texts, o.lowercaseEnglish, o.sentencePieceVocab);
  const int64_t limit = englishIsSource ? o.maxSourceTokens : o.maxTargetTokens;
  for (auto* split : {&p.train, &p.valid}) {
    std::vector<TokenizedPair> kept;
    for (auto& t : *split) {
      auto& side = englishIsSource ? t.src : t.tgt;
      side = spm.tokenize(englishIsSource ? t.srcText : t.tgtText);
      if (static_cast<int64_t>(side.size()) > limit)
        ++p.droppedLong;
      else
        kept.push_back(std::move(t));
    }
    *split = std::move(kept);
  }
  return spm;
}

}  // namespace

TranslationData corpusData(const std::vector<SentencePair>& pairs, const CorpusOptions& o,
                           const CorpusVocabOptions& v) {
  PreparedCorpus p = prepareCorpus(pairs, o);
  TranslationData d;
  if (o.englishTokenizer == TokenizerKind::sentencepiece) {
    Vocab spm = toSentencePiece(p, o);
    if (o.source == Language::en) {
      d.srcVocab = std::move(spm);
      d.tgtVocab = buildTargetVocab(p.train, o, v.minCount, v.maxTgtVocab);
    } else {
      d.srcVocab = buildSourceVocab(p.train, o, v.minCount, v.maxSrcVocab);
      d.tgtVocab = std::move(spm);
    }
  } else {
    d.srcVocab = buildSourceVocab(p.train, o, v.minCount, v.maxSrcVocab);
    d.tgtVocab = buildTargetVocab(p.train, o, v.minCount, v.maxTgtVocab);
  }
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
