// The model language's tokens. Newlines end statements Go-style: a newline becomes a
// statement terminator when the line's last token can end a statement and we are not
// inside ( ) or [ ].
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/ast.h"

namespace tgc::fe {

enum class Tok : uint8_t {
  Eof, Newline, Ident, Int, Float, String, Error,
  // keywords
  KwLet, KwFn, KwModule, KwGraph, KwParam, KwConfig, KwPreset, KwDim, KwImport, KwIf,
  KwElse, KwFor, KwIn, KwReturn, KwOutput, KwTrue, KwFalse, KwAnd, KwOr, KwNot,
  // punctuation
  LParen, RParen, LBracket, RBracket, LBrace, RBrace, Comma, Colon, Semi, Dot, DotDot,
  Assign, EqEq, NotEq, Lt, Le, Gt, Ge, Plus, Minus, Star, Slash, Percent, StarStar, At,
};

// "identifier", "'let'", "','": how messages name a token kind.
std::string tokName(Tok t);

struct Token {
  Tok kind = Tok::Eof;
  Loc loc;
  std::string text;  // identifier, string contents, or the error message for Tok::Error
  int64_t ival = 0;
  double fval = 0;
};

// Splits a whole file; the last token is Eof. Bad characters, unterminated strings and
// numbers out of range become Tok::Error tokens carrying their message.
std::vector<Token> lex(std::string_view text, int file);

}  // namespace tgc::fe
