// BLEU against sacreBLEU's own numbers, and exact match.
#include "runtime/data/bleu.h"

#include <gtest/gtest.h>

namespace tgc::data {
namespace {

using Lines = std::vector<std::string>;

struct Set {
  const char* name;
  Lines hyps;
  std::vector<Lines> refs;
};

// Must stay identical to SETS in bleu_expected.py.
const Set kSets[] = {
    {"perfect",
     {"the cat sat on the mat .", "forty-two million", "Hello, world!"},
     {{"the cat sat on the mat .", "forty-two million", "Hello, world!"}}},
    {"empty_hypotheses",
     {"", "one million two hundred thousand five", ""},
     {{"one million ten", "one million two hundred thousand five", "twenty"}}},
    {"all_empty", {"", ""}, {{"a b c d", "e f"}}},
    {"short_hypothesis",
     {"the cat", "a dog ran in the park today"},
     {{"the cat sat on the mat", "a dog ran in the big park today"}}},
    {"no_four_gram_match",
     {"the quick brown dog jumps", "one two three"},
     {{"the quick brown fox jumps", "one two four"}}},
    {"shorter_than_four", {"hi there", "yes"}, {{"hi there", "no"}}},
    {"punctuation_13a",
     {"It costs $3.50, doesn't it? (Tom's \"gift\") &amp; 1-2 e-mail",
      "Wait...she said:\"no!\" 10,000 x.y",
      "我有３本书，汤姆。 He\u00a0said\u3000hi  "},
     {{"It costs $ 3.50 , doesn't it ? (Tom's gift) & 1 - 2 e-mail",
       "Wait... she said: \"no!\" 10,000 x. y", "我有3本书,汤姆. He said hi"}}},
    {"case_matters", {"Hello World . How are you ?"}, {{"hello world . how are you ?"}}},
    {"two_references",
     {"the cat is on the mat", "there is a cat on the mat"},
     {{"the cat is on the mat", "a cat is on the mat"},
      {"there is a cat on the mat", "the mat has a cat on it"}}},
};

struct Expected {
  const char* name;
  double score;
  std::array<int64_t, 4> correct, total;
  int64_t sysLen, refLen;
};

// Produced by the real sacreBLEU 2.6.0 with its defaults (sacrebleu.corpus_bleu(hyps, refs):
// 13a, mixed case, exp smoothing): `python3 tests/data/bleu_expected.py`, pasted as printed.
const Expected kExpected[] = {
    {"perfect", 100.00000000000004, {13, 10, 7, 5}, {13, 10, 7, 5}, 13, 13},
    {"empty_hypotheses", 51.341711903259224, {6, 5, 4, 3}, {6, 5, 4, 3}, 6, 10},
    {"all_empty", 0.0, {0, 0, 0, 0}, {0, 0, 0, 0}, 0, 6},
    {"short_hypothesis", 40.85722856038897, {9, 6, 3, 2}, {9, 7, 5, 4}, 9, 14},
    {"no_four_gram_match", 39.12711450183219, {6, 3, 1, 0}, {8, 6, 4, 2}, 8, 8},
    {"shorter_than_four", 0.0, {2, 1, 0, 0}, {3, 1, 0, 0}, 3, 3},
    {"punctuation_13a", 81.35188595742241, {35, 30, 26, 22}, {38, 35, 32, 29}, 38, 39},
    {"case_matters", 26.269098944241588, {4, 2, 1, 0}, {7, 6, 5, 4}, 7, 7},
    {"two_references", 68.1561293416269, {12, 9, 6, 3}, {13, 11, 9, 7}, 13, 13},
};

TEST(Bleu, EqualsSacreBleu) {
  static_assert(std::size(kSets) == std::size(kExpected));
  for (size_t i = 0; i < std::size(kSets); ++i) {
    const Set& set = kSets[i];
    const Expected& want = kExpected[i];
    ASSERT_STREQ(set.name, want.name);
    SCOPED_TRACE(set.name);
    const BleuScore got = corpusBleu(set.hyps, set.refs);
    EXPECT_DOUBLE_EQ(got.score, want.score);
    EXPECT_EQ(got.correct, want.correct);
    EXPECT_EQ(got.total, want.total);
    EXPECT_EQ(got.sysLen, want.sysLen);
    EXPECT_EQ(got.refLen, want.refLen);
  }
}

// Also from bleu_expected.py (sacreBLEU's Tokenizer13a on the rstripped line).
TEST(Bleu, Tokenizer13a) {
  EXPECT_EQ(tokenize13a("It costs $3.50, doesn't it? (Tom's \"gift\") &amp; 1-2 e-mail"),
            "It costs $ 3.50 , doesn't it ? ( Tom's \" gift \" ) & 1 - 2 e-mail");
  EXPECT_EQ(tokenize13a("Wait...she said:\"no!\" 10,000 x.y"),
            "Wait . . . she said : \" no ! \" 10,000 x . y");
  EXPECT_EQ(tokenize13a("我有３本书，汤姆。 He\u00a0said\u3000hi"), "我有３本书，汤姆。 He said hi");
  EXPECT_EQ(tokenize13a("我有3本书,汤姆. He said hi"), "我有3本书 , 汤姆 . He said hi");
  EXPECT_EQ(tokenize13a(""), "");
  EXPECT_EQ(tokenize13a("a<skipped>b &lt;tag&gt; &amp;quot; x-\ny\nz"), "ab < tag > & quot ; xy z");
}

// Chinese targets with sacreBLEU's zh tokenizer; from bleu_expected.py (ZH_SETS) like above.
const Set kZhSets[] = {
    {"zh_sentences",
     {"我有三本书。", "他昨天去了北京，见了朋友。", "你好"},
     {{"我有3本书。", "他昨天去北京见朋友了。", "你好！"}}},
    {"zh_mixed_script",
     {"汤姆(Tom)说：\u201c不行。\u201d 2020年", "这是☃雪人\u2014好玩"},
     {{"汤姆（Tom）说：\u201c不行！\u201d 2020 年", "这是雪人——好玩"}}},
};
const Expected kZhExpected[] = {
    {"zh_sentences", 28.495577603220287, {18, 9, 3, 1}, {21, 18, 15, 13}, 21, 20},
    {"zh_mixed_script", 37.81790427652475, {18, 12, 6, 2}, {22, 20, 18, 16}, 22, 22},
};

TEST(Bleu, ZhTokenizerEqualsSacreBleu) {
  static_assert(std::size(kZhSets) == std::size(kZhExpected));
  for (size_t i = 0; i < std::size(kZhSets); ++i) {
    const Set& set = kZhSets[i];
    const Expected& want = kZhExpected[i];
    ASSERT_STREQ(set.name, want.name);
    SCOPED_TRACE(set.name);
    const BleuScore got = corpusBleu(set.hyps, set.refs, BleuTokenizer::zh);
    EXPECT_DOUBLE_EQ(got.score, want.score);
    EXPECT_EQ(got.correct, want.correct);
    EXPECT_EQ(got.total, want.total);
    EXPECT_EQ(got.sysLen, want.sysLen);
    EXPECT_EQ(got.refLen, want.refLen);
  }
  EXPECT_EQ(tokenizeZh("汤姆(Tom)说：\u201c不行。\u201d 2020年"),
            "汤 姆 ( Tom ) 说 ： \u201c 不 行 。 \u201d 2020 年");
  // sacreBLEU's table quirks: U+2A6D counts as Chinese, U+2A6E and U+20000 do not.
  EXPECT_EQ(tokenizeZh("\u2000a\u2001b\u2a6d\u2a6e c\U00020000d"),
            "a b \u2a6d \u2a6e c\U00020000d");
}

TEST(Bleu, RefusesMismatchedStreams) {
  EXPECT_THROW(corpusBleu(Lines{"a", "b"}, Lines{"a"}), std::invalid_argument);
  EXPECT_THROW(corpusBleu(Lines{"a"}, std::vector<Lines>{}), std::invalid_argument);
}

TEST(ExactMatch, Fraction) {
  EXPECT_DOUBLE_EQ(exactMatch({"one", "two", "three", "four"}, {"one", "two", "tree", "four "}),
                   0.5);
  EXPECT_DOUBLE_EQ(exactMatch({}, {}), 0.0);
  EXPECT_THROW(exactMatch({"a"}, {}), std::invalid_argument);
}

}  // namespace
}  // namespace tgc::data
