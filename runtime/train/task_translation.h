// The translation task: the built-in numerals, a Tatoeba TSV or aligned files (spec.h's
// loadData), batched by (source, target) length buckets; validation decodes greedily and
// reports exact match (built-in) or BLEU (corpora).
#pragma once

#include <memory>

#include "runtime/data/dataset.h"
#include "runtime/train/task.h"
#include "runtime/train/translator.h"

namespace tgc::train {

class TranslationTask final : public Task {
 public:
  TranslationTask(const DataSpec& spec, const BatchOptions& batching);
  ~TranslationTask() override;

  std::string name() const override { return "translation"; }
  std::string summary() const override { return data_.summary; }
  std::optional<int64_t> value(const std::string& key) const override;
  const std::vector<BucketDims>& buckets() const override { return buckets_; }
  std::vector<data::BatchPlan> planEpoch(uint64_t seed, uint64_t epoch) const override {
    return batcher_->planEpoch(seed, epoch);
  }
  FieldBatch makeBatch(const data::BatchPlan& plan) const override;
  int64_t trainExamples() const override { return static_cast<int64_t>(batcher_->data().size()); }
  int64_t validExamples() const override { return static_cast<int64_t>(data_.valid.size()); }
  std::string metric() const override { return data_.test.empty() ? "bleu" : "exact_match"; }
  ValidRow validate(ValidationContext& ctx) override;
  void save(Checkpoint& c) const override;
  void checkResume(const Checkpoint& c) const override;

  const data::TranslationData& data() const { return data_; }
  const data::Batcher& batcher() const { return *batcher_; }
  // A translator over `params` (made once, then given the new parameters).
  Translator& translator(const ModelSpec& model, std::map<std::string, Tensor> params,
                         runtime::ExecOptions exec);
  // Greedy decoding as validation does it (batch, length cap from the training data).
  DecodeOptions decodeOptions(int64_t decodeBatch) const;
  // Seconds per sentence of the last validation's decoding (compiles excluded), or 0.
  double decodeSecondsPerSentence() const { return decodeSecondsPerSentence_; }

 private:
  data::TranslationData data_;
  std::unique_ptr<data::Batcher> batcher_, validBatcher_;
  std::vector<BucketDims> buckets_;
  int64_t batchSize_ = 0;
  int64_t maxTargetTokens_ = 0;
  std::unique_ptr<Translator> translator_;
  double decodeSecondsPerSentence_ = 0;
};

// The fields of a translation batch.
FieldBatch translationFields(const data::Batch& b);

}  // namespace tgc::train
