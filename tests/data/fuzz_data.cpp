// Fuzz target: the data readers. The first byte picks one; the rest is the input.
//   0: a vocabulary's JSON — it is refused with a DataError or round-trips through toJson.
//   1: a TSV corpus — refused with a DataError, or every pair prepares, encodes with the
//      vocabularies built from it and decodes back to its normalized text. The same bytes as
//      a classification TSV (either column order) and as language-modelling text: refused
//      with a DataError, or every example and line encodes and decodes back (characters),
//      and blocks cover the text's stream exactly once.
//   2: text — normalization is idempotent, tokens are non-empty without spaces, and BLEU of
//      a line against itself and another is a number in [0, 100] (13a and zh tokenizers).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/data/bleu.h"
#include "runtime/data/classify_data.h"
#include "runtime/data/corpus.h"
#include "runtime/data/lm_data.h"
#include "runtime/data/error.h"
#include "runtime/data/text.h"
#include "runtime/data/vocab.h"

namespace {

using namespace tgc::data;

[[noreturn]] void fail(const char* what, std::string_view detail) {
  std::fprintf(stderr, "fuzz_data: %s: %.*s\n", what, static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

void vocabulary(std::string_view text) {
  Vocab v;
  try {
    v = Vocab::fromJson(text, "fuzz.json");
  } catch (const DataError&) {
    return;
  }
  if (!(Vocab::fromJson(v.toJson(), "again") == v)) fail("vocabulary round trip", text);
}

void corpus(std::string_view text) {
  std::vector<SentencePair> pairs;
  try {
    pairs = parseTsvCorpus(text, "fuzz.tsv");
  } catch (const DataError&) {
    return;
  }
  for (Language source : {Language::zh, Language::en}) {
    CorpusOptions o;
    o.source = source;
    o.validFraction = 0;
    const PreparedCorpus p = prepareCorpus(pairs, o);
    const Vocab src = buildSourceVocab(p.train, o), tgt = buildTargetVocab(p.train, o);
    const auto encoded = encodePairs(p.train, src, tgt);
    for (size_t i = 0; i < encoded.size(); ++i) {
      // Characters decode exactly; words up to the spaces detokenization chooses.
      const std::string back = (source == Language::zh ? src : tgt)
                                   .decode(source == Language::zh ? encoded[i].src
                                                                  : encoded[i].tgt);
      const std::string& want = source == Language::zh ? p.train[i].srcText : p.train[i].tgtText;
      if (back != want) fail("characters do not decode back", want);
    }
  }
}

void labeledText(std::string_view text) {
  for (LabelColumn column : {LabelColumn::first, LabelColumn::last}) {
    std::vector<LabeledText> examples;
    try {
      examples = parseClassifyTsv(text, "fuzz.tsv", column);
    } catch (const DataError&) {
      continue;
    }
    if (examples.empty()) continue;
    ClassifyOptions o;
    o.tokenizer = TokenizerKind::chars;
    o.lowercase = false;
    o.maxTokens = 1 << 30;
    o.validFraction = 0;
    const ClassifyData d = classifyData(examples, o);  // no error: every text has a token
    if (d.train.size() != examples.size()) fail("classification examples lost", text);
    for (size_t i = 0; i < examples.size(); ++i) {
      if (d.vocab.decode(d.train[i].ids) != examples[i].text)
        fail("a classification text does not decode back", examples[i].text);
      if (d.labels.at(static_cast<size_t>(d.train[i].label)) != examples[i].label)
        fail("a label does not map back", examples[i].label);
    }
  }
}

void lmText(std::string_view text) {
  std::vector<std::string> lines;
  try {
    lines = parseTextLines(text, "fuzz.txt");
  } catch (const DataError&) {
    return;
  }
  LmOptions o;
  o.maxTokens = 1 << 30;
  o.validFraction = 0;
  const LmData d = lmData(lines, o);
  if (d.train.size() != lines.size()) fail("lm lines lost", text);
  int64_t targets = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (d.vocab.decode(d.train[i]) != lines[i]) fail("a line does not decode back", lines[i]);
    targets += static_cast<int64_t>(d.train[i].size()) - 1;
  }
  o.packing = LmOptions::Packing::blocks;
  o.blockLength = 7;
  o.validFraction = 0.3;
  const LmData b = lmData(lines, o);
  int64_t blockTargets = 0;
  for (const auto* split : {&b.train, &b.valid})
    for (const auto& block : *split) blockTargets += static_cast<int64_t>(block.size()) - 1;
  if (blockTargets != targets) fail("blocks do not cover the text once", text);
}

void textChecks(std::string_view text) {
  if (findInvalidUtf8(text) != std::string_view::npos) return;
  const std::string n = normalizeText(text);
  if (normalizeText(n) != n) fail("normalization is not idempotent", text);
  for (const auto& t : tokenizeWords(n))
    if (t.empty() || t.find(' ') != std::string::npos) fail("bad word token", t);
  const size_t cut = text.size() / 2;
  const std::vector<std::string> hyps = {std::string(text.substr(0, cut)), std::string(text)};
  const std::vector<std::string> refs = {std::string(text), std::string(text)};
  for (BleuTokenizer tok : {BleuTokenizer::v13a, BleuTokenizer::zh}) {
    const double score = corpusBleu(hyps, refs, tok).score;
    if (!(score >= 0 && score <= 100 + 1e-9)) fail("BLEU out of range", text);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: vocabulary(text); break;
    case 1:
      corpus(text);
      labeledText(text);
      lmText(text);
      break;
    default: textChecks(text); break;
  }
  return 0;
}
