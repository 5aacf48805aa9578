#include "runtime/data/bleu.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include "runtime/data/text.h"

namespace tgc::data {

namespace {

void replaceAll(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

bool isDigit(char32_t c) { return c >= '0' && c <= '9'; }

// The first rule's class [\{-\~\[-\` -\&\(-\+\:-\@\/]: ASCII punctuation except ' - . ,
// (and space, which splitting removes anyway).
bool is13aSymbol(char32_t c) {
  return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
         (c >= 0x28 && c <= 0x2B) || (c >= 0x3A && c <= 0x40) || c == 0x2F;
}

// re.sub with a two-character pattern: scans left to right, and after a match continues
// behind it, exactly as Python's non-overlapping substitution does.
template <class Match, class Emit>
std::u32string substitutePairs(const std::u32string& s, Match match, Emit emit) {
  std::u32string out;
  out.reserve(s.size() * 2);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && match(s[i], s[i + 1])) {
      emit(out, s[i], s[i + 1]);
      i += 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

// Python's str.split(): maximal runs of non-whitespace.
std::vector<std::u32string> splitPython(const std::u32string& s) {
  std::vector<std::u32string> out;
  std::u32string cur;
  for (char32_t c : s) {
    if (isUnicodeSpace(c)) {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

// Python's str.rstrip().
std::u32string rstripPython(std::u32string s) {
  while (!s.empty() && isUnicodeSpace(s.back())) s.pop_back();
  return s;
}

// N-gram counts of a tokenized line, keyed by the n-gram's tokens joined with spaces.
struct NgramStats {
  std::unordered_map<std::string, int64_t> counts;
  int64_t length = 0;
};

NgramStats ngrams(const std::string& tokenized) {
  std::vector<std::string> tokens;
  for (const auto& t : splitPython(decodeUtf8(tokenized))) tokens.push_back(encodeUtf8(t));
  NgramStats st;
  st.length = static_cast<int64_t>(tokens.size());
  for (size_t n = 1; n <= kBleuMaxOrder; ++n)
    for (size_t i = 0; i + n <= tokens.size(); ++i) {
      std::string key = tokens[i];
      for (size_t k = 1; k < n; ++k) key += ' ' + tokens[i + k];
      ++st.counts[key];
    }
  return st;
}

int orderOf(const std::string& key) {
  int n = 1;
  for (char c : key) n += c == ' ';
  return n;
}

// sacreBLEU's BLEU._preprocess_segment: rstrip, then tokenize.
std::string preprocess(std::string_view line, BleuTokenizer tokenizer) {
  const std::string s = encodeUtf8(rstripPython(decodeUtf8(line)));
  switch (tokenizer) {
    case BleuTokenizer::v13a: return tokenize13a(s);
    case BleuTokenizer::zh: return tokenizeZh(s);
  }
  return s;
}

// sacrebleu.utils.my_log.
double myLog(double x) { return x == 0.0 ? -9999999999.0 : std::log(x); }

// Python's str.strip().
std::u32string stripPython(std::u32string s) {
  s = rstripPython(std::move(s));
  size_t begin = 0;
  while (begin < s.size() && isUnicodeSpace(s[begin])) ++begin;
  return s.substr(begin);
}

// TokenizerZh._UCODE_RANGES as Python evaluates them. Two entries are written
// '\u20000'..'\u2a6d6' and '\u2f800'..'\u2fa1d', which Python reads as two-character
// strings ('\u2000' '0' ...); a single character compares with them as U+2001..U+2A6D and
// U+2F81..U+2FA1, so those are the ranges, and the supplementary planes are not included.
bool isZhChar(char32_t c) {
  static constexpr std::pair<char32_t, char32_t> kRanges[] = {
      {0x3400, 0x4DB5}, {0x4E00, 0x9FA5}, {0x9FA6, 0x9FBB}, {0xF900, 0xFA2D}, {0xFA30, 0xFA6A},
      {0xFA70, 0xFAD9}, {0x2001, 0x2A6D}, {0x2F81, 0x2FA1}, {0xFF00, 0xFFEF}, {0x2E80, 0x2EFF},
      {0x3000, 0x303F}, {0x31C0, 0x31EF}, {0x2F00, 0x2FDF}, {0x2FF0, 0x2FFF}, {0x3100, 0x312F},
      {0x31A0, 0x31BF}, {0xFE10, 0xFE1F}, {0xFE30, 0xFE4F}, {0x2600, 0x26FF}, {0x2700, 0x27BF},
      {0x3200, 0x32FF}, {0x3300, 0x33FF}};
  for (auto [lo, hi] : kRanges)
    if (c >= lo && c <= hi) return true;
  return false;
}

// sacrebleu.tokenizers.tokenizer_re.TokenizerRegexp: the four substitutions, then one space
// between tokens.
std::string tokenizeRegexp(const std::u32string& u) {
  std::u32string spaced;
  for (char32_t c : u) {
    if (is13aSymbol(c)) {
      spaced += U' ';
      spaced += c;
      spaced += U' ';
    } else {
      spaced += c;
    }
  }
  const auto isPointOrComma = [](char32_t c) { return c == '.' || c == ','; };
  // ([^0-9])([\.,]) → "\1 \2 "
  spaced = substitutePairs(
      spaced, [&](char32_t a, char32_t b) { return !isDigit(a) && isPointOrComma(b); },
      [](std::u32string& o, char32_t a, char32_t b) { o += {a, U' ', b, U' '}; });
  // ([\.,])([^0-9]) → " \1 \2"
  spaced = substitutePairs(
      spaced, [&](char32_t a, char32_t b) { return isPointOrComma(a) && !isDigit(b); },
      [](std::u32string& o, char32_t a, char32_t b) { o += {U' ', a, U' ', b}; });
  // ([0-9])(-) → "\1 \2 "
  spaced = substitutePairs(
      spaced, [&](char32_t a, char32_t b) { return isDigit(a) && b == '-'; },
      [](std::u32string& o, char32_t a, char32_t b) { o += {a, U' ', b, U' '}; });

  std::string out;
  for (const auto& t : splitPython(spaced)) {
    if (!out.empty()) out += ' ';
    out += encodeUtf8(t);
  }
  return out;
}

}  // namespace

std::string tokenize13a(std::string_view line) {
  std::string s(line);
  replaceAll(s, "<skipped>", "");
  replaceAll(s, "-\n", "");
  replaceAll(s, "\n", " ");
  if (s.find('&') != std::string::npos) {
    replaceAll(s, "&quot;", "\"");
    replaceAll(s, "&amp;", "&");
    replaceAll(s, "&lt;", "<");
    replaceAll(s, "&gt;", ">");
  }
  return tokenizeRegexp(U" " + decodeUtf8(s) + U" ");
}

std::string tokenizeZh(std::string_view line) {
  std::u32string chars;
  for (char32_t c : stripPython(decodeUtf8(line))) {
    if (isZhChar(c)) {
      chars += U' ';
      chars += c;
      chars += U' ';
    } else {
      chars += c;
    }
  }
  return tokenizeRegexp(chars);
}

BleuScore corpusBleu(const std::vector<std::string>& hypotheses,
                     const std::vector<std::vector<std::string>>& references,
                     BleuTokenizer tokenizer) {
  if (references.empty()) throw std::invalid_argument("corpus BLEU: no references");
  for (const auto& stream : references)
    if (stream.size() != hypotheses.size())
      throw std::invalid_argument(fmt::format(
          "corpus BLEU: {} hypotheses but a reference stream of {}", hypotheses.size(),
          stream.size()));

  BleuScore r;
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    // Reference n-grams clipped at the largest count in any reference.
    std::unordered_map<std::string, int64_t> refMax;
    std::vector<int64_t> refLens;
    for (const auto& stream : references) {
      NgramStats st = ngrams(preprocess(stream[i], tokenizer));
      refLens.push_back(st.length);
      for (auto& [k, n] : st.counts) refMax[k] = std::max(refMax[k], n);
    }
    const NgramStats hyp = ngrams(preprocess(hypotheses[i], tokenizer));
    // The closest reference length; the shorter one on a tie.
    int64_t closest = -1, diff = -1;
    for (int64_t len : refLens) {
      const int64_t d = std::abs(hyp.length - len);
      if (diff == -1 || d < diff || (d == diff && len < closest)) diff = d, closest = len;
    }
    r.sysLen += hyp.length;
    r.refLen += closest;
    for (const auto& [k, n] : hyp.counts) {
      const int order = orderOf(k) - 1;
      r.total[order] += n;
      if (auto it = refMax.find(k); it != refMax.end()) r.correct[order] += std::min(n, it->second);
    }
  }

  // BLEU.compute_bleu with smooth_method='exp', step for step (the same float operations).
  r.brevityPenalty = 1.0;
  if (r.sysLen < r.refLen)
    r.brevityPenalty = r.sysLen > 0 ? std::exp(1.0 - static_cast<double>(r.refLen) /
                                                         static_cast<double>(r.sysLen))
                                    : 0.0;
  bool anyCorrect = false;
  for (int64_t c : r.correct) anyCorrect |= c != 0;
  if (!anyCorrect) return r;  // score 0, precisions 0
  double smooth = 1.0;
  for (int n = 0; n < kBleuMaxOrder; ++n) {
    if (r.total[n] == 0) break;  // the rest stay 0 and the score is 0
    if (r.correct[n] == 0) {
      smooth *= 2;
      r.precisions[n] = 100.0 / (smooth * static_cast<double>(r.total[n]));
    } else {
      r.precisions[n] = 100.0 * static_cast<double>(r.correct[n]) / static_cast<double>(r.total[n]);
    }
  }
  double logSum = 0;
  for (double p : r.precisions) logSum += myLog(p);
  r.score = r.brevityPenalty * std::exp(logSum / kBleuMaxOrder);
  return r;
}

double exactMatch(const std::vector<std::string>& hypotheses,
                  const std::vector<std::string>& references) {
  if (hypotheses.size() != references.size())
    throw std::invalid_argument(fmt::format("exact match: {} hypotheses but {} references",
                                            hypotheses.size(), references.size()));
  if (hypotheses.empty()) return 0;
  int64_t same = 0;
  for (size_t i = 0; i < hypotheses.size(); ++i) same += hypotheses[i] == references[i];
  return static_cast<double>(same) / static_cast<double>(hypotheses.size());
}

}  // namespace tgc::data
