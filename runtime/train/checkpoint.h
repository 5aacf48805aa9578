// Training checkpoints: one safetensors file per checkpoint, written atomically.
//
//   <run>/checkpoints/step-00000500.safetensors
//     tensors:   every parameter and optimizer moment by name (adam.m.<p>, adam.v.<p>), the
//                parameters' moving averages (ema.<p>) used for evaluation, and
//                "train.history" f64[n, 6] (step, update, loss, grad_norm, lr, tokens per
//                batch so far), so a resumed run writes the same loss curve
//     metadata:  format "tgc-checkpoint", version, step (batches consumed), updates
//                (optimizer steps applied: skipped steps consume a batch but no update),
//                skipped, seconds, the model, data and options as JSON, both vocabularies
//                as JSON (translation), the task's state as JSON (other tasks: their
//                vocabulary and labels), and the validation history as JSON
//
// The data order and dropout are pure functions of (seed, step), so the step counters are
// the whole random state. Writing goes through writeSafetensors (temporary file, fsync,
// rename): a crash leaves the previous checkpoint and at most a stray temporary, which
// listCheckpoints ignores and removeStaleTemporaries deletes.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "ir/tensor.h"
#include "runtime/data/vocab.h"

namespace tgc::train {

// A checkpoint that cannot be used: "<file>: <reason>".
struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct HistoryRow {
  int64_t step = 0;    // batches consumed, this one included
  int64_t update = 0;  // optimizer updates applied after it
  double loss = 0, gradNorm = 0, lr = 0;
  int64_t tokens = 0;  // real target tokens of the batch
  friend bool operator==(const HistoryRow&, const HistoryRow&) = default;
};

struct ValidRow {
  int64_t step = 0;
  double loss = 0;        // token-averaged, label smoothing included
  double exactMatch = 0;  // translation: 0..1, greedy
  double bleu = 0;        // translation: 0..100, greedy (sacreBLEU's corpus BLEU)
  double perplexity = 0;  // lm: exp(loss)
  double accuracy = 0;    // classification: 0..1
  friend bool operator==(const ValidRow&, const ValidRow&) = default;
};

struct Checkpoint {
  std::map<std::string, Tensor> tensors;  // parameters and optimizer state
  int64_t step = 0, updates = 0, skipped = 0;
  double seconds = 0;  // training time so far (compiles and evaluation included)
  int64_t maxTargetTokens = 0;  // the longest training target (bounds decoding)
  std::string model, data, options;  // JSON (ModelSpec, DataSpec, the trainer's options)
  data::Vocab srcVocab, tgtVocab;  // translation
  // What the run's task keeps besides (JSON; "" for translation, whose vocabularies are
  // above): the lm and classification vocabularies, the label names.
  std::string taskState;
  std::vector<HistoryRow> history;
  std::vector<ValidRow> valid;

  // The parameters for translation: their moving averages (ema.<p>) where the run kept them.
  std::map<std::string, Tensor> parameters() const;
  // Decoding defaults for this model: outputs at most 1.5x the longest training target + 2.
  int64_t lengthCap() const { return maxTargetTokens > 0 ? maxTargetTokens * 3 / 2 + 2 : 0; }
};

// Throws CheckpointError and writes nothing when a tensor holds a NaN or an infinity
// (training skips the steps whose gradients are not finite, so that is damage; a
// checkpoint of it would replace, and in time prune, the good ones).
void saveCheckpoint(const std::string& path, const Checkpoint& c);
// Throws CheckpointError naming the file and the reason (not safetensors, truncated,
// a corrupt header, missing or malformed entries, a NaN or an infinity in a tensor).
Checkpoint loadCheckpoint(const std::string& path);

// Parameters out of a store's tensors (not adam.* moments), each replaced by its moving
// average ema.<p> when there is one.
std::map<std::string, Tensor> evaluationParameters(const std::map<std::string, Tensor>& tensors);

// "step-00000500.safetensors"
std::string checkpointFileName(int64_t step);
// <dir>/checkpoints
std::string checkpointDir(const std::string& runDir);
// Checkpoint files of a run directory (or of a checkpoints folder), oldest first;
// temporaries and other files are ignored.
std::vector<std::string> listCheckpoints(const std::string& dir);
// Deletes all but the newest `keep` checkpoints.
void pruneCheckpoints(const std::string& dir, int keep);
// Deletes temporaries that an interrupted save left behind; returns how many.
int removeStaleTemporaries(const std::string& dir);

// `pathOrDir` is a checkpoint file, or a run directory whose newest checkpoint is loaded.
// When the newest is unusable the error says why and names the newest one that loads.
Checkpoint loadLatestCheckpoint(const std::string& pathOrDir, std::string* loadedPath = nullptr);

}  // namespace tgc::train
