#include "runtime/data/text.h"

namespace tgc::data {

namespace {

// Length of the valid UTF-8 sequence at s[i] (1..4) and its code point, or 0 if invalid.
size_t decodeOne(std::string_view s, size_t i, char32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  size_t len;
  char32_t min;
  if ((c & 0xE0) == 0xC0) {
    len = 2, min = 0x80, cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, min = 0x800, cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, min = 0x10000, cp = c & 0x07;
  } else {
    return 0;  // a continuation byte or 0xF8..0xFF
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

bool isAsciiAlnum(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool isDigit(char32_t c) { return c >= '0' && c <= '9'; }

// Punctuation that the word tokenizer splits off: ASCII punctuation, Latin-1 punctuation
// (¡ « » ¿ ...), general punctuation (dashes, quotes, ellipsis) and CJK punctuation.
bool isPunct(char32_t c) {
  if (c < 0x80) return c > 0x20 && c < 0x7F && !isAsciiAlnum(c);
  return (c >= 0xA1 && c <= 0xBF) || c == 0xD7 || c == 0xF7 || (c >= 0x2010 && c <= 0x205E) ||
         (c >= 0x3001 && c <= 0x303F) || (c >= 0xFF01 && c <= 0xFF0F) ||
         (c >= 0xFF1A && c <= 0xFF20);
}
bool isWordChar(char32_t c) { return !isPunct(c) && !isUnicodeSpace(c); }

}  // namespace

size_t findInvalidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    const size_t n = decodeOne(s, i, cp);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::u32string decodeUtf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    const size_t n = decodeOne(s, i, cp);
    out += n ? cp : U'\uFFFD';
    i += n ? n : 1;
  }
  return out;
}

void appendUtf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string encodeUtf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) appendUtf8(out, c);
  return out;
}

bool isUnicodeSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string normalizeText(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool space = false;  // a space is pending (written only before a following character)
  for (char32_t c : decodeUtf8(s)) {
    if (c >= 0xFF01 && c <= 0xFF5E) {
      c -= 0xFEE0;  // full-width ASCII variants
    } else if (c == 0x3002 || c == 0xFF61) {
      c = '.';  // 。 and the half-width ｡
    } else if (c == 0x2018 || c == 0x2019) {
      c = '\'';
    } else if (c == 0x201C || c == 0x201D) {
      c = '"';
    } else if (c == 0xFEFF) {
      continue;  // byte-order mark
    }
    if (isUnicodeSpace(c)) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    appendUtf8(out, c);
  }
  return out;
}

std::string asciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::vector<std::string> tokenizeChars(std::string_view normalized) {
  std::vector<std::string> out;
  for (char32_t c : decodeUtf8(normalized)) {
    std::string t;
    appendUtf8(t, isUnicodeSpace(c) ? U' ' : c);
    out.push_back(std::move(t));
  }
  return out;
}

std::string detokenizeChars(const std::vector<std::string>& tokens) {
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::vector<std::string> tokenizeWords(std::string_view normalized) {
  const std::u32string s = decodeUtf8(normalized);
  std::vector<std::string> out;
  std::u32string word;
  auto flush = [&] {
    if (!word.empty()) out.push_back(encodeUtf8(word));
    word.clear();
  };
  for (size_t i = 0; i < s.size(); ++i) {
    const char32_t c = s[i];
    if (isWordChar(c)) {
      word += c;
      continue;
    }
    // A joiner between two word characters stays inside the word.
    const bool between = !word.empty() && i + 1 < s.size() && isWordChar(s[i + 1]);
    const bool letterJoin = (c == '\'' || c == '-') && between;
    const bool digitJoin = (c == '.' || c == ',') && between && isDigit(word.back()) &&
                           isDigit(s[i + 1]);
    if (letterJoin || digitJoin) {
      word += c;
      continue;
    }
    flush();
    if (!isUnicodeSpace(c)) out.push_back(encodeUtf8(std::u32string(1, c)));
  }
  flush();
  return out;
}

std::string detokenizeWords(const std::vector<std::string>& tokens) {
  static constexpr std::string_view kClosing = ".,!?;:)]}%";
  static constexpr std::string_view kOpening = "([{";
  std::string out;
  bool glueNext = true;  // no space before the first token or after an opening bracket
  for (const auto& t : tokens) {
    const bool closing = t.size() == 1 && kClosing.find(t[0]) != std::string_view::npos;
    if (!glueNext && !closing) out += ' ';
    out += t;
    glueNext = t.size() == 1 && kOpening.find(t[0]) != std::string_view::npos;
  }
  return out;
}

}  // namespace tgc::data
