// The IR text parser: a hand-written lexer and a recursive-descent parser for exactly the
// grammar printer.cpp writes (plus comments and free whitespace):
//
//   graph   := 'graph' '@' name dims? '{' node* 'return' refs? '}'
//   dims    := '[' (ident '=' int (',' ident '=' int)*)? ']'
//   node    := refs '=' ident '(' refs? ')' attrs? ':' type (',' type)*
//   attrs   := '{' (ident '=' value (',' ident '=' value)*)? '}'
//   type    := dtype '[' (int (',' int)*)? ']'
//   refs    := '%' name (',' '%' name)*
//
// The op table decides how each attribute value reads (an int literal is a fine float, `[]`
// is ints or floats), so the grammar needs no attribute type tags. Every error is a
// ParseError pointing at the offending token.
#include "ir/parser.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "ir/irio_detail.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace tgc {
namespace {

using irio::shownName;

enum class TokKind { Eof, Ident, Int, Float, String, ValueName, GraphName, Punct };

struct Token {
  TokKind kind = TokKind::Eof;
  std::string text;  // spelling; for strings and names the decoded contents
  SourceLoc loc;
};

// The text being read, for diagnostics.
struct Source {
  std::string_view file;
  std::string_view text;

  [[noreturn]] void fail(SourceLoc loc, std::string_view msg) const {
    throw ParseError(irio::errorAt(file, text, loc, msg));
  }
};

std::string didYouMean(const std::optional<std::string>& s, std::string_view prefix = "") {
  return s ? fmt::format(" (did you mean '{}{}'?)", prefix, shownName(*s)) : "";
}

// "%x" or %"a b" as the user would write it, shortened for messages.
std::string refText(std::string_view name) {
  return isPlainName(std::string(name)) ? fmt::format("%{}", shownName(name))
                                        : fmt::format("%\"{}\"", shownName(name));
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokKind::Eof:
      return "end of input";
    case TokKind::Ident:
      return fmt::format("'{}'", shownName(t.text));
    case TokKind::Int:
    case TokKind::Float:
      return fmt::format("number {}", shownName(t.text));
    case TokKind::String:
      return "a string";
    case TokKind::ValueName:
      return fmt::format("value '{}'", refText(t.text));
    case TokKind::GraphName:
      return fmt::format("graph name '@{}'", shownName(t.text));
    case TokKind::Punct:
      return fmt::format("'{}'", t.text);
  }
  return "?";
}

class Lexer {
 public:
  explicit Lexer(const Source& src) : src_(src), text_(src.text) {}

  Token next() {
    skipSpaceAndComments();
    Token t;
    t.loc = loc();
    if (pos_ >= text_.size()) return t;
    char c = text_[pos_];
    if (irio::isIdentStart(c)) {
      t.kind = TokKind::Ident;
      t.text = takeWhile(irio::isIdentChar);
    } else if (isDigit(c) || c == '-') {
      lexNumber(t);
    } else if (c == '"') {
      t.kind = TokKind::String;
      t.text = lexQuoted();
    } else if (c == '%' || c == '@') {
      t.kind = c == '%' ? TokKind::ValueName : TokKind::GraphName;
      advance();
      if (pos_ < text_.size() && text_[pos_] == '"') {
        t.text = lexQuoted();
      } else {
        t.text = takeWhile(isNameChar);
        if (t.text.empty())
          src_.fail(t.loc, c == '%' ? "expected a value name after '%'"
                                    : "expected a graph name after '@'");
      }
    } else if (std::strchr("(){}[],=:", c) && c != '\0') {
      t.kind = TokKind::Punct;
      t.text = std::string(1, c);
      advance();
    } else {
      auto u = static_cast<unsigned char>(c);
      src_.fail(t.loc, u >= 0x21 && u < 0x7F ? fmt::format("unexpected character '{}'", c)
                                             : fmt::format("unexpected byte 0x{:02x}", u));
    }
    return t;
  }

  SourceLoc loc() const { return SourceLoc{line_, col_}; }

 private:
  static bool isDigit(char c) { return c >= '0' && c <= '9'; }
  static bool isNameChar(char c) { return irio::isIdentChar(c) || isDigit(c); }

  void advance() {
    if (text_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }

  bool at(size_t ahead, char c) const {
    return pos_ + ahead < text_.size() && text_[pos_ + ahead] == c;
  }
  bool digitAt(size_t ahead) const {
    return pos_ + ahead < text_.size() && isDigit(text_[pos_ + ahead]);
  }

  template <typename Pred>
  std::string takeWhile(Pred p) {
    size_t b = pos_;
    while (pos_ < text_.size() && p(text_[pos_])) advance();
    return std::string(text_.substr(b, pos_ - b));
  }

  void skipSpaceAndComments() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        advance();
      } else if (c == '#' || (c == '/' && at(1, '/'))) {
        while (pos_ < text_.size() && text_[pos_] != '\n') advance();
      } else {
        break;
      }
    }
  }

  // -?digits(.digits)?([eE][+-]?digits)? or -inf / -nan (bare inf and nan are identifiers).
  void lexNumber(Token& t) {
    size_t b = pos_;
    bool isFloat = false;
    if (text_[pos_] == '-') advance();
    if (digitAt(0)) {
      while (digitAt(0)) advance();
      if (at(0, '.') && digitAt(1)) {
        isFloat = true;
        advance();
        while (digitAt(0)) advance();
      }
      if ((at(0, 'e') || at(0, 'E')) &&
          (digitAt(1) || ((at(1, '+') || at(1, '-')) && digitAt(2)))) {
        isFloat = true;
        advance();
        if (!digitAt(0)) advance();
        while (digitAt(0)) advance();
      }
    } else if (text_.substr(pos_, 3) == "inf" || text_.substr(pos_, 3) == "nan") {
      isFloat = true;
      for (int i = 0; i < 3; ++i) advance();
    } else {
      src_.fail(t.loc, "expected a number after '-'");
    }
    if (pos_ < text_.size() && isNameChar(text_[pos_])) {
      takeWhile(isNameChar);
      src_.fail(t.loc, fmt::format("malformed number '{}'", shownName(text_.substr(b, pos_ - b))));
    }
    t.kind = isFloat ? TokKind::Float : TokKind::Int;
    t.text = std::string(text_.substr(b, pos_ - b));
  }

  // A "..." string with the printer's escapes (\" \\ \n) and \t; raw bytes otherwise.
  std::string lexQuoted() {
    SourceLoc start = loc();
    advance();  // the opening quote
    std::string s;
    for (;;) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') src_.fail(start, "unterminated string");
      char c = text_[pos_];
      if (c == '"') {
        advance();
        break;
      }
      if (c != '\\') {
        s += c;
        advance();
        continue;
      }
      SourceLoc esc = loc();
      advance();
      if (pos_ >= text_.size() || text_[pos_] == '\n') src_.fail(start, "unterminated string");
      switch (text_[pos_]) {
        case '"':
          s += '"';
          break;
        case '\\':
          s += '\\';
          break;
        case 'n':
          s += '\n';
          break;
        case 't':
          s += '\t';
          break;
        default:
          src_.fail(esc, fmt::format("unknown escape '\\{}' (use \\\", \\\\, \\n or \\t)",
                                     shownName(text_.substr(pos_, 1))));
      }
      advance();
    }
    if (!irio::isValidUtf8(s)) src_.fail(start, "string is not valid UTF-8");
    return s;
  }

  const Source& src_;
  std::string_view text_;
  size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
};

class Parser {
 public:
  explicit Parser(const Source& src) : src_(src), lex_(src) {}

  std::unique_ptr<Graph> parse() {
    Token kw = take();
    if (kw.kind != TokKind::Ident || kw.text != "graph")
      fail(kw.loc, "expected 'graph' at the start of the input, got " + describe(kw));
    Token name = take();
    if (name.kind != TokKind::GraphName)
      fail(name.loc, "expected the graph name ('@name') after 'graph', got " + describe(name));
    g_ = std::make_unique<Graph>(name.text);
    if (isPunct(peek(), '[')) parseDims();
    expectPunct('{', "to open the graph body");
    for (;;) {
      const Token& t = peek();
      if (t.kind == TokKind::ValueName) {
        parseNode();
      } else if (t.kind == TokKind::Ident && t.text == "return") {
        parseReturn();
        break;
      } else if (isPunct(t, '}')) {
        fail(t.loc, "expected 'return' before the closing '}'");
      } else {
        fail(t.loc, "expected a node ('%name = op(...)') or 'return', got " + describe(t));
      }
    }
    Token end = take();
    if (end.kind != TokKind::Eof)
      fail(end.loc, "unexpected " + describe(end) + " after the end of the graph");
    auto errs = verifyGraph(*g_);
    if (!errs.empty()) fail(kw.loc, "graph does not verify: " + errs.front());
    return std::move(g_);
  }

 private:
  [[noreturn]] void fail(SourceLoc loc, std::string_view msg) const { src_.fail(loc, msg); }

  const Token& peek() {
    if (!have_) {
      tok_ = lex_.next();
      have_ = true;
    }
    return tok_;
  }
  Token take() {
    peek();
    have_ = false;
    return std::move(tok_);
  }
  static bool isPunct(const Token& t, char c) { return t.kind == TokKind::Punct && t.text[0] == c; }
  Token expectPunct(char c, std::string_view why) {
    Token t = take();
    if (!isPunct(t, c)) fail(t.loc, fmt::format("expected '{}' {}, got {}", c, why, describe(t)));
    return t;
  }

  int64_t intValue(const Token& t) {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (ec == std::errc::result_out_of_range)
      fail(t.loc, fmt::format("integer {} does not fit in 64 bits", shownName(t.text)));
    if (ec != std::errc() || p != t.text.data() + t.text.size())
      fail(t.loc, fmt::format("malformed integer '{}'", shownName(t.text)));
    return v;
  }

  // Int or Float token, or the identifiers inf / nan.
  double floatValue(const Token& t) {
    std::string_view s = t.text;
    bool neg = !s.empty() && s[0] == '-';
    std::string_view body = neg ? s.substr(1) : s;
    if (body == "inf") return neg ? -HUGE_VAL : HUGE_VAL;
    if (body == "nan") return std::numeric_limits<double>::quiet_NaN();
    double v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range)
      fail(t.loc, fmt::format("number {} is out of range for a 64-bit float", shownName(s)));
    if (ec != std::errc() || p != s.data() + s.size())
      fail(t.loc, fmt::format("malformed number '{}'", shownName(s)));
    return v;
  }

  static bool isFloatWord(const Token& t) {
    return t.kind == TokKind::Ident && (t.text == "inf" || t.text == "nan");
  }

  void parseDims() {
    take();  // '['
    std::vector<std::pair<std::string, int64_t>> dims;
    std::unordered_set<std::string> seen;
    if (!isPunct(peek(), ']')) {
      for (;;) {
        Token name = take();
        if (name.kind != TokKind::Ident)
          fail(name.loc, "expected a dim name (like B=16), got " + describe(name));
        if (!seen.insert(name.text).second)
          fail(name.loc, fmt::format("dim '{}' is bound twice", name.text));
        expectPunct('=', fmt::format("after dim name '{}'", name.text));
        Token size = take();
        if (size.kind != TokKind::Int)
          fail(size.loc, fmt::format("expected an integer size for dim '{}', got {}", name.text,
                                     describe(size)));
        int64_t v = intValue(size);
        if (v < 0) fail(size.loc, fmt::format("dim '{}' has negative size {}", name.text, v));
        dims.emplace_back(name.text, v);
        if (!isPunct(peek(), ',')) break;
        take();
      }
    }
    expectPunct(']', "after the dims");
    g_->setDims(std::move(dims));
  }

  Value* lookup(const Token& t) {
    auto it = values_.find(t.text);
    if (it != values_.end()) return it->second.value;
    fail(t.loc, fmt::format("unknown value {}{}", refText(t.text),
                            didYouMean(irio::closestName(t.text, order_), "%")));
  }

  void parseNode() {
    std::vector<Token> results;
    std::unordered_set<std::string> seen;  // sets, not scans: inputs may list many names
    for (;;) {
      Token r = take();
      if (r.kind != TokKind::ValueName)
        fail(r.loc, "expected a result name ('%name'), got " + describe(r));
      if (r.text.empty()) fail(r.loc, "value names must not be empty");
      if (auto it = values_.find(r.text); it != values_.end())
        fail(r.loc, fmt::format("redefinition of {} (first defined at {}:{})", refText(r.text),
                                it->second.loc.line, it->second.loc.col));
      if (!seen.insert(r.text).second)
        fail(r.loc, fmt::format("{} is named twice", refText(r.text)));
      results.push_back(std::move(r));
      if (!isPunct(peek(), ',')) break;
      take();
    }
    expectPunct('=', "after the result names");
    Token opTok = take();
    if (opTok.kind != TokKind::Ident)
      fail(opTok.loc, "expected an op name after '=', got " + describe(opTok));
    auto op = opByName(opTok.text);
    if (!op) {
      std::vector<std::string_view> names;
      for (const auto& i : allOps()) names.push_back(i.name);
      fail(opTok.loc, fmt::format("unknown op '{}'{}", shownName(opTok.text),
                                  didYouMean(irio::closestName(opTok.text, names))));
    }
    const OpInfo& info = opInfo(*op);
    expectPunct('(', fmt::format("after '{}'", info.name));
    std::vector<Value*> operands;
    if (!isPunct(peek(), ')')) {
      for (;;) {
        Token o = take();
        if (o.kind != TokKind::ValueName)
          fail(o.loc, "expected an operand ('%name') or ')', got " + describe(o));
        operands.push_back(lookup(o));
        if (!isPunct(peek(), ',')) break;
        take();
      }
    }
    expectPunct(')', "after the operands");
    if (auto why = irio::arityError(info, static_cast<int>(operands.size()))) fail(opTok.loc, *why);

    AttrMap attrs;
    if (isPunct(peek(), '{')) parseAttrs(info, attrs);
    for (const auto& s : info.attrs)
      if (!s.default_value && !attrs.count(s.name))
        fail(opTok.loc, fmt::format("'{}' needs attribute '{}' ({})", info.name, s.name,
                                    attrKindName(s.kind)));

    expectPunct(':', "and the result type after the node");
    SourceLoc typeLoc = peek().loc;
    std::vector<TensorType> types{parseType()};
    while (isPunct(peek(), ',')) {
      take();
      types.push_back(parseType());
    }
    if (types.size() != results.size())
      fail(typeLoc,
           fmt::format("{} result name{} but {} type{}", results.size(),
                       results.size() == 1 ? "" : "s", types.size(), types.size() == 1 ? "" : "s"));

    // Graph::add explains what is wrong; the location depends on whether the op itself
    // rejects its operands (point at the op) or only the declared type differs (the type).
    std::vector<TensorType> opTypes;
    for (Value* v : operands) opTypes.push_back(v->type());
    SourceLoc where = opTok.loc;
    try {
      AttrMap copy = attrs;
      if (!info.isSource() && inferResultTypes(*op, opTypes, copy, types) != types) where = typeLoc;
    } catch (const ShapeError&) {
    }
    std::vector<std::string> names;
    for (const auto& r : results) names.push_back(r.text);
    Node* n = nullptr;
    try {
      n = g_->add(*op, std::move(operands), std::move(attrs), names, types);
    } catch (const IRError& e) {
      fail(where, e.what());
    }
    if (n->numResults() != results.size())
      fail(typeLoc, fmt::format("'{}' gives {} results, {} are named", info.name, n->numResults(),
                                results.size()));
    for (size_t i = 0; i < results.size(); ++i) {
      values_[results[i].text] = Defined{n->result(i), results[i].loc};
      order_.push_back(results[i].text);
    }
  }

  void parseAttrs(const OpInfo& info, AttrMap& attrs) {
    take();  // '{'
    if (isPunct(peek(), '}')) {
      take();
      return;
    }
    std::string last;
    for (;;) {
      Token name = take();
      if (name.kind != TokKind::Ident)
        fail(name.loc, "expected an attribute name, got " + describe(name));
      const AttrSpec* spec = info.findAttr(name.text);
      if (!spec) {
        std::vector<std::string> known;
        for (const auto& s : info.attrs) known.push_back(s.name);
        std::string list = fmt::format("{}", fmt::join(known, ", "));
        fail(name.loc, fmt::format("unknown attribute '{}' for '{}'{} ({})", shownName(name.text),
                                   info.name, didYouMean(irio::closestName(name.text, known)),
                                   known.empty() ? "it has none" : "known: " + list));
      }
      if (attrs.count(spec->name))
        fail(name.loc, fmt::format("attribute '{}' is given twice", spec->name));
      expectPunct('=', fmt::format("after attribute '{}'", spec->name));
      SourceLoc valueLoc = peek().loc;
      Attr value = parseAttrValue(*spec);
      if (auto why = irio::attrTooLarge(spec->name, value)) fail(valueLoc, *why);
      attrs.emplace(spec->name, std::move(value));
      last = spec->name;
      if (!isPunct(peek(), ',')) break;
      take();
    }
    expectPunct('}', fmt::format("or ',' after attribute '{}'", last));
  }

  // What kind of literal a token is, for "must be int, got float".
  static std::string literalKind(const Token& t) {
    if (t.kind == TokKind::Int) return "int";
    if (t.kind == TokKind::Float || isFloatWord(t)) return "float";
    if (t.kind == TokKind::String) return "string";
    if (t.kind == TokKind::Ident && (t.text == "true" || t.text == "false")) return "bool";
    if (t.kind == TokKind::Ident && parseDType(t.text)) return "dtype";
    if (isPunct(t, '[')) return "a list";
    return describe(t);
  }

  Attr parseAttrValue(const AttrSpec& spec) {
    Token t = take();
    auto wrong = [&](const Token& at, std::string_view got) {
      fail(at.loc, fmt::format("attribute '{}' must be {}, got {}", spec.name,
                               attrKindName(spec.kind), got));
    };
    switch (spec.kind) {
      case AttrKind::Bool:
        if (t.kind == TokKind::Ident && (t.text == "true" || t.text == "false"))
          return t.text == "true";
        break;
      case AttrKind::Int:
        if (t.kind == TokKind::Int) return intValue(t);
        break;
      case AttrKind::Float:
        if (t.kind == TokKind::Int || t.kind == TokKind::Float || isFloatWord(t))
          return floatValue(t);
        break;
      case AttrKind::String:
        if (t.kind == TokKind::String) return t.text;
        break;
      case AttrKind::DTypeKind:
        if (t.kind == TokKind::Ident) {
          if (auto d = parseDType(t.text)) return *d;
          if (t.text != "true" && t.text != "false" && !isFloatWord(t)) failUnknownDType(t);
        }
        break;
      case AttrKind::Ints:
      case AttrKind::Floats: {
        if (!isPunct(t, '[')) break;
        bool ints = spec.kind == AttrKind::Ints;
        std::vector<int64_t> iv;
        std::vector<double> fv;
        if (!isPunct(peek(), ']')) {
          for (;;) {
            Token e = take();
            if (ints && e.kind == TokKind::Int) {
              iv.push_back(intValue(e));
            } else if (!ints &&
                       (e.kind == TokKind::Int || e.kind == TokKind::Float || isFloatWord(e))) {
              fv.push_back(floatValue(e));
            } else {
              wrong(e, fmt::format("a list holding {}", literalKind(e)));
            }
            if (!isPunct(peek(), ',')) break;
            take();
          }
        }
        expectPunct(']', "or ',' in the list");
        if (ints) return iv;
        return fv;
      }
    }
    wrong(t, literalKind(t));
    return false;  // not reached: wrong() throws
  }

  [[noreturn]] void failUnknownDType(const Token& t) {
    std::vector<std::string_view> names;
    for (DType d : kAllDTypes) names.push_back(dtypeName(d));
    fail(t.loc, fmt::format("unknown dtype '{}'{} (expected one of {})", shownName(t.text),
                            didYouMean(irio::closestName(t.text, names)), fmt::join(names, ", ")));
  }

  TensorType parseType() {
    Token d = take();
    if (d.kind != TokKind::Ident) fail(d.loc, "expected a type like f32[2,3], got " + describe(d));
    auto dtype = parseDType(d.text);
    if (!dtype) failUnknownDType(d);
    Token lb = take();
    if (!isPunct(lb, '['))
      fail(lb.loc, fmt::format("expected '[' after '{}' (a scalar is {}[]), got {}", d.text, d.text,
                               describe(lb)));
    Shape shape;
    if (!isPunct(peek(), ']')) {
      for (;;) {
        Token n = take();
        if (n.kind != TokKind::Int) fail(n.loc, "expected a dimension size, got " + describe(n));
        int64_t v = intValue(n);
        if (v < 0) fail(n.loc, fmt::format("dimension {} is negative", v));
        shape.push_back(v);
        if (!isPunct(peek(), ',')) break;
        take();
      }
    }
    expectPunct(']', "or ',' in the shape");
    TensorType t{*dtype, std::move(shape)};
    if (auto why = irio::shapeTooLarge(t.shape))
      fail(d.loc, fmt::format("type {} is too large ({})", t.str(), *why));
    return t;
  }

  void parseReturn() {
    take();  // 'return'
    std::vector<Value*> outs;
    if (peek().kind == TokKind::ValueName) {
      for (;;) {
        outs.push_back(lookup(take()));
        if (!isPunct(peek(), ',')) break;
        take();
        if (peek().kind != TokKind::ValueName)
          fail(peek().loc, "expected a value after ',', got " + describe(peek()));
      }
    }
    Token close = take();
    if (!isPunct(close, '}'))
      fail(close.loc, fmt::format("expected {}'}}' to close the graph, got {}",
                                  outs.empty() ? "a value or " : "',' or ", describe(close)));
    g_->setOutputs(std::move(outs));
  }

  struct Defined {
    Value* value;
    SourceLoc loc;
  };

  const Source& src_;
  Lexer lex_;
  Token tok_;
  bool have_ = false;
  std::unique_ptr<Graph> g_;
  std::unordered_map<std::string, Defined> values_;
  std::vector<std::string> order_;  // names in definition order, for suggestions
};

}  // namespace

std::unique_ptr<Graph> parseGraph(std::string_view text, std::string_view filename) {
  Source src{filename, text};
  return Parser(src).parse();
}

std::unique_ptr<Graph> parseGraphFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ParseError(fmt::format("{}: error: cannot open file: {}", path, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw ParseError(fmt::format("{}: error: cannot read file", path));
  std::string text = ss.str();
  return parseGraph(text, path);
}

}  // namespace tgc
