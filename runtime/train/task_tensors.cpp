// The tensors task: a safetensors file or a folder of shards whose tensors feed the graph's
// inputs by the binding; batches are rows, shuffled per epoch; validation reports the loss.
// Besides `batch`, its dims and values are the file's shapes: "x.shape[1]" is axis 1 of x.
#include <fmt/format.h>

#include <stdexcept>

#include "runtime/data/tensor_data.h"
#include "runtime/train/task_kinds.h"

namespace tgc::train {

namespace {

class TensorsTask final : public Task {
 public:
  TensorsTask(const DataSpec& spec, const DataBinding& binding, const BatchOptions& batching)
      : binding_(binding), batchSize_(batching.batchSize) {
    data::TensorData all = data::readTensorData(spec.path);
    for (const BindingEntry& e : binding_.inputs)
      if (!all.tensors.contains(e.from))
        throw std::runtime_error(fmt::format(
            "{}: error: no tensor '{}' for input {} (bound at {}); the file has {}", all.source,
            e.from, e.name, e.loc, tensorNames(all)));
    // Axis i > 0 of each tensor, by the name a binding gives it.
    for (const auto& [name, t] : all.tensors)
      for (size_t i = 1; i < t.shape().size(); ++i)
        shapes_.emplace(fmt::format("{}.shape[{}]", name, i), t.shape()[i]);
    summary_ = all.summary;
    data::TensorSplit split = data::splitTensorData(all, spec.validFraction, spec.seed);
    data::BatchingOptions bo;
    bo.batchSize = batching.batchSize;
    bo.dropPartial = true;
    train_ = std::make_unique<data::TensorBatcher>(std::move(split.train), bo);
    valid_ = std::move(split.valid);
    // One bucket, whatever the split holds (evaluation may have no training rows).
    BucketDims b{{"batch", batching.batchSize}};
    for (const auto& kv : shapes_) b.insert(kv);
    buckets_.push_back(std::move(b));
  }

  std::string name() const override { return "tensors"; }
  std::string summary() const override { return summary_; }
  std::optional<int64_t> value(const std::string& key) const override {
    auto it = shapes_.find(key);
    if (it == shapes_.end()) return std::nullopt;
    return it->second;
  }
  const std::vector<BucketDims>& buckets() const override { return buckets_; }
  std::vector<data::BatchPlan> planEpoch(uint64_t seed, uint64_t epoch) const override {
    return train_->planEpoch(seed, epoch);
  }
  FieldBatch makeBatch(const data::BatchPlan& plan) const override {
    FieldBatch b = train_->makeBatch(plan);
    b.dims = buckets_.front();
    return b;
  }
  int64_t trainExamples() const override { return train_->data().rows; }
  int64_t validExamples() const override { return valid_.rows; }
  std::string metric() const override { return ""; }

  void checkInputs(const std::map<std::string, TensorType>& types) const override {
    std::map<std::string, TensorType> expected;
    for (const BindingEntry& e : binding_.inputs) {
      auto it = types.find(e.name);
      if (it != types.end()) expected.emplace(e.from, it->second);
    }
    data::checkTensorFields(train_->data(), expected);
  }

  // The graph's loss over the validation rows; the rows that fill up the last batch repeat
  // real ones, so that batch's loss is weighted by its real rows (exact for a per-row mean
  // when the batch has no repeats).
  ValidRow validate(ValidationContext& ctx) override {
    ValidRow v;
    if (valid_.rows == 0) return v;
    const int64_t n = ctx.limit > 0 ? std::min(ctx.limit, valid_.rows) : valid_.rows;
    std::vector<size_t> rows(static_cast<size_t>(n));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = i;
    data::BatchingOptions bo;
    bo.batchSize = batchSize_;
    bo.dropPartial = false;
    const data::TensorBatcher batcher(data::selectRows(valid_, rows), bo);
    std::vector<FieldBatch> batches;
    for (const data::BatchPlan& plan : batcher.planEpoch(ctx.seed, 0)) {
      FieldBatch b = batcher.makeBatch(plan);
      b.dims = buckets_.front();
      batches.push_back(std::move(b));
    }
    v.loss = averageLoss(ctx, batches);
    return v;
  }

  void save(Checkpoint& c) const override {
    c.taskState = fmt::format("{{\"task\": \"tensors\", \"rows\": {}}}", train_->data().rows + valid_.rows);
  }
  void checkResume(const Checkpoint& c) const override { (void)c; }

 private:
  static std::string tensorNames(const data::TensorData& d) {
    std::string s;
    for (const auto& [name, t] : d.tensors) s += (s.empty() ? "" : ", ") + name + " " + t.type().str();
    return s;
  }

  DataBinding binding_;
  int64_t batchSize_ = 0;
  std::map<std::string, int64_t> shapes_;
  std::string summary_;
  std::unique_ptr<data::TensorBatcher> train_;
  data::TensorData valid_;
  std::vector<BucketDims> buckets_;
};

}  // namespace

std::unique_ptr<Task> makeTensorsTask(const DataSpec& spec, const DataBinding& binding,
                                      const BatchOptions& batching) {
  return std::make_unique<TensorsTask>(spec, binding, batching);
}

}  // namespace tgc::train
