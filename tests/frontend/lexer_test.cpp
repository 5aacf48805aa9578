#include <gtest/gtest.h>

#include "frontend/lexer.h"

namespace tgc::fe {
namespace {

std::vector<Tok> kinds(const std::string& s) {
  std::vector<Tok> r;
  for (const Token& t : lex(s, 0)) r.push_back(t.kind);
  return r;
}

TEST(LexerTest, KeywordsIdentifiersAndPunctuation) {
  auto t = lex("let x_1 = fn(a, b) @ c ** 2 // comment\n", 0);
  std::vector<Tok> want = {Tok::KwLet, Tok::Ident, Tok::Assign, Tok::KwFn, Tok::LParen,
                           Tok::Ident, Tok::Comma, Tok::Ident, Tok::RParen, Tok::At,
                           Tok::Ident, Tok::StarStar, Tok::Int, Tok::Newline, Tok::Eof};
  ASSERT_EQ(t.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(t[i].kind, want[i]) << i;
  EXPECT_EQ(t[1].text, "x_1");
  EXPECT_EQ(t[12].ival, 2);
}

TEST(LexerTest, OperatorsOfTwoCharacters) {
  EXPECT_EQ(kinds("== != <= >= < > .. . = *"),
            (std::vector<Tok>{Tok::EqEq, Tok::NotEq, Tok::Le, Tok::Ge, Tok::Lt, Tok::Gt,
                              Tok::DotDot, Tok::Dot, Tok::Assign, Tok::Star, Tok::Eof}));
}

TEST(LexerTest, NumbersAndRanges) {
  auto t = lex("0..12 1.5 2e3 7.25e-2 42", 0);
  EXPECT_EQ(t[0].kind, Tok::Int);
  EXPECT_EQ(t[1].kind, Tok::DotDot);
  EXPECT_EQ(t[2].ival, 12);
  EXPECT_EQ(t[3].kind, Tok::Float);
  EXPECT_DOUBLE_EQ(t[3].fval, 1.5);
  EXPECT_EQ(t[4].kind, Tok::Float);
  EXPECT_DOUBLE_EQ(t[4].fval, 2000.0);
  EXPECT_DOUBLE_EQ(t[5].fval, 0.0725);
  EXPECT_EQ(t[6].kind, Tok::Int);
}

TEST(LexerTest, StringsWithEscapes) {
  auto t = lex(R"("a\"b\\c\n")", 0);
  ASSERT_EQ(t[0].kind, Tok::String);
  EXPECT_EQ(t[0].text, "a\"b\\c\n");
}

TEST(LexerTest, NewlinesEndStatementsOnlyWhereAStatementCanEnd) {
  // After an identifier: a terminator. After an operator or inside parentheses: none.
  EXPECT_EQ(kinds("a\nb"), (std::vector<Tok>{Tok::Ident, Tok::Newline, Tok::Ident, Tok::Eof}));
  EXPECT_EQ(kinds("a +\nb"), (std::vector<Tok>{Tok::Ident, Tok::Plus, Tok::Ident, Tok::Eof}));
  EXPECT_EQ(kinds("f(a,\nb)\n"),
            (std::vector<Tok>{Tok::Ident, Tok::LParen, Tok::Ident, Tok::Comma, Tok::Ident,
                              Tok::RParen, Tok::Newline, Tok::Eof}));
  // Inside braces newlines count again, even within parentheses around them.
  EXPECT_EQ(kinds("{\nx\n}"),
            (std::vector<Tok>{Tok::LBrace, Tok::Ident, Tok::Newline, Tok::RBrace, Tok::Eof}));
  // Several blank lines and comment lines give one terminator.
  EXPECT_EQ(kinds("a # c\n\n// d\nb"), (std::vector<Tok>{Tok::Ident, Tok::Newline, Tok::Ident, Tok::Eof}));
}

TEST(LexerTest, LocationsAreLineAndByteColumn) {
  auto t = lex("let a = 1\n  b", 3);
  EXPECT_EQ(t[0].loc.file, 3);
  EXPECT_EQ(t[0].loc.line, 1);
  EXPECT_EQ(t[0].loc.col, 1);
  EXPECT_EQ(t[3].loc.col, 9);
  EXPECT_EQ(t[5].loc.line, 2);
  EXPECT_EQ(t[5].loc.col, 3);
}

TEST(LexerTest, BadInputBecomesErrorTokens) {
  struct Case {
    const char* src;
    const char* msg;
  } cases[] = {
      {"\"abc", "unterminated string"},
      {"$", "unexpected character '$'"},
      {"99999999999999999999", "integer '99999999999999999999' is out of range"},
      {"1e", "invalid number '1e'"},
      {"12ab", "invalid number '12ab'"},
      {"\xe4\xb8\x89", "unexpected non-ASCII character"},
      {"!x", "use 'not'"},
      {"\"a\\q\"", "unknown escape"},
      {"\x01", "control character 0x01"},
  };
  for (const auto& c : cases) {
    auto t = lex(c.src, 0);
    ASSERT_EQ(t[0].kind, Tok::Error) << c.src;
    EXPECT_NE(t[0].text.find(c.msg), std::string::npos) << c.src << ": " << t[0].text;
    EXPECT_EQ(t.back().kind, Tok::Eof);
  }
}

TEST(LexerTest, ArbitraryBytesNeverCrashAndEndWithEof) {
  std::string s;
  for (int i = 0; i < 256; ++i) s += static_cast<char>(i);
  auto t = lex(s, 0);
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(t.back().kind, Tok::Eof);
}

}  // namespace
}  // namespace tgc::fe
