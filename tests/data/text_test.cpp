// UTF-8 checking, normalization and the two tokenizers.
#include "runtime/data/text.h"

#include <gtest/gtest.h>

namespace tgc::data {
namespace {

using Tokens = std::vector<std::string>;

TEST(Utf8, FindsTheFirstInvalidByte) {
  EXPECT_EQ(findInvalidUtf8("plain ascii"), std::string_view::npos);
  EXPECT_EQ(findInvalidUtf8("中文，好"), std::string_view::npos);
  EXPECT_EQ(findInvalidUtf8("\xF0\x9F\x98\x80"), std::string_view::npos);  // U+1F600
  EXPECT_EQ(findInvalidUtf8("ab\xFFz"), 2u);                                // never valid
  EXPECT_EQ(findInvalidUtf8("a\x80"), 1u);                                  // lone continuation
  EXPECT_EQ(findInvalidUtf8("\xC0\xAF"), 0u);                               // overlong '/'
  EXPECT_EQ(findInvalidUtf8("\xE0\x80\xAF"), 0u);                           // overlong
  EXPECT_EQ(findInvalidUtf8("x\xED\xA0\x80"), 1u);                          // surrogate D800
  EXPECT_EQ(findInvalidUtf8("\xF4\x90\x80\x80"), 0u);                       // above U+10FFFF
  EXPECT_EQ(findInvalidUtf8("中\xE4\xB8"), 3u);                             // cut short
}

TEST(Utf8, RoundTrips) {
  const std::string s = "a中\u00e9\U0001F600";
  const std::u32string cps = decodeUtf8(s);
  ASSERT_EQ(cps.size(), 4u);
  EXPECT_EQ(cps[1], U'中');
  EXPECT_EQ(cps[3], U'\U0001F600');
  EXPECT_EQ(encodeUtf8(cps), s);
}

TEST(Normalize, FullWidthFormsBecomeAscii) {
  EXPECT_EQ(normalizeText("你好，世界！"), "你好,世界!");
  EXPECT_EQ(normalizeText("真的吗？是：对；（好）。"), "真的吗?是:对;(好).");
  EXPECT_EQ(normalizeText("ＡＢＣ１２３ｘｙｚ"), "ABC123xyz");
  EXPECT_EQ(normalizeText("\xEF\xBB\xBFHi"), "Hi");              // byte-order mark
  EXPECT_EQ(normalizeText("  a\u3000\tb \r\n"), "a b");          // spaces collapse, trim
  EXPECT_EQ(normalizeText("\u201cTom\u2019s\u201d"), "\"Tom's\"");  // curly quotes
  EXPECT_EQ(normalizeText("汉字、保留"), "汉字、保留");           // CJK kept (、 too)
}

TEST(Tokenize, Characters) {
  EXPECT_EQ(tokenizeChars("我叫Tom."), (Tokens{"我", "叫", "T", "o", "m", "."}));
  EXPECT_EQ(tokenizeChars("a b"), (Tokens{"a", " ", "b"}));
  EXPECT_EQ(detokenizeChars(tokenizeChars("我叫 Tom.")), "我叫 Tom.");
}

TEST(Tokenize, Words) {
  EXPECT_EQ(tokenizeWords("Hi."), (Tokens{"Hi", "."}));
  EXPECT_EQ(tokenizeWords("I don't know, Tom!"),
            (Tokens{"I", "don't", "know", ",", "Tom", "!"}));
  EXPECT_EQ(tokenizeWords("forty-two"), (Tokens{"forty-two"}));
  EXPECT_EQ(tokenizeWords("It costs $3.50, or 1,000 yen."),
            (Tokens{"It", "costs", "$", "3.50", ",", "or", "1,000", "yen", "."}));
  EXPECT_EQ(tokenizeWords("\"Wait...\" - he said"),
            (Tokens{"\"", "Wait", ".", ".", ".", "\"", "-", "he", "said"}));
  EXPECT_EQ(tokenizeWords("'quoted'"), (Tokens{"'", "quoted", "'"}));
  EXPECT_EQ(tokenizeWords("café naïve"), (Tokens{"café", "naïve"}));
  EXPECT_EQ(tokenizeWords(""), Tokens{});
}

TEST(Tokenize, WordsDetokenize) {
  EXPECT_EQ(detokenizeWords({"hi", ",", "tom", "."}), "hi, tom.");
  EXPECT_EQ(detokenizeWords({"(", "yes", ")", "!"}), "(yes)!");
  EXPECT_EQ(detokenizeWords({"forty-two"}), "forty-two");
  EXPECT_EQ(detokenizeWords({}), "");
  for (const char* s : {"I don't know, Tom!", "It costs $ 3.50, or 1,000 yen."})
    EXPECT_EQ(detokenizeWords(tokenizeWords(s)), s);
}

TEST(Text, AsciiLower) { EXPECT_EQ(asciiLower("Tom IS Here, É"), "tom is here, É"); }

TEST(Text, PythonWhitespace) {
  for (char32_t c : {U' ', U'\t', U'\n', U'\x0b', U'\x1c', U'\u0085', U'\u00a0', U'\u2003',
                     U'\u3000'})
    EXPECT_TRUE(isUnicodeSpace(c)) << static_cast<uint32_t>(c);
  for (char32_t c : {U'a', U'\u200b', U'\ufeff', U'中'})
    EXPECT_FALSE(isUnicodeSpace(c)) << static_cast<uint32_t>(c);
}

}  // namespace
}  // namespace tgc::data
