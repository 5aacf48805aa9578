// A finished (or interrupted) run as later commands use it: its newest usable checkpoint,
// the model and data it was trained with, its options, and the binding that fed it.
#pragma once

#include <string>

#include "frontend/frontend.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/spec.h"
#include "runtime/train/trainer.h"

namespace tgc::train {

struct RunInfo {
  std::string path;  // the checkpoint file loaded
  Checkpoint checkpoint;
  ModelSpec model;   // its sets include the binding's values (vocabulary sizes, classes)
  DataSpec data;
  TrainConfig config;
  DataBinding binding;
};

// `pathOrDir`: a checkpoint file or a run directory (its newest usable checkpoint). `model`
// (optional) replaces the model file's path, for a run whose file moved.
RunInfo loadRun(const std::string& pathOrDir, const std::string& model = "");

// The run's task as evaluation uses it: the data encoded with the checkpoint's vocabulary and
// labels. With `dataFile`, every example of that file is scored (read with the run's
// options); without, the run's own validation split.
std::unique_ptr<Task> evaluationTask(const RunInfo& run, const std::string& dataFile = "");

}  // namespace tgc::train
