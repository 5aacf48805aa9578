// Vocabularies: building, encoding and decoding, and refusing corrupt JSON.
#include "runtime/data/vocab.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "runtime/data/error.h"

namespace tgc::data {
namespace {

using Tokens = std::vector<std::string>;

Vocab wordsVocab() {
  return Vocab::build(TokenizerKind::words, true,
                      {{"the", "cat", "."}, {"the", "dog", "."}, {"the", "end"}});
}

TEST(Vocab, SpecialIds) {
  Vocab v;
  EXPECT_EQ(v.size(), 4);
  EXPECT_EQ(Vocab::kPad, 0);
  EXPECT_EQ(v.token(Vocab::kPad), "<pad>");
  EXPECT_EQ(v.token(Vocab::kBos), "<bos>");
  EXPECT_EQ(v.token(Vocab::kEos), "<eos>");
  EXPECT_EQ(v.token(Vocab::kUnk), "<unk>");
  EXPECT_EQ(v.id("anything"), Vocab::kUnk);
  EXPECT_THROW(v.token(4), std::out_of_range);
}

TEST(Vocab, BuildOrdersByFrequencyThenBytes) {
  const Vocab v = wordsVocab();
  // the ×3, . ×2, then cat dog end in byte order.
  ASSERT_EQ(v.size(), 9);
  EXPECT_EQ(v.token(4), "the");
  EXPECT_EQ(v.token(5), ".");
  EXPECT_EQ(v.token(6), "cat");
  EXPECT_EQ(v.token(7), "dog");
  EXPECT_EQ(v.token(8), "end");

  const Vocab frequent = Vocab::build(TokenizerKind::words, false,
                                      {{"a", "b", "a"}, {"a", "c", "b"}}, /*minCount=*/2);
  EXPECT_EQ(frequent.size(), 6);
  const Vocab capped = Vocab::build(TokenizerKind::words, false, {{"a", "b", "a"}}, 1, 5);
  EXPECT_EQ(capped.size(), 5);
  EXPECT_EQ(capped.token(4), "a");
}

TEST(Vocab, EncodeDecodeText) {
  const Vocab v = wordsVocab();
  EXPECT_EQ(v.tokenize("The CAT."), (Tokens{"the", "cat", "."}));
  const auto ids = v.encodeText("The bird.");
  EXPECT_EQ(ids, (std::vector<int64_t>{4, Vocab::kUnk, 5}));
  // Decoding skips pad and bos and stops at eos.
  const std::vector<int64_t> out = {Vocab::kBos, 4, 7, 5, Vocab::kEos, 6, Vocab::kPad};
  EXPECT_EQ(v.decodeTokens(out), (Tokens{"the", "dog", "."}));
  EXPECT_EQ(v.decode(out), "the dog.");

  const Vocab zh = Vocab::build(TokenizerKind::chars, false, {{"三", "千", "零", "五"}});
  EXPECT_EQ(zh.tokenize("三千，零五"), (Tokens{"三", "千", ",", "零", "五"}));
  EXPECT_EQ(zh.decode(zh.encodeText("五千零三")), "五千零三");
}

TEST(Vocab, JsonRoundTrip) {
  const Vocab v = wordsVocab();
  const Vocab back = Vocab::fromJson(v.toJson());
  EXPECT_TRUE(back == v);
  EXPECT_EQ(back.id("dog"), 7);
  EXPECT_TRUE(back.lowercase());

  const auto path = std::filesystem::temp_directory_path() /
                    ("tgc_vocab_test_" + std::to_string(::getpid()) + ".json");
  const Vocab zh = Vocab::build(TokenizerKind::chars, false, {{"中", "文", " ", "。"}});
  zh.save(path.string());
  EXPECT_TRUE(Vocab::load(path.string()) == zh);
  std::filesystem::remove(path);
  EXPECT_THROW(Vocab::load(path.string()), DataError);
}

// Each corruption is refused with its reason in the message.
TEST(Vocab, RefusesCorruptJson) {
  const std::string good = wordsVocab().toJson();
  struct Case {
    std::string text;
    const char* reason;
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const auto at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  const Case cases[] = {
      {good.substr(0, good.size() / 2), "not JSON"},
      {"[1, 2]", "not a JSON object"},
      {replaced("\"tgc-vocab\"", "\"other\""), "\"format\" is not \"tgc-vocab\""},
      {replaced("\"version\": 1", "\"version\": 9"), "unsupported \"version\" 9"},
      {replaced("\"words\"", "\"bpe\""), "unknown \"tokenizer\" \"bpe\""},
      {replaced("\"lowercase\": true", "\"lowercase\": 1"), "\"lowercase\" is not true or false"},
      {replaced("\"<eos>\"", "\"<end>\""), "token 2 is \"<end>\", expected \"<eos>\""},
      {replaced("\"dog\"", "\"cat\""), "token 7 (\"cat\") repeats id 6"},
      {replaced("\"dog\"", "\"\""), "token 7 is empty"},
      {replaced("\"dog\"", "7"), "token 7 is not a string"},
      {replaced("\"tokens\"", "\"words\""), "missing \"tokens\""},
      {replaced("\"dog\"", "\"d\xFFg\""), "not JSON"},  // invalid UTF-8
  };
  for (const Case& c : cases) {
    try {
      Vocab::fromJson(c.text, "v.json");
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const DataError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("v.json: error: invalid vocabulary: ", 0), 0u) << what;
      EXPECT_NE(what.find(c.reason), std::string::npos) << what << "\nexpected: " << c.reason;
    }
  }
}

}  // namespace
}  // namespace tgc::data
