// The language-modelling task: plain text (a file, or the built-in text) as lines or packed
// blocks; validation reports the token-averaged loss and its perplexity.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "runtime/train/data_export.h"
#include "runtime/train/task_kinds.h"

namespace tgc::train {

using nlohmann::json;

namespace {

data::TokenizerKind tokenizerOf(const std::string& name, data::TokenizerKind fallback) {
  if (name.empty()) return fallback;
  if (name == "chars") return data::TokenizerKind::chars;
  if (name == "words") return data::TokenizerKind::words;
  if (name == "sentencepiece") return data::TokenizerKind::sentencepiece;
  throw std::runtime_error(fmt::format("tokens must be chars, words or sentencepiece, not '{}'", name));
}

class LmTask final : public BatchedTask<data::LmBatcher> {
 public:
  LmTask(const DataSpec& spec, const BatchOptions& batching, const Checkpoint* stored)
      : batchSize_(batching.batchSize) {
    const std::vector<std::string> lines =
        spec.builtin() ? data::builtinText(spec.seed, spec.trainSize) : data::readTextLines(spec.path);
    data_ = stored ? data::lmDataWithVocab(lines, lmOptions(spec),
                                           parseTaskState(stored->taskState, "the checkpoint").vocab)
                   : data::lmData(lines, lmOptions(spec));
    data::BatchingOptions bo;
    bo.batchSize = batching.batchSize;
    bo.numBuckets = spec.packing == "blocks" ? 1 : batching.buckets;
    bo.dropPartial = true;
    batcher_ = std::make_unique<data::LmBatcher>(data_.train, bo);
  }

  std::string name() const override { return "lm"; }
  std::string summary() const override { return data_.summary; }
  std::optional<int64_t> value(const std::string& key) const override {
    if (key == "vocab") return data_.vocab.size();
    if (key == "pad") return data::Vocab::kPad;
    return std::nullopt;
  }
  int64_t validExamples() const override { return static_cast<int64_t>(data_.valid.size()); }
  std::string metric() const override { return "perplexity"; }

  ValidRow validate(ValidationContext& ctx) override {
    ValidRow v;
    const auto& split = data_.valid;
    const size_t n = ctx.limit > 0 ? std::min(split.size(), static_cast<size_t>(ctx.limit)) : split.size();
    if (n == 0) return v;
    // One bucket over the scored sequences; the rows that fill up the last batch have
    // all-pad targets, so the weighted average is the exact mean over target tokens.
    if (!valid_ || validCount_ != n) {
      data::BatchingOptions bo;
      bo.batchSize = batchSize_;
      bo.numBuckets = 1;
      bo.dropPartial = false;
      valid_ = std::make_unique<data::LmBatcher>(
          std::vector<std::vector<int64_t>>(split.begin(), split.begin() + static_cast<std::ptrdiff_t>(n)), bo);
      validCount_ = n;
    }
    std::vector<FieldBatch> batches;
    for (const data::BatchPlan& plan : valid_->planEpoch(ctx.seed, 0))
      batches.push_back(valid_->makeBatch(plan));
    v.loss = averageLoss(ctx, batches);
    v.perplexity = std::exp(v.loss);
    return v;
  }

  std::string report(ValidationContext& ctx, int samples) override {
    return lmSamples(ctx, data_, samples);
  }

  std::string exportJson(const DataExportInfo& info) const override {
    return lmDataExportJson(data_, *batcher_, info);
  }

  void save(Checkpoint& c) const override { c.taskState = taskStateJson({"lm", data_.vocab, {}}); }
  void checkResume(const Checkpoint& c) const override {
    const TaskState s = parseTaskState(c.taskState, "the checkpoint");
    if (s.task != "lm" || !(s.vocab == data_.vocab))
      throw std::runtime_error(
          "the data no longer gives the checkpoint's vocabulary (was the text file changed?)");
  }

 private:
  data::LmData data_;
  std::unique_ptr<data::LmBatcher> valid_;
  size_t validCount_ = 0;
  int64_t batchSize_ = 0;
};

}  // namespace

data::LmOptions lmOptions(const DataSpec& spec) {
  data::LmOptions o;
  o.tokenizer = tokenizerOf(spec.tokens, data::TokenizerKind::chars);
  o.lowercase = spec.lowercase > 0;
  o.sentencePieceVocab = spec.sentencePieceVocab;
  if (spec.packing != "lines" && spec.packing != "blocks")
    throw std::runtime_error(fmt::format("packing must be lines or blocks, not '{}'", spec.packing));
  o.packing = spec.packing == "blocks" ? data::LmOptions::Packing::blocks : data::LmOptions::Packing::lines;
  o.blockLength = spec.blockLength;
  o.maxTokens = spec.maxTokens;
  o.validFraction = spec.validFraction;
  o.seed = spec.seed;
  return o;
}

data::ClassifyOptions classifyOptions(const DataSpec& spec) {
  data::ClassifyOptions o;
  o.tokenizer = tokenizerOf(spec.tokens, data::TokenizerKind::words);
  o.lowercase = spec.lowercase != 0;
  o.maxTokens = spec.maxTokens;
  o.validFraction = spec.validFraction;
  o.seed = spec.seed;
  o.sentencePieceVocab = spec.sentencePieceVocab;
  return o;
}

std::string taskStateJson(const TaskState& s) {
  json j;
  j["task"] = s.task;
  j["vocab"] = s.vocab.toJson();
  if (s.task == "classification") j["labels"] = s.labels;
  return j.dump();
}

TaskState parseTaskState(const std::string& text, const std::string& where) {
  if (text.empty())
    throw CheckpointError(fmt::format("{}: error: it holds no task state (a translation run's?)", where));
  try {
    const json j = json::parse(text);
    TaskState s;
    s.task = j.at("task").get<std::string>();
    s.vocab = data::Vocab::fromJson(j.at("vocab").get<std::string>(), where + " (vocab)");
    if (s.task == "classification") s.labels = j.at("labels").get<std::vector<std::string>>();
    return s;
  } catch (const json::exception& e) {
    throw CheckpointError(fmt::format("{}: error: invalid task state: {}", where, e.what()));
  }
}

std::unique_ptr<Task> makeLmTask(const DataSpec& spec, const BatchOptions& batching,
                                 const Checkpoint* stored) {
  return std::make_unique<LmTask>(spec, batching, stored);
}

}  // namespace tgc::train
