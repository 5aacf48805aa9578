#include "runtime/data/lm_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include "runtime/data/data_file.h"
#include "runtime/data/error.h"
#include "runtime/data/rng.h"
#include "runtime/data/text.h"

namespace tgc::data {

std::vector<std::string> parseTextLines(std::string_view text, std::string_view name) {
  std::vector<std::string> out;
  for (std::string_view line : splitUtf8Lines(text, name)) {
    std::string s = normalizeText(line);
    if (!s.empty()) out.push_back(std::move(s));
  }
  if (out.empty()) throw DataError(fmt::format("{}: error: no text in the file", name));
  return out;
}

std::vector<std::string> readTextLines(const std::string& path) {
  return parseTextLines(readDataFile(path, "text"), path);
}

namespace {

// Blocks in the validation split of n, by the rule lm_data.h states.
size_t validCount(size_t n, double fraction) {
  if (fraction <= 0 || n == 0) return 0;
  if (fraction >= 1) return n;
  if (n == 1) return 0;
  const auto k = static_cast<size_t>(std::llround(fraction * static_cast<double>(n)));
  return std::clamp<size_t>(k, 1, n - 1);
}

// The text as tokens, before a vocabulary exists: each distinct token gets a local id.
struct LocalTokens {
  std::vector<std::string> names;
  std::unordered_map<std::string, int64_t> ids;
  int64_t add(std::string&& t) {
    auto [it, fresh] = ids.emplace(t, static_cast<int64_t>(names.size()));
    if (fresh) names.push_back(std::move(t));
    return it->second;
  }
};

constexpr int64_t kLocalBos = -1, kLocalEos = -2;

int64_t countUnk(const std::vector<std::vector<int64_t>>& seqs) {
  int64_t n = 0;
  for (const auto& s : seqs) n += std::count(s.begin(), s.end(), Vocab::kUnk);
  return n;
}

int64_t countTargets(const std::vector<std::vector<int64_t>>& seqs) {
  int64_t n = 0;
  for (const auto& s : seqs) n += static_cast<int64_t>(s.size()) - 1;
  return n;
}

std::string splitSummary(const LmData& d) {
  const int64_t unk = countUnk(d.valid);
  return fmt::format("{} train, {} valid ({} training targets{}); {}", d.train.size(),
                     d.valid.size(), countTargets(d.train),
                     unk ? fmt::format(", {} <unk> in valid", unk) : std::string(),
                     d.vocab.summary());
}

LmData linesData(const std::vector<std::string>& lines, const LmOptions& o, const Vocab* given) {
  const bool lowercase = given ? given->lowercase() : o.lowercase;
  const TokenizerKind kind = given ? given->kind() : o.tokenizer;
  // Which side each line is on: a hash of its normalized text and the seed.
  std::vector<char> isValid(lines.size());
  std::vector<std::string> trainTexts;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string key = normalizeText(lines[i]);
    if (lowercase) key = asciiLower(key);
    Rng side(mixSeed(o.seed, fnv1a(key)));
    isValid[i] = o.validFraction >= 1 || side.uniform() < o.validFraction;
    if (!isValid[i]) trainTexts.push_back(lines[i]);
  }
  LmData d;
  if (given) {
    d.vocab = *given;
  } else if (kind == TokenizerKind::sentencepiece) {
    if (trainTexts.empty()) throw DataError("text: error: no lines left for training");
    d.vocab = Vocab::trainSentencePiece(trainTexts, lowercase, o.sentencePieceVocab);
  } else {
    d.vocab = Vocab(kind, lowercase);
  }
  // Lines of more than maxTokens targets (their ids and eos) are dropped, before the
  // vocabulary counts them.
  std::vector<std::vector<std::string>> tokens(lines.size());
  std::vector<char> kept(lines.size());
  TokenCounts counts;
  int64_t dropped = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    tokens[i] = d.vocab.tokenize(lines[i]);
    const auto n = static_cast<int64_t>(tokens[i].size());
    kept[i] = n > 0 && n + 1 <= o.maxTokens;
    if (!kept[i]) ++dropped;
    if (kept[i] && !isValid[i] && !given && kind != TokenizerKind::sentencepiece)
      counts.add(tokens[i]);
  }
  if (!given && kind != TokenizerKind::sentencepiece)
    d.vocab = Vocab::build(kind, lowercase, counts, o.minCount, o.maxVocab);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!kept[i]) continue;
    std::vector<int64_t> seq;
    seq.reserve(tokens[i].size() + 2);
    seq.push_back(Vocab::kBos);
    for (int64_t id : d.vocab.encode(tokens[i])) seq.push_back(id);
    seq.push_back(Vocab::kEos);
    (isValid[i] ? d.valid : d.train).push_back(std::move(seq));
  }
  if (d.train.empty() && o.validFraction < 1)
    throw DataError(fmt::format(
        "text: error: no training sequences: of {} lines, {} are longer than {} tokens and the "
        "rest went to validation",
        lines.size(), dropped, o.maxTokens));
  d.summary = fmt::format("text: {} lines as sequences, {} over {} tokens dropped; {}",
                          lines.size(), dropped, o.maxTokens, splitSummary(d));
  return d;
}

LmData blocksData(const std::vector<std::string>& lines, const LmOptions& o, const Vocab* given) {
  if (o.blockLength < 1) throw std::invalid_argument("lm data: blockLength must be >= 1");
  const bool lowercase = given ? given->lowercase() : o.lowercase;
  const TokenizerKind kind = given ? given->kind() : o.tokenizer;
  LmData d;
  if (given) {
    d.vocab = *given;
  } else if (kind == TokenizerKind::sentencepiece) {
    // The blocks are not known before tokenizing: train on the lines of the text's first
    // 1 - validFraction of characters.
    size_t total = 0;
    for (const auto& l : lines) total += l.size();
    const double cut = (1 - std::clamp(o.validFraction, 0.0, 1.0)) * static_cast<double>(total);
    std::vector<std::string> texts;
    size_t at = 0;
    for (const auto& l : lines) {
      at += l.size();
      if (static_cast<double>(at) > cut && !texts.empty()) break;
      texts.push_back(l);
    }
    d.vocab = Vocab::trainSentencePiece(texts, lowercase, o.sentencePieceVocab);
  } else {
    d.vocab = Vocab(kind, lowercase);
  }
  LocalTokens local;
  std::vector<int64_t> stream = {kLocalBos};
  for (const auto& l : lines) {
    for (std::string& t : d.vocab.tokenize(l)) stream.push_back(local.add(std::move(t)));
    stream.push_back(kLocalEos);
  }
  const auto L = static_cast<size_t>(o.blockLength);
  const size_t blocks = (stream.size() - 1 + L - 1) / L;  // stream has >= 2 ids
  const size_t valid = validCount(blocks, o.validFraction), train = blocks - valid;
  if (train == 0 && o.validFraction < 1)
    throw DataError("text: error: no training blocks: the text is too short");
  if (!given && kind != TokenizerKind::sentencepiece) {
    std::vector<int64_t> freq(local.names.size(), 0);
    const size_t trainEnd = std::min(stream.size(), train * L + 1);
    for (size_t p = 0; p < trainEnd; ++p)
      if (stream[p] >= 0) ++freq[static_cast<size_t>(stream[p])];
    TokenCounts counts;
    for (size_t t = 0; t < local.names.size(); ++t) counts.add(local.names[t], freq[t]);
    d.vocab = Vocab::build(kind, lowercase, counts, o.minCount, o.maxVocab);
  }
  std::vector<int64_t> toVocab(local.names.size());
  for (size_t t = 0; t < local.names.size(); ++t) toVocab[t] = d.vocab.id(local.names[t]);
  for (int64_t& id : stream)
    id = id == kLocalBos   ? Vocab::kBos
         : id == kLocalEos ? Vocab::kEos
                           : toVocab[static_cast<size_t>(id)];
  for (size_t k = 0; k < blocks; ++k) {
    const size_t begin = k * L, end = std::min(stream.size(), begin + L + 1);
    (k < train ? d.train : d.valid)
        .emplace_back(stream.begin() + static_cast<std::ptrdiff_t>(begin),
                      stream.begin() + static_cast<std::ptrdiff_t>(end));
  }
  d.summary = fmt::format("text: {} lines packed into {} blocks of {} targets; {}", lines.size(),
                          blocks, o.blockLength, splitSummary(d));
  return d;
}

LmData makeLmData(const std::vector<std::string>& lines, const LmOptions& o, const Vocab* given) {
  if (lines.empty()) throw DataError("text: error: no lines of text");
  return o.packing == LmOptions::Packing::lines ? linesData(lines, o, given)
                                                : blocksData(lines, o, given);
}

}  // namespace

LmData lmData(const std::vector<std::string>& lines, const LmOptions& options) {
  return makeLmData(lines, options, nullptr);
}

LmData lmDataWithVocab(const std::vector<std::string>& lines, const LmOptions& options,
                       Vocab vocab) {
  return makeLmData(lines, options, &vocab);
}

// ---- LmBatcher ----

namespace {

int64_t targets(const std::vector<int64_t>& seq) { return static_cast<int64_t>(seq.size()) - 1; }

// Targets per sequence; -1 for an empty one (refused as fewer than 2 ids).
std::vector<int64_t> targetCounts(const std::vector<std::vector<int64_t>>& seqs) {
  std::vector<int64_t> n;
  n.reserve(seqs.size());
  for (const auto& s : seqs) n.push_back(targets(s));
  return n;
}

}  // namespace

LmBatcher::LmBatcher(std::vector<std::vector<int64_t>> seqs, BatchingOptions options,
                     std::vector<BucketDims> buckets)
    : seqs_(std::move(seqs)),
      options_(options),
      buckets_(targetCounts(seqs_), options_, std::move(buckets), "lm",
               "a sequence of fewer than 2 ids") {}

FieldBatch LmBatcher::makeBatch(const BatchPlan& plan) const {
  FieldBatch batch = buckets_.startBatch(plan);
  const int64_t B = options_.batchSize, L = buckets_.length(plan.bucket);
  Tensor tokens(TensorType{DType::i64, {B, L}}), tgt(TensorType{DType::i64, {B, L}});
  int64_t* in = tokens.as<int64_t>();
  int64_t* out = tgt.as<int64_t>();
  for (int64_t r = 0; r < B; ++r) {
    const auto& s = seqs_.at(plan.examples[static_cast<size_t>(r % batch.rows)]);
    const int64_t n = targets(s);
    if (n > L) throw std::invalid_argument("lm batching: a sequence longer than its bucket");
    std::copy(s.begin(), s.end() - 1, in + r * L);
    if (r < batch.rows) {  // filler rows keep all-pad targets
      std::copy(s.begin() + 1, s.end(), out + r * L);
      batch.tokens += n;
    }
  }
  batch.weight = static_cast<double>(batch.tokens);
  batch.fields.emplace("tokens", std::move(tokens));
  batch.fields.emplace("targets", std::move(tgt));
  return batch;
}

// ---- The built-in text ----

namespace {

constexpr std::array<const char*, 21> kNumbers = {
    "zero",     "one",     "two",     "three",     "four",     "five",     "six",
    "seven",    "eight",   "nine",    "ten",       "eleven",   "twelve",   "thirteen",
    "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"};
constexpr std::array<const char*, 28> kOrdinals = {
    "first",        "second",         "third",        "fourth",        "fifth",
    "sixth",        "seventh",        "eighth",       "ninth",         "tenth",
    "eleventh",     "twelfth",        "thirteenth",   "fourteenth",    "fifteenth",
    "sixteenth",    "seventeenth",    "eighteenth",   "nineteenth",    "twentieth",
    "twenty-first", "twenty-second",  "twenty-third", "twenty-fourth", "twenty-fifth",
    "twenty-sixth", "twenty-seventh", "twenty-eighth"};
constexpr std::array<const char*, 7> kDays = {"monday", "tuesday",  "wednesday", "thursday",
                                              "friday", "saturday", "sunday"};
constexpr std::array<const char*, 12> kMonths = {"january",   "february", "march",    "april",
                                                 "may",       "june",     "july",     "august",
                                                 "september", "october",  "november", "december"};
// Adjectives start with a consonant, so "a" fits before every one of them.
constexpr std::array<const char*, 8> kAdjectives = {"small", "big",   "red",    "blue",
                                                    "green", "happy", "little", "yellow"};
constexpr std::array<const char*, 10> kNouns = {"cat", "dog",  "bird", "fish", "girl",
                                                "boy", "ball", "box",  "book", "tree"};
constexpr std::array<const char*, 7> kVerbs = {"sees",  "likes",  "finds", "has",
                                               "wants", "pushes", "takes"};
constexpr std::array<const char*, 6> kPlaces = {"in the garden", "on the table", "near the river",
                                                "under the bed", "at school",    "in the box"};

template <class A>
const char* pick(const A& a, Rng& rng) {
  return a[static_cast<size_t>(rng.below(a.size()))];
}

std::string nounPhrase(Rng& rng, bool subject) {
  std::string s = subject || rng.below(2) ? "the" : "a";
  if (rng.below(3) != 0) s = s + " " + pick(kAdjectives, rng);
  return s + " " + pick(kNouns, rng);
}

std::string sentenceLine(Rng& rng) {
  std::string s = nounPhrase(rng, true) + " " + pick(kVerbs, rng) + " " + nounPhrase(rng, false);
  if (rng.below(2)) s = s + " " + pick(kPlaces, rng);
  return s + ".";
}

std::string countingLine(Rng& rng) {
  const auto k = static_cast<size_t>(3 + rng.below(5));  // 3..7 numbers
  const auto start = static_cast<size_t>(1 + rng.below(21 - k));
  std::string s;
  for (size_t i = 0; i < k; ++i) s = s + (i ? " " : "") + kNumbers[start + i];
  return s + ".";
}

std::string arithmeticLine(Rng& rng) {
  auto a = static_cast<size_t>(rng.below(10)), b = static_cast<size_t>(rng.below(10));
  if (rng.below(2))
    return fmt::format("{} plus {} is {}.", kNumbers[a], kNumbers[b], kNumbers[a + b]);
  if (a < b) std::swap(a, b);
  return fmt::format("{} minus {} is {}.", kNumbers[a], kNumbers[b], kNumbers[a - b]);
}

std::string dayLine(Rng& rng) {
  const auto d = static_cast<size_t>(rng.below(kDays.size()));
  if (rng.below(2)) return fmt::format("after {} comes {}.", kDays[d], kDays[(d + 1) % 7]);
  return fmt::format("today is {}, the {} of {}.", kDays[d], pick(kOrdinals, rng),
                     pick(kMonths, rng));
}

}  // namespace

std::vector<std::string> builtinText(uint64_t seed, int64_t lines) {
  if (lines < 0) throw std::invalid_argument("builtinText: a negative number of lines");
  Rng rng(mixSeed(seed, 41));
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(lines));
  for (int64_t i = 0; i < lines; ++i) {
    const uint64_t kind = rng.below(20);  // 7 sentences, 4 counting, 5 arithmetic, 4 days
    out.push_back(kind < 7    ? sentenceLine(rng)
                  : kind < 11 ? countingLine(rng)
                  : kind < 16 ? arithmeticLine(rng)
                              : dayLine(rng));
  }
  return out;
}

}  // namespace tgc::data
