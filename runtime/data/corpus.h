// Parallel corpora: Tatoeba-style TSV and line-aligned file pairs, Chinese ↔ English.
//
// Reading checks every line is UTF-8 (an error names file:line:column), normalizes it
// (normalizeText) and keeps where each pair came from. Preparing tokenizes (Chinese as
// characters, English as words), drops empty and over-long pairs, and splits off a
// validation set by a seeded hash of the source sentence, so all translations of one
// sentence fall on the same side and the split does not depend on the file's order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/data/numerals.h"
#include "runtime/data/vocab.h"

namespace tgc::data {

enum class Language { zh, en };

struct SentencePair {
  std::string en, zh;  // normalized
  std::string where;   // "file:line"
};

// `English<TAB>Chinese[<TAB>anything...]` per line (tatoeba.org's cmn.txt); blank lines are
// skipped; a line without a tab is an error, and so is a file without a pair.
std::vector<SentencePair> readTsvCorpus(const std::string& path);
// Line i of enPath translates line i of zhPath; both must have the same number of lines.
std::vector<SentencePair> readAlignedCorpus(const std::string& enPath, const std::string& zhPath);
// The same for text already in memory; `name` stands for the file in messages.
std::vector<SentencePair> parseTsvCorpus(std::string_view text, std::string_view name);

struct CorpusOptions {
  Language source = Language::zh;  // translate from this language into the other
  bool lowercaseEnglish = true;
  // English as words, characters, or SentencePiece subwords (corpusData trains the model on
  // the training split's English; prepareCorpus itself splits words then).
  TokenizerKind englishTokenizer = TokenizerKind::words;
  int64_t sentencePieceVocab = 8000;
  int64_t maxSourceTokens = 64;  // longer pairs are dropped
  int64_t maxTargetTokens = 64;
  double validFraction = 0.05;
  uint64_t seed = 1;
};

// One pair tokenized, in translation direction.
struct TokenizedPair {
  std::vector<std::string> src, tgt;
  std::string srcText, tgtText;  // normalized (and lowercased where the tokenizer is)
  std::string where;
};

struct PreparedCorpus {
  std::vector<TokenizedPair> train, valid;
  int64_t droppedEmpty = 0, droppedLong = 0;
};

// The tokenizer-only vocabulary (no tokens yet) of a language under these options.
Vocab emptyVocab(Language lang, const CorpusOptions& options);

PreparedCorpus prepareCorpus(const std::vector<SentencePair>& pairs, const CorpusOptions& options);

// Token ids of a pair, without bos or eos (the batcher adds them).
struct EncodedPair {
  std::vector<int64_t> src, tgt;
};

// Vocabularies of the training pairs' source and target sides (Vocab::build's minCount and
// maxSize), with the tokenizers `options` gives each language.
Vocab buildSourceVocab(const std::vector<TokenizedPair>& train, const CorpusOptions& options,
                       int64_t minCount = 1, int64_t maxSize = 0);
Vocab buildTargetVocab(const std::vector<TokenizedPair>& train, const CorpusOptions& options,
                       int64_t minCount = 1, int64_t maxSize = 0);

std::vector<EncodedPair> encodePairs(const std::vector<TokenizedPair>& pairs, const Vocab& srcVocab,
                                     const Vocab& tgtVocab);

// The built-in task in the same form (Chinese characters → English words).
std::vector<TokenizedPair> tokenizeNumerals(const std::vector<NumeralExample>& examples);

}  // namespace tgc::data
