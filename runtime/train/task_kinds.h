// The tasks besides translation (task_translation.h), made by makeTask (task.h): each in its
// own file, task_lm.cpp, task_classify.cpp, task_tensors.cpp.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/classify_data.h"
#include "runtime/data/lm_data.h"
#include "runtime/train/task.h"

namespace tgc::train {

// A task whose training split is one batcher's (LmBatcher, ClassifyBatcher): the training
// overrides of Task forward to `batcher_`, which the task's constructor makes. (The tensors
// task's buckets carry the file's shapes besides the batcher's "batch", so it has its own.)
template <class Batcher>
class BatchedTask : public Task {
 public:
  const std::vector<BucketDims>& buckets() const override { return batcher_->buckets(); }
  std::vector<data::BatchPlan> planEpoch(uint64_t seed, uint64_t epoch) const override {
    return batcher_->planEpoch(seed, epoch);
  }
  FieldBatch makeBatch(const data::BatchPlan& plan) const override {
    return batcher_->makeBatch(plan);  // with its bucket's dims
  }
  int64_t trainExamples() const override { return static_cast<int64_t>(batcher_->data().size()); }

 protected:
  std::unique_ptr<Batcher> batcher_;
};

// With `stored`, the data is encoded with the checkpoint's vocabulary (and labels).
std::unique_ptr<Task> makeLmTask(const DataSpec& spec, const BatchOptions& batching,
                                 const Checkpoint* stored = nullptr);
std::unique_ptr<Task> makeClassificationTask(const DataSpec& spec, const BatchOptions& batching,
                                             const Checkpoint* stored = nullptr);
std::unique_ptr<Task> makeTensorsTask(const DataSpec& spec, const DataBinding& binding,
                                      const BatchOptions& batching);

// The data options of the lm and classification tasks from a run's DataSpec (the tasks'
// defaults where the spec leaves them open).
data::LmOptions lmOptions(const DataSpec& spec);
data::ClassifyOptions classifyOptions(const DataSpec& spec);

// The end of an lm run: `samples` validation lines, each cut after its first few tokens and
// continued greedily by the model (the rest of the line shown for comparison).
std::string lmSamples(ValidationContext& ctx, const data::LmData& data, int samples);

// What a checkpoint of these tasks keeps (Checkpoint::taskState, JSON): the task's name,
// its vocabulary, and for classification the label names in id order.
struct TaskState {
  std::string task;
  data::Vocab vocab;
  std::vector<std::string> labels;
};
std::string taskStateJson(const TaskState& s);
// Throws CheckpointError naming `where` when the JSON is not such a state.
TaskState parseTaskState(const std::string& json, const std::string& where);

}  // namespace tgc::train
