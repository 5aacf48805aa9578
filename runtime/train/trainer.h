// The training loop: the model's compiled training step per length bucket, the data in
// seeded order, validation, checkpoints, and resuming bit-exactly.
//
// The model file's `bind` declaration names the task (task.h) whose batches feed the graph
// it binds: fields to inputs, the task's values (vocabulary sizes, class counts) to config
// entries, each bucket's dims (batch, lengths) to named dims. Each bucket gets its own
// compiled graph with the AdamW step
// appended (passes/train_step.h), compiled when its first batch comes by the step backend
// of the run's target (step_backend.h): on the CPU the parameters, optimizer moments and
// averages live in one ParamStore updated in place; on a CUDA GPU they stay on the device
// and only batches and scalars cross PCIe. Validation (the task's: loss, greedy decoding,
// perplexity, accuracy) and translation run on the CPU with the state fetched from the
// backend: decoding is many
// small latency-bound runs whose key/value caches the host reorders (beam search), and a
// validation every few hundred steps is a small share of a run. Every state update
// is guarded: new.X = finite ? X' : X, where `finite` says the loss and the gradient norm
// are finite, so a non-finite step changes nothing; it is counted, and training stops after
// `maxBadSteps` of them in a row.
//
// Everything random is a pure function of the seed and the step counters (the epoch order
// from the batcher, dropout from (seed, update)), so a checkpoint's counters are the whole
// random state and a resumed run repeats the uninterrupted one bit for bit.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "passes/pass_manager.h"
#include "passes/train_step.h"
#include "runtime/data/batching.h"
#include "runtime/data/dataset.h"
#include "runtime/executable.h"
#include "runtime/param_store.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/spec.h"
#include "runtime/train/forward.h"
#include "runtime/train/step_backend.h"
#include "runtime/train/task.h"
#include "runtime/train/task_translation.h"
#include "runtime/train/translator.h"

namespace tgc::train {

// What defines a run (stored in checkpoints; a resumed run keeps them).
struct TrainConfig {
  int64_t batchSize = 64;
  int buckets = 2;         // length buckets (one compiled step each)
  // The binding that feeds the model: its task's name, or "" for the one the model file
  // declares (an error when it declares several).
  std::string task;
  // Read from a checkpoint written before bindings existed (its runs were translation).
  bool legacyBinding = false;
  uint64_t seed = 1;       // parameters, data order, dropout
  OptimizerConfig optimizer;
  int64_t validEvery = 100;      // steps between validations (0: none)
  int64_t validSize = 256;       // validation examples decoded (greedy) each time
  int64_t checkpointEvery = 500; // steps between checkpoints (0: only at the end)
  int keepCheckpoints = 3;
  int maxBadSteps = 10;          // non-finite steps in a row that stop training
  int64_t decodeBatch = 128;     // rows per decoding run
  // Validation, the final evaluation and checkpoints' translations use an exponential moving
  // average of the parameters with this decay (0: the parameters themselves), which smooths
  // out the noise of the last updates.
  double ema = 0.99;

  std::string toJson() const;
  static TrainConfig fromJson(std::string_view text);
};

// When this invocation stops (not stored: a resumed run sets its own).
struct StopRule {
  int64_t steps = 0;     // stop at this total step count (0: no limit)
  double seconds = 0;    // wall time of this invocation, compiles included (0: no limit)
  // Time kept free at the end for the caller's evaluation of this many sentences (measured
  // from validation's decoding speed).
  int64_t reserveSentences = 0;
};

struct TrainResult {
  enum class Reason { steps, time, interrupted, nonFinite } reason = Reason::steps;
  int64_t step = 0, updates = 0, skipped = 0;
  double seconds = 0;          // this invocation
  double compileSeconds = 0;   // training-step compiles of this invocation
  double stepSeconds = 0;      // inside training steps
  int64_t stepsRun = 0;        // steps of this invocation
  int64_t tokens = 0;          // source + target tokens of this invocation's batches
  std::string checkpoint;      // the last checkpoint written
  std::string message;         // why it stopped, for the user
  ValidRow lastValid;          // the last validation (step 0 when none)
};

class Trainer {
 public:
  // A new run in `outDir` (created). `model.sets` without the vocabulary sizes.
  // `target`: where training steps run (Target::cuda: the first GPU; without one this
  // throws runtime::cuda::NoDeviceError before anything is read or written).
  Trainer(ModelSpec model, DataSpec data, TrainConfig config, std::string outDir,
          runtime::ExecOptions exec = runtime::ExecOptions::fromEnv(), std::ostream* log = nullptr,
          Target target = Target::cpu);
  // Continues the run of a checkpoint (file, or run directory: its newest checkpoint),
  // writing into `outDir` (empty: the checkpoint's run directory).
  static std::unique_ptr<Trainer> resume(const std::string& checkpoint, std::string outDir,
                                         runtime::ExecOptions exec = runtime::ExecOptions::fromEnv(),
                                         std::ostream* log = nullptr, Target target = Target::cpu);
  ~Trainer();

  // Trains until `rule` or `stop` says so, then writes a checkpoint and the reports.
  TrainResult train(const StopRule& rule, const std::atomic<bool>* stop = nullptr);

  // One training step on the next batch; returns its history row (loss NaN when skipped).
  HistoryRow step();
  // Validation: the loss and the task's metric over the first validSize examples,
  // recorded in the history and the reports.
  ValidRow validate();
  // The same over the first `limit` validation examples (0: all), not recorded.
  ValidRow score(int64_t limit);
  // What the task shows at the end of a run (Task::report).
  std::string report(int samples);
  // Progress lines rewrite one terminal line (\r) instead of printing one every 10 s.
  void setTty(bool tty) { tty_ = tty; }
  // The pass manager's printing, dumps and timings for the training step's pipeline, each
  // time a bucket's step is compiled; dump_dir gets one directory per bucket (bucket-<i>).
  void setPassOptions(PassManagerOptions pm) { passOptions_ = std::move(pm); }
  // Returns its path and prunes old ones; "" (and says why) when the state holds a NaN or
  // an infinity, which is not written.
  std::string saveCheckpoint();

  // The run's task (what feeds the graph) and the binding it feeds it through.
  const Task& task() const { return *task_; }
  const DataBinding& binding() const { return binding_; }
  // The translation task's data and training batcher; throw for other tasks.
  const data::TranslationData& data() const { return translation().data(); }
  const data::Batcher& batcher() const { return translation().batcher(); }
  const DataSpec& dataSpec() const { return dataSpec_; }
  const ModelSpec& model() const { return modelWithVocab_; }  // vocabulary sizes included
  const TrainConfig& config() const { return config_; }
  const std::string& outDir() const { return outDir_; }
  // The training state on the host (fetched from the device on a GPU target). store() is
  // for changing it: the change reaches the next step wherever it runs.
  const runtime::ParamStore& state() { return backend_->state(); }
  runtime::ParamStore& store() { return backend_->editState(); }
  StepBackend& backend() { return *backend_; }
  const std::vector<HistoryRow>& history() const { return history_; }
  const std::vector<ValidRow>& validHistory() const { return valid_; }
  int64_t stepCount() const { return stepCount_; }
  int64_t updates() const { return updates_; }
  int64_t skipped() const { return skipped_; }
  // Translation: a translator with the current parameters, and greedy decoding as
  // validation does it (batch, length cap from the training data). Throw for other tasks.
  Translator& translator();
  DecodeOptions decodeOptions() const;
  std::map<std::string, Tensor> parameters();
  // The bound graph's forward pass without dropout (validation's; `tgc eval` scores with it
  // too): every output by name.
  std::map<std::string, Tensor> forward(const FieldBatch& batch);

 private:
  Trainer(ModelSpec model, DataSpec data, TrainConfig config, std::string outDir,
          runtime::ExecOptions exec, std::ostream* log, const Checkpoint* from, Target target);
  int stepFor(int bucket);  // the bucket's step handle in backend_
  void updateAverages();
  TranslationTask& translation() const;
  ValidationContext validationContext(int64_t limit);
  // The bound graph's named dims for a batch of these task dims, in the binding's order.
  std::vector<std::pair<std::string, int64_t>> graphDims(const BucketDims& dims) const;
  // "17x18": the dims of a bucket other than the batch, for messages.
  std::string shapeText(const BucketDims& dims) const;
  void say(const std::string& line);
  void progress(const HistoryRow& r, const StopRule& rule, double elapsed);

  ModelSpec model_, modelWithVocab_;
  DataSpec dataSpec_;
  TrainConfig config_;
  std::string outDir_;
  runtime::ExecOptions exec_;
  std::ostream* log_;
  bool tty_ = false;
  PassManagerOptions passOptions_;

  DataBinding binding_;
  std::unique_ptr<Task> task_;
  std::unique_ptr<StepBackend> backend_;  // the training state and the compiled steps
  std::vector<int> steps_;  // per bucket: its handle in backend_, -1 before it is compiled
  std::string onTarget_;    // " on <device>" in messages, empty on the CPU
  // Forward passes without dropout, by their dims (validation).
  std::unique_ptr<ForwardRunner> forward_;
  std::vector<std::string> paramNames_;

  int64_t stepCount_ = 0, updates_ = 0, skipped_ = 0, badInARow_ = 0;
  double secondsBefore_ = 0;  // training time of earlier invocations
  std::vector<HistoryRow> history_;
  std::vector<ValidRow> valid_;
  std::vector<data::BatchPlan> epochPlan_;
  int64_t epochPlanned_ = -1;
  double compileSeconds_ = 0, stepSeconds_ = 0;
  // This invocation of train(): source + target tokens, steps, seconds inside steps.
  double tokensThisRun_ = 0, stepSecondsThisRun_ = 0;
  int64_t stepsThisRun_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point lastPrint_;
  std::string lastCheckpoint_;
};

// The binding of the model file that names `task` ("": the only one), checked against the
// graph it feeds; errors say what the file declares.
// `legacy` (a checkpoint written before bindings, whose model file may declare none): a
// model without bindings gets the translation binding that runs had then.
DataBinding findBinding(const ModelSpec& model, const std::string& task, bool legacy = false);

// Adds the non-finite guard to a training-step graph (outputs loss first and grad_norm):
// every output new.X becomes where(finite, new.X, X), and an output "finite" (bool) is
// appended. Returns the number of guarded outputs.
size_t guardNonFinite(Graph& g);

}  // namespace tgc::train
