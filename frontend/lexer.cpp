#include "frontend/lexer.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <unordered_map>

namespace tgc::fe {
namespace {

const std::unordered_map<std::string_view, Tok>& keywords() {
  static const std::unordered_map<std::string_view, Tok> k = {
      {"let", Tok::KwLet},       {"fn", Tok::KwFn},         {"module", Tok::KwModule},
      {"graph", Tok::KwGraph},   {"param", Tok::KwParam},   {"config", Tok::KwConfig},
      {"preset", Tok::KwPreset}, {"dim", Tok::KwDim},       {"import", Tok::KwImport},
      {"if", Tok::KwIf},         {"else", Tok::KwElse},     {"for", Tok::KwFor},
      {"in", Tok::KwIn},         {"return", Tok::KwReturn}, {"output", Tok::KwOutput},
      {"true", Tok::KwTrue},     {"false", Tok::KwFalse},   {"and", Tok::KwAnd},
      {"or", Tok::KwOr},         {"not", Tok::KwNot},
  };
  return k;
}

bool isIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

// Tokens after which a newline ends the statement.
bool endsStatement(Tok t) {
  switch (t) {
    case Tok::Ident: case Tok::Int: case Tok::Float: case Tok::String: case Tok::KwTrue:
    case Tok::KwFalse: case Tok::RParen: case Tok::RBracket: case Tok::RBrace:
    case Tok::KwReturn:
      return true;
    default:
      return false;
  }
}

// Keywords that only ever begin a statement or an item.
bool startsStatement(Tok t) {
  switch (t) {
    case Tok::KwLet: case Tok::KwReturn: case Tok::KwFn: case Tok::KwModule: case Tok::KwGraph:
    case Tok::KwParam: case Tok::KwOutput: case Tok::KwConfig: case Tok::KwPreset: case Tok::KwDim:
    case Tok::KwImport:
      return true;
    default:
      return false;
  }
}

class Lexer {
 public:
  Lexer(std::string_view text, int file) : s_(text), file_(file) {}

  std::vector<Token> run() {
    std::vector<Token> out;
    std::vector<char> nesting;  // open ( [ {
    for (;;) {
      bool sawNewline = skipSpace();
      Token t = next();
      bool inParens = !nesting.empty() && nesting.back() != '{';
      if (sawNewline && inParens && startsStatement(t.kind)) {
        // A line starting with `let`, `return`, ... cannot continue an expression: a bracket
        // was left open. Close it here so one typo does not swallow the rest of the file.
        while (!nesting.empty() && nesting.back() != '{') nesting.pop_back();
        out.push_back(Token{Tok::Newline, newlineLoc_, "", 0, 0});
      } else if (sawNewline && !out.empty() && endsStatement(out.back().kind) && !inParens) {
        out.push_back(Token{Tok::Newline, newlineLoc_, "", 0, 0});
      }
      switch (t.kind) {
        case Tok::LParen: nesting.push_back('('); break;
        case Tok::LBracket: nesting.push_back('['); break;
        case Tok::LBrace: nesting.push_back('{'); break;
        case Tok::RParen: case Tok::RBracket:
          if (!nesting.empty() && nesting.back() != '{') nesting.pop_back();
          break;
        case Tok::RBrace:  // also closes brackets left open inside the block
          while (!nesting.empty() && nesting.back() != '{') nesting.pop_back();
          if (!nesting.empty()) nesting.pop_back();
          break;
        default: break;
      }
      bool eof = t.kind == Tok::Eof;
      out.push_back(std::move(t));
      if (eof) break;
    }
    return out;
  }

 private:
  char peek(size_t k = 0) const { return pos_ + k < s_.size() ? s_[pos_ + k] : '\0'; }
  void advance() {
    if (s_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }
  Loc here() const { return Loc{file_, line_, col_}; }

  // Skips blanks and comments; reports whether a newline was crossed.
  bool skipSpace() {
    bool nl = false;
    while (pos_ < s_.size()) {
      char c = peek();
      if (c == '\n') {
        if (!nl) newlineLoc_ = here();
        nl = true;
        advance();
      } else if (c == ' ' || c == '\t' || c == '\r') {
        advance();
      } else if ((c == '/' && peek(1) == '/') || c == '#') {
        if (!nl) newlineLoc_ = here();
        while (pos_ < s_.size() && peek() != '\n') advance();
      } else {
        break;
      }
    }
    return nl;
  }

  Token make(Tok k, Loc l, std::string text = "") { return Token{k, l, std::move(text), 0, 0}; }

  Token next() {
    Loc l = here();
    if (pos_ >= s_.size()) return make(Tok::Eof, l);
    char c = peek();
    if (isIdentStart(c)) {
      size_t b = pos_;
      while (isIdentStart(peek()) || isDigit(peek())) advance();
      std::string_view w = s_.substr(b, pos_ - b);
      auto it = keywords().find(w);
      return make(it == keywords().end() ? Tok::Ident : it->second, l, std::string(w));
    }
    if (isDigit(c)) return number(l);
    if (c == '"') return string(l);
    advance();
    auto two = [&](char second, Tok yes, Tok no) {
      if (peek() == second) {
        advance();
        return make(yes, l);
      }
      return make(no, l);
    };
    switch (c) {
      case '(': return make(Tok::LParen, l);
      case ')': return make(Tok::RParen, l);
      case '[': return make(Tok::LBracket, l);
      case ']': return make(Tok::RBracket, l);
      case '{': return make(Tok::LBrace, l);
      case '}': return make(Tok::RBrace, l);
      case ',': return make(Tok::Comma, l);
      case ':': return make(Tok::Colon, l);
      case ';': return make(Tok::Semi, l);
      case '.': return two('.', Tok::DotDot, Tok::Dot);
      case '=': return two('=', Tok::EqEq, Tok::Assign);
      case '<': return two('=', Tok::Le, Tok::Lt);
      case '>': return two('=', Tok::Ge, Tok::Gt);
      case '+': return make(Tok::Plus, l);
      case '-': return make(Tok::Minus, l);
      case '*': return two('*', Tok::StarStar, Tok::Star);
      case '/': return make(Tok::Slash, l);
      case '%': return make(Tok::Percent, l);
      case '@': return make(Tok::At, l);
      case '!':
        if (peek() == '=') {
          advance();
          return make(Tok::NotEq, l);
        }
        return make(Tok::Error, l, "unexpected '!' (use 'not' for negation)");
      default: break;
    }
    unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x80) {  // skip the rest of a UTF-8 sequence so we report it once
      while (pos_ < s_.size() && (static_cast<unsigned char>(peek()) & 0xC0) == 0x80) advance();
      return make(Tok::Error, l, "unexpected non-ASCII character");
    }
    if (u < 0x20 || u == 0x7f)
      return make(Tok::Error, l, fmt::format("unexpected control character 0x{:02x}", u));
    return make(Tok::Error, l, fmt::format("unexpected character '{}'", c));
  }

  Token number(Loc l) {
    size_t b = pos_;
    bool isFloat = false;
    while (isDigit(peek())) advance();
    // "0..n" is a range: only a digit after '.' makes a fraction.
    if (peek() == '.' && isDigit(peek(1))) {
      isFloat = true;
      advance();
      while (isDigit(peek())) advance();
    }
    if (peek() == 'e' || peek() == 'E') {
      size_t k = 1;
      if (peek(1) == '+' || peek(1) == '-') k = 2;
      if (isDigit(peek(k))) {
        isFloat = true;
        for (size_t i = 0; i < k; ++i) advance();
        while (isDigit(peek())) advance();
      }
    }
    if (isIdentStart(peek())) {
      while (isIdentStart(peek()) || isDigit(peek())) advance();
      return make(Tok::Error, l,
                  fmt::format("invalid number '{}'", s_.substr(b, pos_ - b)));
    }
    std::string text(s_.substr(b, pos_ - b));
    Token t = make(isFloat ? Tok::Float : Tok::Int, l, text);
    errno = 0;
    if (isFloat) {
      t.fval = std::strtod(text.c_str(), nullptr);
      if (errno == ERANGE && std::abs(t.fval) > 1.0)
        return make(Tok::Error, l, fmt::format("number '{}' is out of range", text));
    } else {
      t.ival = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE)
        return make(Tok::Error, l, fmt::format("integer '{}' is out of range", text));
    }
    return t;
  }

  Token string(Loc l) {
    advance();  // opening quote
    std::string v;
    while (pos_ < s_.size() && peek() != '"' && peek() != '\n') {
      char c = peek();
      advance();
      if (c == '\\') {
        char e = peek();
        if (pos_ >= s_.size() || e == '\n') break;
        advance();
        switch (e) {
          case 'n': v += '\n'; break;
          case 't': v += '\t'; break;
          case '"': v += '"'; break;
          case '\\': v += '\\'; break;
          default:
            return make(Tok::Error, l, fmt::format("unknown escape '\\{}' in string", e));
        }
      } else {
        v += c;
      }
    }
    if (peek() != '"') return make(Tok::Error, l, "unterminated string");
    advance();
    return make(Tok::String, l, std::move(v));
  }

  std::string_view s_;
  int file_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
  Loc newlineLoc_;
};

}  // namespace

std::string tokName(Tok t) {
  switch (t) {
    case Tok::Eof: return "end of file";
    case Tok::Newline: return "end of line";
    case Tok::Ident: return "identifier";
    case Tok::Int: return "integer";
    case Tok::Float: return "number";
    case Tok::String: return "string";
    case Tok::Error: return "invalid token";
    case Tok::KwLet: return "'let'";
    case Tok::KwFn: return "'fn'";
    case Tok::KwModule: return "'module'";
    case Tok::KwGraph: return "'graph'";
    case Tok::KwParam: return "'param'";
    case Tok::KwConfig: return "'config'";
    case Tok::KwPreset: return "'preset'";
    case Tok::KwDim: return "'dim'";
    case Tok::KwImport: return "'import'";
    case Tok::KwIf: return "'if'";
    case Tok::KwElse: return "'else'";
    case Tok::KwFor: return "'for'";
    case Tok::KwIn: return "'in'";
    case Tok::KwReturn: return "'return'";
    case Tok::KwOutput: return "'output'";
    case Tok::KwTrue: return "'true'";
    case Tok::KwFalse: return "'false'";
    case Tok::KwAnd: return "'and'";
    case Tok::KwOr: return "'or'";
    case Tok::KwNot: return "'not'";
    case Tok::LParen: return "'('";
    case Tok::RParen: return "')'";
    case Tok::LBracket: return "'['";
    case Tok::RBracket: return "']'";
    case Tok::LBrace: return "'{'";
    case Tok::RBrace: return "'}'";
    case Tok::Comma: return "','";
    case Tok::Colon: return "':'";
    case Tok::Semi: return "';'";
    case Tok::Dot: return "'.'";
    case Tok::DotDot: return "'..'";
    case Tok::Assign: return "'='";
    case Tok::EqEq: return "'=='";
    case Tok::NotEq: return "'!='";
    case Tok::Lt: return "'<'";
    case Tok::Le: return "'<='";
    case Tok::Gt: return "'>'";
    case Tok::Ge: return "'>='";
    case Tok::Plus: return "'+'";
    case Tok::Minus: return "'-'";
    case Tok::Star: return "'*'";
    case Tok::Slash: return "'/'";
    case Tok::Percent: return "'%'";
    case Tok::StarStar: return "'**'";
    case Tok::At: return "'@'";
  }
  return "token";
}

std::vector<Token> lex(std::string_view text, int file) { return Lexer(text, file).run(); }

}  // namespace tgc::fe
