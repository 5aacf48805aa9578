#include "runtime/data/classify_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <stdexcept>

#include "runtime/data/data_file.h"
#include "runtime/data/error.h"
#include "runtime/data/rng.h"
#include "runtime/data/text.h"

namespace tgc::data {

std::vector<LabeledText> parseClassifyTsv(std::string_view text, std::string_view name,
                                          LabelColumn column) {
  const bool first = column == LabelColumn::first;
  std::vector<LabeledText> out;
  const auto lines = splitUtf8Lines(text, name);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (normalizeText(line).empty()) continue;
    const size_t tab = first ? line.find('\t') : line.rfind('\t');
    if (tab == std::string_view::npos)
      throw DataError(fmt::format("{}:{}: error: expected {}, found no tab", name, i + 1,
                                  first ? "label<TAB>text" : "text<TAB>label"));
    const std::string_view left = line.substr(0, tab), right = line.substr(tab + 1);
    LabeledText e{normalizeText(first ? left : right), normalizeText(first ? right : left),
                  fmt::format("{}:{}", name, i + 1)};
    if (e.label.empty()) throw DataError(fmt::format("{}: error: empty label", e.where));
    if (e.text.empty()) throw DataError(fmt::format("{}: error: empty text", e.where));
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<LabeledText> readClassifyTsv(const std::string& path, LabelColumn column) {
  auto examples = parseClassifyTsv(readDataFile(path, "classification TSV"), path, column);
  if (examples.empty()) throw DataError(fmt::format("{}: error: no examples in the file", path));
  return examples;
}

namespace {

// "a, b, c" (the first 20, then how many in all).
std::string labelList(const std::vector<std::string>& labels) {
  std::string s;
  for (size_t i = 0; i < labels.size() && i < 20; ++i) s += (i ? ", " : "") + labels[i];
  if (labels.size() > 20) s += fmt::format(", ... ({} in all)", labels.size());
  return labels.empty() ? "none" : s;
}

// The id of a label in a sorted list, or -1.
int64_t findLabel(const std::vector<std::string>& labels, const std::string& label) {
  const auto it = std::lower_bound(labels.begin(), labels.end(), label);
  return it != labels.end() && *it == label ? it - labels.begin() : -1;
}

ClassifyData makeClassifyData(const std::vector<LabeledText>& examples, const ClassifyOptions& o,
                              const Vocab* givenVocab,
                              const std::vector<std::string>* givenLabels) {
  if (examples.empty()) throw DataError("classification: error: no examples");
  if (o.maxTokens < 1) throw std::invalid_argument("classification: maxTokens must be >= 1");
  const bool lowercase = givenVocab ? givenVocab->lowercase() : o.lowercase;
  const TokenizerKind kind = givenVocab ? givenVocab->kind() : o.tokenizer;
  std::vector<char> isValid(examples.size());
  std::vector<std::string> trainTexts;
  std::set<std::string> trainLabels;
  for (size_t i = 0; i < examples.size(); ++i) {
    std::string key = normalizeText(examples[i].text);
    if (lowercase) key = asciiLower(key);
    Rng side(mixSeed(o.seed, fnv1a(key)));
    isValid[i] = o.validFraction >= 1 || side.uniform() < o.validFraction;
    if (!isValid[i]) {
      trainTexts.push_back(examples[i].text);
      trainLabels.insert(examples[i].label);
    }
  }
  ClassifyData d;
  if (givenLabels) {
    d.labels = *givenLabels;
    for (size_t i = 1; i < d.labels.size(); ++i)
      if (!(d.labels[i - 1] < d.labels[i]))
        throw DataError(fmt::format(
            "classification: error: stored labels are not sorted and distinct ('{}', '{}')",
            d.labels[i - 1], d.labels[i]));
  } else {
    if (trainTexts.empty())
      throw DataError(
          fmt::format("classification: error: no training examples: all {} went to validation",
                      examples.size()));
    d.labels.assign(trainLabels.begin(), trainLabels.end());
  }
  if (givenVocab)
    d.vocab = *givenVocab;
  else if (kind == TokenizerKind::sentencepiece)
    d.vocab = Vocab::trainSentencePiece(trainTexts, lowercase, o.sentencePieceVocab);
  else
    d.vocab = Vocab(kind, lowercase);
  const bool buildVocab = !givenVocab && kind != TokenizerKind::sentencepiece;
  std::vector<std::vector<std::string>> tokens(examples.size());
  TokenCounts counts;
  int64_t truncated = 0, empty = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    tokens[i] = d.vocab.tokenize(examples[i].text);
    if (static_cast<int64_t>(tokens[i].size()) > o.maxTokens) {
      tokens[i].resize(static_cast<size_t>(o.maxTokens));
      ++truncated;
    }
    if (buildVocab && !isValid[i]) counts.add(tokens[i]);
  }
  if (buildVocab) d.vocab = Vocab::build(kind, lowercase, counts, o.minCount, o.maxVocab);
  for (size_t i = 0; i < examples.size(); ++i) {
    const LabeledText& e = examples[i];
    const int64_t label = findLabel(d.labels, e.label);
    if (label < 0)
      throw DataError(
          givenLabels ? fmt::format("{}: error: label '{}' was not seen in training (labels: {})",
                                    e.where, e.label, labelList(d.labels))
                      : fmt::format("{}: error: label '{}' is in the validation split but not in "
                                    "training (labels: {})",
                                    e.where, e.label, labelList(d.labels)));
    if (tokens[i].empty()) {
      ++empty;
      continue;
    }
    (isValid[i] ? d.valid : d.train).push_back({d.vocab.encode(tokens[i]), label, e.where});
  }
  std::vector<int64_t> perClass(d.labels.size(), 0);
  for (const auto& e : d.train) ++perClass[static_cast<size_t>(e.label)];
  std::string classes;
  for (size_t c = 0; c < d.labels.size() && c < 10; ++c)
    classes += fmt::format("{}{} {}", c ? ", " : "", d.labels[c], perClass[c]);
  if (d.labels.size() > 10) classes += ", ...";
  d.summary = fmt::format(
      "classification: {} examples, {} train, {} valid; {} classes (train: {}); {} texts "
      "truncated to {} tokens{}; {}",
      examples.size(), d.train.size(), d.valid.size(), d.labels.size(), classes, truncated,
      o.maxTokens, empty ? fmt::format(", {} without tokens dropped", empty) : std::string(),
      d.vocab.summary());
  return d;
}

}  // namespace

int64_t ClassifyData::labelId(const std::string& label) const {
  const int64_t id = findLabel(labels, label);
  if (id < 0)
    throw DataError(fmt::format("error: label '{}' was not seen in training (labels: {})", label,
                                labelList(labels)));
  return id;
}

ClassifyData classifyData(const std::vector<LabeledText>& examples, const ClassifyOptions& o) {
  return makeClassifyData(examples, o, nullptr, nullptr);
}

ClassifyData classifyDataWithVocab(const std::vector<LabeledText>& examples,
                                   const ClassifyOptions& o, Vocab vocab,
                                   std::vector<std::string> labels) {
  return makeClassifyData(examples, o, &vocab, &labels);
}

// ---- ClassifyBatcher ----

namespace {

std::vector<int64_t> tokenCounts(const std::vector<LabeledIds>& examples) {
  std::vector<int64_t> n;
  n.reserve(examples.size());
  for (const auto& e : examples) n.push_back(static_cast<int64_t>(e.ids.size()));
  return n;
}

}  // namespace

ClassifyBatcher::ClassifyBatcher(std::vector<LabeledIds> examples, BatchingOptions options,
                                 std::vector<BucketDims> buckets)
    : examples_(std::move(examples)),
      options_(options),
      buckets_(tokenCounts(examples_), options_, std::move(buckets), "classification",
               "an example without tokens") {}

FieldBatch ClassifyBatcher::makeBatch(const BatchPlan& plan) const {
  FieldBatch batch = buckets_.startBatch(plan);
  const int64_t B = options_.batchSize, L = buckets_.length(plan.bucket);
  Tensor tokens(TensorType{DType::i64, {B, L}}), labels(TensorType{DType::i64, {B}});
  int64_t* t = tokens.as<int64_t>();
  int64_t* l = labels.as<int64_t>();
  for (int64_t r = 0; r < B; ++r) {
    const LabeledIds& e = examples_.at(plan.examples[static_cast<size_t>(r % batch.rows)]);
    const auto n = static_cast<int64_t>(e.ids.size());
    if (n > L)
      throw std::invalid_argument("classification batching: an example longer than its bucket");
    std::copy(e.ids.begin(), e.ids.end(), t + r * L);
    l[r] = e.label;
    if (r < batch.rows) batch.tokens += n;
  }
  batch.weight = static_cast<double>(batch.rows);
  batch.fields.emplace("tokens", std::move(tokens));
  batch.fields.emplace("labels", std::move(labels));
  return batch;
}

// ---- The built-in set ----

namespace {

using Pool = std::array<const char*, 15>;
// In label order: food, music, sports, weather.
constexpr std::array<const char*, 4> kClasses = {"food", "music", "sports", "weather"};
constexpr std::array<Pool, 4> kPools = {{
    {"pizza", "soup", "bread", "cheese", "pasta", "salad", "rice", "noodles", "cake", "apples",
     "curry", "butter", "sandwich", "dinner", "cookies"},
    {"guitar", "song", "piano", "concert", "melody", "band", "drums", "violin", "chorus", "album",
     "singer", "rhythm", "orchestra", "lyrics", "jazz"},
    {"football", "tennis", "match", "goal", "team", "coach", "stadium", "race", "score", "referee",
     "league", "basketball", "player", "tournament", "marathon"},
    {"rain", "snow", "wind", "storm", "sunshine", "fog", "thunder", "clouds", "frost", "heat",
     "drizzle", "hail", "breeze", "forecast", "humidity"},
}};
constexpr std::array<const char*, 7> kOpeners = {"yesterday",    "today", "last week", "honestly",
                                                 "this morning", "again", "on monday"};
constexpr std::array<const char*, 8> kSubjects = {
    "i", "we", "they", "my friend", "my sister", "the teacher", "our neighbor", "everyone"};
constexpr std::array<const char*, 10> kVerbs = {
    "liked",   "talked about", "remembered",  "watched",     "noticed",
    "enjoyed", "hated",        "wrote about", "asked about", "dreamed about"};
constexpr std::array<const char*, 6> kJoins = {"and", "with", "after", "before", "near", "like"};

template <class A>
const char* pick(const A& a, Rng& rng) {
  return a[static_cast<size_t>(rng.below(a.size()))];
}

}  // namespace

std::vector<LabeledText> builtinClassification(uint64_t seed, int64_t n) {
  if (n < 0) throw std::invalid_argument("builtinClassification: a negative size");
  Rng rng(mixSeed(seed, 43));
  std::vector<LabeledText> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const auto c = static_cast<size_t>(rng.below(kClasses.size()));
    std::vector<const char*> nouns;
    const uint64_t own = 2 + rng.below(2);  // 2 or 3 words of the class
    for (uint64_t k = 0; k < own; ++k) nouns.push_back(pick(kPools[c], rng));
    if (rng.below(5) < 2) {  // a word of another class, 40% of the time
      const auto other = (c + 1 + static_cast<size_t>(rng.below(kClasses.size() - 1))) % 4;
      nouns.push_back(pick(kPools[other], rng));
    }
    shuffle(nouns, rng);
    std::string s;
    if (rng.below(2)) s = std::string(pick(kOpeners, rng)) + " ";
    s = s + pick(kSubjects, rng) + " " + pick(kVerbs, rng) + " the " + nouns[0];
    for (size_t k = 1; k < nouns.size(); ++k) s = s + " " + pick(kJoins, rng) + " the " + nouns[k];
    out.push_back({kClasses[c], s + ".", fmt::format("built-in:{}", i + 1)});
  }
  return out;
}

}  // namespace tgc::data
