#include "runtime/data/corpus.h"

#include <fmt/format.h>

#include "runtime/data/data_file.h"
#include "runtime/data/error.h"
#include "runtime/data/rng.h"
#include "runtime/data/text.h"

namespace tgc::data {

namespace {

std::string readFile(const std::string& path) { return readDataFile(path, "corpus"); }

std::vector<std::string_view> splitLines(std::string_view text, std::string_view name) {
  return splitUtf8Lines(text, name);
}

bool isBlank(std::string_view line) { return normalizeText(line).empty(); }

// Chinese as characters; English as the options say, but words where a SentencePiece model
// is still to be trained (corpusData retokenizes).
TokenizerKind tokenizerOf(Language lang, const CorpusOptions& o) {
  switch (lang) {
    case Language::zh: return TokenizerKind::chars;
    case Language::en:
      return o.englishTokenizer == TokenizerKind::chars ? TokenizerKind::chars
                                                         : TokenizerKind::words;
  }
  return TokenizerKind::words;
}

Language other(Language lang) { return lang == Language::zh ? Language::en : Language::zh; }

Vocab buildSide(const std::vector<TokenizedPair>& train, Language lang, bool source,
                const CorpusOptions& o, int64_t minCount, int64_t maxSize) {
  TokenCounts counts;
  for (const auto& p : train) counts.add(source ? p.src : p.tgt);
  const Vocab empty = emptyVocab(lang, o);
  return Vocab::build(empty.kind(), empty.lowercase(), counts, minCount, maxSize);
}

}  // namespace

std::vector<SentencePair> parseTsvCorpus(std::string_view text, std::string_view name) {
  std::vector<SentencePair> out;
  const auto lines = splitLines(text, name);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (isBlank(line)) continue;
    const size_t tab = line.find('\t');
    if (tab == std::string_view::npos)
      throw DataError(fmt::format("{}:{}: error: expected English<TAB>Chinese, found no tab",
                                  name, i + 1));
    const size_t tab2 = line.find('\t', tab + 1);
    const std::string_view zh =
        line.substr(tab + 1, tab2 == std::string_view::npos ? std::string_view::npos
                                                            : tab2 - tab - 1);
    out.push_back({normalizeText(line.substr(0, tab)), normalizeText(zh),
                   fmt::format("{}:{}", name, i + 1)});
  }
  return out;
}

std::vector<SentencePair> readTsvCorpus(const std::string& path) {
  auto pairs = parseTsvCorpus(readFile(path), path);
  if (pairs.empty()) throw DataError(fmt::format("{}: error: no sentence pairs in the file", path));
  return pairs;
}

std::vector<SentencePair> readAlignedCorpus(const std::string& enPath, const std::string& zhPath) {
  const std::string enText = readFile(enPath), zhText = readFile(zhPath);
  const auto en = splitLines(enText, enPath), zh = splitLines(zhText, zhPath);
  if (en.size() != zh.size())
    throw DataError(fmt::format("{}: error: {} lines, but {} has {}; the files must be "
                                "line-aligned",
                                zhPath, zh.size(), enPath, en.size()));
  if (en.empty()) throw DataError(fmt::format("{}: error: no lines in the file", enPath));
  std::vector<SentencePair> out;
  out.reserve(en.size());
  for (size_t i = 0; i < en.size(); ++i)
    out.push_back({normalizeText(en[i]), normalizeText(zh[i]),
                   fmt::format("{}:{}", zhPath, i + 1)});
  return out;
}

Vocab emptyVocab(Language lang, const CorpusOptions& o) {
  return Vocab(tokenizerOf(lang, o), lang == Language::en && o.lowercaseEnglish);
}

PreparedCorpus prepareCorpus(const std::vector<SentencePair>& pairs, const CorpusOptions& o) {
  const Vocab srcTok = emptyVocab(o.source, o), tgtTok = emptyVocab(other(o.source), o);
  PreparedCorpus out;
  for (const SentencePair& p : pairs) {
    const std::string& src = o.source == Language::zh ? p.zh : p.en;
    const std::string& tgt = o.source == Language::zh ? p.en : p.zh;
    TokenizedPair t;
    t.srcText = srcTok.lowercase() ? asciiLower(normalizeText(src)) : normalizeText(src);
    t.tgtText = tgtTok.lowercase() ? asciiLower(normalizeText(tgt)) : normalizeText(tgt);
    t.src = srcTok.tokenize(src);
    t.tgt = tgtTok.tokenize(tgt);
    t.where = p.where;
    if (t.src.empty() || t.tgt.empty()) {
      ++out.droppedEmpty;
      continue;
    }
    if (static_cast<int64_t>(t.src.size()) > o.maxSourceTokens ||
        static_cast<int64_t>(t.tgt.size()) > o.maxTargetTokens) {
      ++out.droppedLong;
      continue;
    }
    Rng side(mixSeed(o.seed, fnv1a(t.srcText)));
    (side.uniform() < o.validFraction ? out.valid : out.train).push_back(std::move(t));
  }
  return out;
}

Vocab buildSourceVocab(const std::vector<TokenizedPair>& train, const CorpusOptions& o,
                       int64_t minCount, int64_t maxSize) {
  return buildSide(train, o.source, true, o, minCount, maxSize);
}

Vocab buildTargetVocab(const std::vector<TokenizedPair>& train, const CorpusOptions& o,
                       int64_t minCount, int64_t maxSize) {
  return buildSide(train, other(o.source), false, o, minCount, maxSize);
}

std::vector<EncodedPair> encodePairs(const std::vector<TokenizedPair>& pairs, const Vocab& srcVocab,
                                     const Vocab& tgtVocab) {
  std::vector<EncodedPair> out;
  out.reserve(pairs.size());
  for (const auto& p : pairs) out.push_back({srcVocab.encode(p.src), tgtVocab.encode(p.tgt)});
  return out;
}

std::vector<TokenizedPair> tokenizeNumerals(const std::vector<NumeralExample>& examples) {
  std::vector<TokenizedPair> out;
  out.reserve(examples.size());
  for (const auto& e : examples)
    out.push_back({tokenizeChars(e.zh), tokenizeWords(e.en), e.zh, e.en,
                   fmt::format("numeral {}", e.number)});
  return out;
}

}  // namespace tgc::data
