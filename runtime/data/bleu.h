// Evaluation: corpus BLEU exactly as sacreBLEU (2.x) computes it by default, and exact match.
//
// sacreBLEU's defaults: the 13a tokenizer (mteval-v13a's), mixed case, n-grams up to 4, the
// brevity penalty against the closest reference length, and the 'exp' smoothing of
// mteval-v13a (each n-gram order without a match counts as 1/(2^k · total) for its k-th
// such order). Scores are on sacreBLEU's scale, 0..100.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tgc::data {

inline constexpr int kBleuMaxOrder = 4;

// sacreBLEU's Tokenizer13a on one line (tokens separated by single spaces).
std::string tokenize13a(std::string_view line);
// sacreBLEU's TokenizerZh, for Chinese references (`--tokenize zh`, its choice when the
// target language is zh): each Chinese character (by sacreBLEU's table, quirks included)
// is a token, the rest is split by 13a's rules.
std::string tokenizeZh(std::string_view line);

enum class BleuTokenizer { v13a, zh };

struct BleuScore {
  double score = 0;  // 0..100
  std::array<int64_t, kBleuMaxOrder> correct{}, total{};
  std::array<double, kBleuMaxOrder> precisions{};  // percent, as sacreBLEU reports them
  double brevityPenalty = 0;
  int64_t sysLen = 0, refLen = 0;
};

// references[k][i] is the k-th reference of hypothesis i (sacreBLEU's list of reference
// streams). Throws std::invalid_argument when a stream's length differs from hypotheses'.
BleuScore corpusBleu(const std::vector<std::string>& hypotheses,
                     const std::vector<std::vector<std::string>>& references,
                     BleuTokenizer tokenizer = BleuTokenizer::v13a);
inline BleuScore corpusBleu(const std::vector<std::string>& hypotheses,
                            const std::vector<std::string>& references,
                            BleuTokenizer tokenizer = BleuTokenizer::v13a) {
  return corpusBleu(hypotheses, std::vector<std::vector<std::string>>{references}, tokenizer);
}

// The fraction (0..1) of hypotheses equal to their reference, byte for byte.
double exactMatch(const std::vector<std::string>& hypotheses,
                  const std::vector<std::string>& references);

}  // namespace tgc::data
