// Tasks: the kinds of data `tgc train` feeds a graph through the model file's `bind`
// declaration (docs/language.md, "Data bindings").
//
// A task reads or generates its data from a DataSpec, cuts it into fixed-shape batches of
// named fields (each bucket's task dims — batch, length, ... — set the bound graph's named
// dims), gives the values that bound config entries take (vocabulary sizes, class counts),
// scores validation with its own metric, and keeps in checkpoints what later commands need to
// use the model (vocabularies, label names).
//
//   translation     source, target_in, target_out     exact match or BLEU   (spec.h's loadData)
//   lm              tokens, targets                   perplexity
//   classification  tokens, labels                    accuracy
//   tensors         the file's tensors by name        the loss only
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frontend/frontend.h"
#include "runtime/data/batching.h"
#include "runtime/data/field_batch.h"
#include "runtime/executable.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/spec.h"

namespace tgc::train {

using data::BucketDims;
using data::FieldBatch;

struct DataExportInfo;  // data_export.h

struct BatchOptions {
  int64_t batchSize = 64;  // rows of every batch (the bound dim of `batch`)
  int buckets = 2;         // length buckets of the training split, one compiled step each
};

// What validation hands a task.
struct ValidationContext {
  // The bound graph's forward pass without dropout on one batch: every output by name.
  std::function<std::map<std::string, Tensor>(const FieldBatch&)> forward;
  int64_t limit = 0;  // validation examples scored (0: all)
  uint64_t seed = 1;
  // For tasks that decode (translation): the model with its bound values, the parameters
  // validation uses (their moving averages), how to compile, and rows per decoding run.
  const ModelSpec* model = nullptr;
  std::function<std::map<std::string, Tensor>()> parameters;
  runtime::ExecOptions exec;
  int64_t decodeBatch = 128;
};

class Task {
 public:
  virtual ~Task() = default;

  virtual std::string name() const = 0;     // translation | lm | classification | tensors
  virtual std::string summary() const = 0;  // one line for logs: sizes and vocabularies

  // The value a binding gives a config entry (`config vocab = vocab`; tensors:
  // "x.shape[1]"), or nullopt when the task has none of that name.
  virtual std::optional<int64_t> value(const std::string& key) const = 0;

  // The training split: its buckets (task dims each, "batch" included; one compiled step
  // per bucket), its epochs as pure functions of (seed, epoch), and its batches.
  virtual const std::vector<BucketDims>& buckets() const = 0;
  virtual std::vector<data::BatchPlan> planEpoch(uint64_t seed, uint64_t epoch) const = 0;
  virtual FieldBatch makeBatch(const data::BatchPlan& plan) const = 0;
  virtual int64_t trainExamples() const = 0;
  virtual int64_t validExamples() const = 0;

  // What validation reports besides the loss: "exact_match", "bleu", "perplexity",
  // "accuracy", or "" (tensors: the loss is the metric).
  virtual std::string metric() const = 0;
  // The loss (averaged as the graph averages it: over target tokens or rows) and the
  // task's metric over the first ctx.limit validation examples.
  virtual ValidRow validate(ValidationContext& ctx) = 0;

  // What the end of a run shows besides the score (classification: a confusion summary;
  // lm: sample continuations), `samples` lines at most; "" for nothing.
  virtual std::string report(ValidationContext& ctx, int samples) {
    (void)ctx;
    (void)samples;
    return {};
  }

  // Checks the fields against the types of the graph inputs they feed (by input name, as
  // compiled for the first bucket with the task's values): the front end checks the fixed
  // fields of the other tasks, the tensors task's come from a file.
  virtual void checkInputs(const std::map<std::string, TensorType>& types) const { (void)types; }

  // The run's data for another implementation (`tgc train --export-data`, data_export.h):
  // JSON of the training examples, the buckets, the batch plans of info.epochs epochs and the
  // validation split; "" when the task has no such export (translation writes its own).
  virtual std::string exportJson(const DataExportInfo& info) const {
    (void)info;
    return {};
  }

  // Checkpoints: what this task stores (vocabularies, labels) and, on resume, the check that
  // the data still gives what the checkpoint stored.
  virtual void save(Checkpoint& c) const = 0;
  virtual void checkResume(const Checkpoint& c) const = 0;
};

// The task a binding names, with its data read or generated from `spec` (deterministic in
// it). `binding` says which fields the graph reads. With `stored` (evaluation), the data is
// encoded with the checkpoint's vocabulary and labels instead of its own.
std::unique_ptr<Task> makeTask(const DataSpec& spec, const DataBinding& binding,
                               const BatchOptions& batching, const Checkpoint* stored = nullptr);

// The loss averaged over batches, each weighted by FieldBatch::weight; calls `each` with
// every batch and its outputs (for metrics of their own).
double averageLoss(
    ValidationContext& ctx, const std::vector<FieldBatch>& batches,
    const std::function<void(const FieldBatch&, const std::map<std::string, Tensor>&)>& each = {});

// "loss 1.2345, perplexity 3.437" and the like: a validation row with the task's metric.
std::string scoreText(const std::string& metric, const ValidRow& v);

// "x.shape[1]" for an entry FIELD.shape[i], else FIELD: the key of task values and dims.
std::string bindingKey(const BindingEntry& e);

// The graph's named dims for a batch of these task dims, in the binding's order; an error at
// the entry's file:line:col when the task's batches have no such dim.
std::vector<std::pair<std::string, int64_t>> boundDims(const DataBinding& binding,
                                                       const BucketDims& dims);

}  // namespace tgc::train
