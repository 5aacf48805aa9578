// SentencePiece vocabularies: trained by tgc, stored in the vocabulary JSON, refused when
// corrupt. Skipped (visibly) where tgc was built without libsentencepiece.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/data/dataset.h"
#include "runtime/data/error.h"
#include "runtime/data/rng.h"
#include "runtime/data/text.h"
#include "runtime/data/vocab.h"
#include "tests/data/tatoeba_path.h"

namespace tgc::data {
namespace {

#define REQUIRE_SENTENCEPIECE()                                                   \
  if (!Vocab::sentencePieceAvailable())                                           \
  GTEST_SKIP() << "built without SentencePiece (libsentencepiece-dev missing)"

std::vector<std::string> englishNumbers(int64_t from, int64_t count, int64_t step) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(englishNumber(from + i * step));
  return out;
}

TEST(SentencePiece, UnavailableSaysSo) {
  if (Vocab::sentencePieceAvailable()) GTEST_SKIP() << "SentencePiece is available";
  try {
    Vocab::trainSentencePiece({"a b c"}, false, 100);
    FAIL() << "trained without the library";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("built without SentencePiece"), std::string::npos);
  }
}

TEST(SentencePiece, TrainEncodeDecode) {
  REQUIRE_SENTENCEPIECE();
  const Vocab v = Vocab::trainSentencePiece(englishNumbers(1, 3000, 33331), true, 340);
  EXPECT_EQ(v.kind(), TokenizerKind::sentencepiece);
  EXPECT_LE(v.size(), 340);
  EXPECT_GT(v.size(), 4 + 256 + 20);  // specials, byte pieces, subwords
  EXPECT_EQ(v.token(Vocab::kPad), "<pad>");
  EXPECT_EQ(v.token(Vocab::kBos), "<bos>");
  EXPECT_EQ(v.token(Vocab::kEos), "<eos>");
  EXPECT_EQ(v.token(Vocab::kUnk), "<unk>");
  // Text it never saw comes back exactly (normalized and lowercased).
  for (const char* s : {"Forty-Two Million", "seven hundred eleven thousand", "nine"}) {
    const auto ids = v.encodeText(s);
    EXPECT_FALSE(ids.empty());
    for (int64_t id : ids) EXPECT_NE(id, Vocab::kUnk) << s;
    EXPECT_EQ(v.decode(ids), asciiLower(s));
  }
  // Training is deterministic.
  EXPECT_TRUE(v == Vocab::trainSentencePiece(englishNumbers(1, 3000, 33331), true, 340));
  // Characters it never saw fall back to bytes: no <unk>, exact text.
  const auto ids = v.encodeText("zéro; 中");
  for (int64_t id : ids) EXPECT_NE(id, Vocab::kUnk);
  EXPECT_EQ(v.decode(ids), "zéro; 中");
}

TEST(SentencePiece, JsonRoundTripAndCorruption) {
  REQUIRE_SENTENCEPIECE();
  const Vocab v = Vocab::trainSentencePiece(englishNumbers(5, 2000, 49999), false, 320);
  const std::string text = v.toJson();
  const Vocab back = Vocab::fromJson(text, "spm.json");
  EXPECT_TRUE(back == v);
  EXPECT_EQ(back.tokenize("eighty-one thousand two"), v.tokenize("eighty-one thousand two"));

  auto refused = [&](nlohmann::json j, const char* reason) {
    try {
      Vocab::fromJson(j.dump(), "spm.json");
      ADD_FAILURE() << "accepted; expected: " << reason;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  };
  const nlohmann::json good = nlohmann::json::parse(text);
  nlohmann::json j = good;
  j.erase("model");
  refused(j, "missing \"model\"");
  j = good;
  j["model"] = "not base64!";
  refused(j, "\"model\" is not base64");
  j = good;
  std::string model = j["model"];
  model.resize(model.size() / 2 / 4 * 4);  // cut short, still base64
  j["model"] = model;
  refused(j, "the SentencePiece model does not load");
  j = good;
  j["tokens"][5] = "something-else";
  refused(j, "differ from the SentencePiece model's pieces");
  j = good;
  j["tokenizer"] = "words";
  refused(j, "a \"model\" in a words vocabulary");
}

// Random damage to the model bytes is refused (or, when harmless, loads), never a crash.
TEST(SentencePiece, MutatedModels) {
  REQUIRE_SENTENCEPIECE();
  const Vocab v = Vocab::trainSentencePiece(englishNumbers(5, 500, 199999), false, 300);
  const nlohmann::json good = nlohmann::json::parse(v.toJson());
  const std::string model = good["model"];
  Rng rng(3);
  int refused = 0;
  for (int i = 0; i < 300; ++i) {
    nlohmann::json j = good;
    std::string m = model;
    // Replace a whole base64 group so the text stays base64 but the bytes change.
    const size_t at = static_cast<size_t>(rng.below(m.size() / 4 - 1)) * 4;
    for (size_t k = 0; k < 4; ++k) m[at + k] = "ABCDabcd0123+/xy"[rng.below(16)];
    j["model"] = m;
    try {
      Vocab::fromJson(j.dump(), "m.json");
    } catch (const DataError&) {
      ++refused;
    }
  }
  std::cout << "[ mutated  ] SentencePiece models: " << refused << " of 300 refused\n";
  EXPECT_GT(refused, 100);
}

// The real corpus with English subwords, where present.
TEST(SentencePiece, TatoebaSubwords) {
  REQUIRE_SENTENCEPIECE();
  const std::string path = tatoebaPath();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  CorpusOptions o;
  o.englishTokenizer = TokenizerKind::sentencepiece;
  o.sentencePieceVocab = 4000;
  const auto start = std::chrono::steady_clock::now();
  const TranslationData d = corpusData(readTsvCorpus(path), o);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "[ spm      ] " << d.summary << " (" << seconds << " s)\n";
  EXPECT_EQ(d.tgtVocab.kind(), TokenizerKind::sentencepiece);
  EXPECT_LE(d.tgtVocab.size(), 4000);
  EXPECT_EQ(d.srcVocab.kind(), TokenizerKind::chars);
  // Every validation sentence decodes back to its (normalized, lowercased) text, even with
  // characters training never had (";" in line 24118).
  for (const auto& p : d.valid)
    ASSERT_EQ(d.tgtVocab.decode(d.tgtVocab.encode(p.tgt)), p.tgtText) << p.where;
}

}  // namespace
}  // namespace tgc::data
