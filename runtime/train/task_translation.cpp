#include "runtime/train/task_translation.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "runtime/train/evaluate.h"

namespace tgc::train {

FieldBatch translationFields(const data::Batch& b) {
  FieldBatch f;
  f.fields.emplace("source", b.src);
  f.fields.emplace("target_in", b.tgtIn);
  f.fields.emplace("target_out", b.tgtOut);
  f.examples = b.examples;
  f.rows = b.rows;
  f.tokens = b.srcTokens + b.tgtTokens;
  f.weight = static_cast<double>(b.tgtTokens);
  f.dims = {{"batch", b.src.shape()[0]},
            {"source_length", b.src.shape()[1]},
            {"target_length", b.tgtIn.shape()[1]}};
  return f;
}

TranslationTask::TranslationTask(const DataSpec& spec, const BatchOptions& batching)
    : data_(loadData(spec)), batchSize_(batching.batchSize) {
  data::BatchingOptions bo;
  bo.batchSize = batching.batchSize;
  bo.numBuckets = batching.buckets;
  bo.dropPartial = true;
  batcher_ = std::make_unique<data::Batcher>(data::encodeSplit(data_, data_.train), bo);
  for (const auto& p : data_.train)
    maxTargetTokens_ = std::max<int64_t>(maxTargetTokens_, static_cast<int64_t>(p.tgt.size()));
  for (const data::BucketShape& b : batcher_->buckets())
    buckets_.push_back({{"batch", batching.batchSize},
                        {"source_length", b.srcLen},
                        {"target_length", b.tgtLen}});
}

TranslationTask::~TranslationTask() = default;

std::optional<int64_t> TranslationTask::value(const std::string& key) const {
  if (key == "source_vocab") return data_.srcVocab.size();
  if (key == "target_vocab") return data_.tgtVocab.size();
  if (key == "pad") return data::Vocab::kPad;
  return std::nullopt;
}

FieldBatch TranslationTask::makeBatch(const data::BatchPlan& plan) const {
  return translationFields(batcher_->makeBatch(plan));
}

DecodeOptions TranslationTask::decodeOptions(int64_t decodeBatch) const {
  DecodeOptions d;
  d.batchSize = decodeBatch;
  Checkpoint c;
  c.maxTargetTokens = maxTargetTokens_;
  d.lengthCap = c.lengthCap();
  return d;
}

Translator& TranslationTask::translator(const ModelSpec& model,
                                        std::map<std::string, Tensor> params,
                                        runtime::ExecOptions exec) {
  if (!translator_) {
    exec.updateInPlace = false;
    translator_ = std::make_unique<Translator>(model, std::move(params), exec);
  } else {
    translator_->setParams(std::move(params));
  }
  return *translator_;
}

ValidRow TranslationTask::validate(ValidationContext& ctx) {
  const auto& split = data_.valid;
  const size_t n = ctx.limit > 0 ? std::min(split.size(), static_cast<size_t>(ctx.limit)) : split.size();
  ValidRow v;
  if (n == 0) return v;
  const std::vector<data::TokenizedPair> subset(split.begin(),
                                                split.begin() + static_cast<std::ptrdiff_t>(n));
  // Loss: one bucket; the rows that fill up the last batch get all-padding targets, so they
  // add no tokens and the result is the exact token average.
  if (!validBatcher_) {
    data::BatchingOptions bo;
    bo.batchSize = batchSize_;
    bo.numBuckets = 1;
    bo.dropPartial = false;
    validBatcher_ = std::make_unique<data::Batcher>(data::encodeSplit(data_, subset), bo);
  }
  std::vector<FieldBatch> batches;
  for (const data::BatchPlan& plan : validBatcher_->planEpoch(ctx.seed, 0)) {
    data::Batch b = validBatcher_->makeBatch(plan);
    const int64_t T = b.tgtOut.shape()[1];
    for (int64_t i = b.rows * T; i < b.tgtOut.numel(); ++i) b.tgtOut.setI(i, 0);
    batches.push_back(translationFields(b));
  }
  v.loss = averageLoss(ctx, batches);

  if (!ctx.model || !ctx.parameters) return v;
  Translator& tr = translator(*ctx.model, ctx.parameters(), ctx.exec);
  const double compiledBefore = tr.compileSeconds();
  const EvalResult r = evaluatePairs(tr, data_, subset, decodeOptions(ctx.decodeBatch));
  v.exactMatch = r.exactMatch;
  v.bleu = r.bleu;
  decodeSecondsPerSentence_ =
      (r.seconds - (tr.compileSeconds() - compiledBefore)) / static_cast<double>(n);
  return v;
}

void TranslationTask::save(Checkpoint& c) const {
  c.maxTargetTokens = maxTargetTokens_;
  c.srcVocab = data_.srcVocab;
  c.tgtVocab = data_.tgtVocab;
}

void TranslationTask::checkResume(const Checkpoint& c) const {
  if (!(c.srcVocab == data_.srcVocab) || !(c.tgtVocab == data_.tgtVocab))
    throw std::runtime_error(
        "the data no longer gives the checkpoint's vocabularies (was the corpus file changed?)");
}

}  // namespace tgc::train
