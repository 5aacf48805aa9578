// A translation data set ready for training: tokenized splits and the two vocabularies, for
// the built-in numerals task or a parallel corpus. Hypotheses are compared with
// `pair.tgtText` (exact match for the built-in task, BLEU for corpora) after
// `tgtVocab.decode(ids)`.
#pragma once

#include <string>
#include <vector>

#include "runtime/data/batching.h"
#include "runtime/data/corpus.h"
#include "runtime/data/numerals.h"
#include "runtime/data/vocab.h"

namespace tgc::data {

struct TranslationData {
  Vocab srcVocab, tgtVocab;
  std::vector<TokenizedPair> train, valid, test;  // test: the built-in task only
  std::string summary;  // one line for logs: sizes and vocabularies
};

// The built-in task; vocabularies from its training split (16 characters, ~100 words).
TranslationData numeralsData(const NumeralsOptions& options);

struct CorpusVocabOptions {
  int64_t minCount = 1;      // rarer tokens become <unk>
  int64_t maxSrcVocab = 0;   // 0: no limit
  int64_t maxTgtVocab = 0;
};

// A corpus read by readTsvCorpus or readAlignedCorpus; vocabularies from its training split.
// With options.englishTokenizer == sentencepiece the English side is retokenized into the
// subwords of a model trained on the training split, and length-filtered again.
TranslationData corpusData(const std::vector<SentencePair>& pairs, const CorpusOptions& options,
                           const CorpusVocabOptions& vocab = {});

// Token ids of a split, for a Batcher.
inline std::vector<EncodedPair> encodeSplit(const TranslationData& d,
                                            const std::vector<TokenizedPair>& split) {
  return encodePairs(split, d.srcVocab, d.tgtVocab);
}

}  // namespace tgc::data
