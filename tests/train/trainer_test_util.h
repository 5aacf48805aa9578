// A very small model on a small slice of the built-in task, so trainer tests run in seconds.
#pragma once

#include <filesystem>
#include <string>

#include "runtime/executable.h"
#include "runtime/train/spec.h"
#include "runtime/train/trainer.h"

namespace tgc::traintest {

inline train::ModelSpec microModel(const std::string& pDrop = "0.1") {
  train::ModelSpec m;
  m.path = std::string(TGC_SOURCE_DIR) + "/models/transformer.tg";
  m.preset = "tiny";
  m.sets = {{"d_model", "32"}, {"heads", "2"},        {"d_ff", "64"},
            {"n_enc", "1"},    {"n_dec", "1"},        {"p_drop", pDrop}};
  return m;
}

inline train::DataSpec microData(int64_t trainSize = 3000) {
  train::DataSpec d;
  d.trainSize = trainSize;
  return d;
}

inline train::TrainConfig microConfig() {
  train::TrainConfig c;
  c.batchSize = 16;
  c.buckets = 1;  // one compiled step shape, shared by the tests
  c.validEvery = 0;
  c.validSize = 32;
  c.checkpointEvery = 0;
  c.decodeBatch = 32;
  c.optimizer.lr_scale = 2;
  c.optimizer.warmup = 50;
  return c;
}

// The kernel cache the tests share (a rerun loads instead of compiling).
inline runtime::ExecOptions trainExecOptions() {
  runtime::ExecOptions o;
  o.cacheDir = std::string(TGC_BINARY_DIR) + "/test-kernel-cache";
  return o;
}

// A fresh directory under the system's temporary folder, removed at the end.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name) {
    path = std::filesystem::temp_directory_path() /
           (name + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string str(const std::string& sub = "") const { return (path / sub).string(); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

}  // namespace tgc::traintest
