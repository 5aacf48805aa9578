// Fuzz target: the data readers. The first byte picks one; the rest is the input.
//   0: a vocabulary's JSON — it is refused with a DataError or round-trips through toJson.
//   1: a TSV corpus — refused with a DataError, or every pair prepares, encodes with the
//      vocabularies built from it and decodes back to its normalized text.
//   2: text — normalization is idempotent, tokens are non-empty without spaces, and BLEU of
//      a line against itself and another is a number in [0, 100] (13a and zh tokenizers).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/data/bleu.h"
#include "runtime/data/corpus.h"
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
    case 1: corpus(text); break;
    default: textChecks(text); break;
  }
  return 0;
}
