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
std::string preprocess(std::string_view line) {
  return tokenize13a(encodeUtf8(rstripPython(decodeUtf8(line))));
}

// sacrebleu.utils.my_log.
double myLog(double x) { return x == 0.0 ? -9999999999.0 : std::log(x); }

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
  std::u32string u = U" " + decodeUtf8(s) + U" ";

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

BleuScore corpusBleu(const std::vector<std::string>& hypotheses,
                     const std::vector<std::vector<std::string>>& references) {
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
      NgramStats st = ngrams(preprocess(stream[i]));
      refLens.push_back(st.length);
      for (auto& [k, n] : st.counts) refMax[k] = std::max(refMax[k], n);
    }
    const NgramStats hyp = ngrams(preprocess(hypotheses[i]));
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
