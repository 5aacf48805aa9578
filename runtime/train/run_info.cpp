#include "runtime/train/run_info.h"

#include <filesystem>

namespace tgc::train {

RunInfo loadRun(const std::string& pathOrDir, const std::string& model) {
  RunInfo r;
  r.checkpoint = loadLatestCheckpoint(pathOrDir, &r.path);
  r.model = ModelSpec::fromJson(r.checkpoint.model);
  if (!model.empty()) r.model.path = std::filesystem::absolute(model).lexically_normal().string();
  r.data = DataSpec::fromJson(r.checkpoint.data);
  r.config = TrainConfig::fromJson(r.checkpoint.options);
  r.binding = findBinding(r.model, r.config.task, r.config.legacyBinding);
  return r;
}

std::unique_ptr<Task> evaluationTask(const RunInfo& run, const std::string& dataFile) {
  DataSpec spec = run.data;
  if (!dataFile.empty()) {
    spec.kind = "tsv";
    spec.path = std::filesystem::absolute(dataFile).string();
    if (run.binding.task != "translation") spec.validFraction = 1;  // all of it is scored
  }
  return makeTask(spec, run.binding, {run.config.batchSize, run.config.buckets}, &run.checkpoint);
}

}  // namespace tgc::train
