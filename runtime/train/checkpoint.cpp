#include "runtime/train/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/safetensors.h"

namespace tgc::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "tgc-checkpoint";
constexpr int kVersion = 1;
constexpr const char* kHistory = "train.history";
constexpr int64_t kHistoryCols = 6;
constexpr const char* kPrefix = "step-";
constexpr const char* kSuffix = ".safetensors";

// The step of a checkpoint file name, or -1 for any other name.
int64_t stepOf(const std::string& name) {
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return -1;
  const std::string digits =
      name.substr(std::char_traits<char>::length(kPrefix),
                  name.size() - std::char_traits<char>::length(kPrefix) -
                      std::char_traits<char>::length(kSuffix));
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

std::string folderOf(const std::string& dir) {
  const fs::path sub = fs::path(dir) / "checkpoints";
  return fs::is_directory(sub) ? sub.string() : dir;
}

// The index of t's first NaN or infinity, or -1 (also for integer tensors).
int64_t firstNonFinite(const Tensor& t) {
  auto scan = [&](const auto* p) -> int64_t {
    for (int64_t i = 0; i < t.numel(); ++i)
      if (!std::isfinite(p[i])) return i;
    return -1;
  };
  if (t.dtype() == DType::f32) return scan(t.as<float>());
  if (t.dtype() == DType::f64) return scan(t.as<double>());
  if (!isFloat(t.dtype())) return -1;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t.getF(i))) return i;
  return -1;
}

// "tensor 'X' holds inf at element i of n" for the first tensor with a NaN or an infinity,
// or "".
std::string nonFiniteTensor(const std::map<std::string, Tensor>& tensors) {
  for (const auto& [name, t] : tensors)
    if (const int64_t i = firstNonFinite(t); i >= 0)
      return fmt::format("tensor '{}' holds {} at element {} of {}", name, t.getF(i), i, t.numel());
  return {};
}

}  // namespace

std::map<std::string, Tensor> evaluationParameters(const std::map<std::string, Tensor>& tensors) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : tensors) {
    if (name.starts_with("adam.") || name.starts_with("ema.")) continue;
    auto ema = tensors.find("ema." + name);
    out.emplace(name, ema != tensors.end() ? ema->second : t);
  }
  return out;
}

std::map<std::string, Tensor> Checkpoint::parameters() const { return evaluationParameters(tensors); }

void saveCheckpoint(const std::string& path, const Checkpoint& c) {
  if (const std::string why = nonFiniteTensor(c.tensors); !why.empty())
    throw CheckpointError(fmt::format("{}: error: not written: {}", path, why));
  TensorFile f;
  f.tensors = c.tensors;
  Tensor h(TensorType{DType::f64, {static_cast<int64_t>(c.history.size()), kHistoryCols}});
  double* p = h.as<double>();
  for (const HistoryRow& r : c.history) {
    *p++ = static_cast<double>(r.step);
    *p++ = static_cast<double>(r.update);
    *p++ = r.loss;
    *p++ = r.gradNorm;
    *p++ = r.lr;
    *p++ = static_cast<double>(r.tokens);
  }
  f.tensors.insert_or_assign(kHistory, std::move(h));
  json valid = json::array();
  for (const ValidRow& v : c.valid)
    valid.push_back({v.step, v.loss, v.exactMatch, v.bleu, v.perplexity, v.accuracy});
  f.metadata = {{"format", kFormat},
                {"version", std::to_string(kVersion)},
                {"step", std::to_string(c.step)},
                {"updates", std::to_string(c.updates)},
                {"skipped", std::to_string(c.skipped)},
                {"seconds", fmt::format("{:.17g}", c.seconds)},
                {"max_target_tokens", std::to_string(c.maxTargetTokens)},
                {"model", c.model},
                {"data", c.data},
                {"options", c.options},
                {"src_vocab", c.srcVocab.toJson()},
                {"tgt_vocab", c.tgtVocab.toJson()},
                {"valid_history", valid.dump()}};
  if (!c.taskState.empty()) f.metadata.emplace("task_state", c.taskState);
  writeSafetensors(path, f);
}

Checkpoint loadCheckpoint(const std::string& path) {
  TensorFile f;
  try {
    f = readSafetensors(path);
  } catch (const SafetensorsError& e) {
    throw CheckpointError(e.what());
  }
  auto bad = [&](const std::string& why) {
    return CheckpointError(fmt::format("{}: error: invalid checkpoint: {}", path, why));
  };
  auto meta = [&](const char* key) -> const std::string& {
    auto it = f.metadata.find(key);
    if (it == f.metadata.end()) throw bad(fmt::format("no '{}' in the metadata", key));
    return it->second;
  };
  auto integer = [&](const char* key) {
    const std::string& s = meta(key);
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
    }
    if (used != s.size() || v < 0) throw bad(fmt::format("'{}' is not a count: '{}'", key, s));
    return v;
  };
  if (meta("format") != kFormat)
    throw bad(fmt::format("format is '{}', not '{}'", meta("format"), kFormat));
  if (meta("version") != std::to_string(kVersion))
    throw bad(fmt::format("version {} (this tgc reads {})", meta("version"), kVersion));

  Checkpoint c;
  c.step = integer("step");
  c.updates = integer("updates");
  c.skipped = integer("skipped");
  c.maxTargetTokens = integer("max_target_tokens");
  try {
    c.seconds = std::stod(meta("seconds"));
  } catch (const std::exception&) {
    throw bad("'seconds' is not a number");
  }
  c.model = meta("model");
  c.data = meta("data");
  c.options = meta("options");
  if (auto it = f.metadata.find("task_state"); it != f.metadata.end()) {
    c.taskState = it->second;
    if (!json::accept(c.taskState)) throw bad("'task_state' is not JSON");
  }
  try {
    c.srcVocab = data::Vocab::fromJson(meta("src_vocab"), path + " (src_vocab)");
    c.tgtVocab = data::Vocab::fromJson(meta("tgt_vocab"), path + " (tgt_vocab)");
  } catch (const std::exception& e) {
    throw CheckpointError(e.what());
  }
  try {
    // Rows of four from runs before perplexity and accuracy.
    for (const auto& v : json::parse(meta("valid_history")))
      c.valid.push_back({v.at(0).get<int64_t>(), v.at(1).get<double>(), v.at(2).get<double>(),
                         v.at(3).get<double>(), v.size() > 4 ? v.at(4).get<double>() : 0.0,
                         v.size() > 5 ? v.at(5).get<double>() : 0.0});
  } catch (const json::exception& e) {
    throw bad(fmt::format("valid_history: {}", e.what()));
  }

  auto it = f.tensors.find(kHistory);
  if (it == f.tensors.end()) throw bad(fmt::format("no tensor '{}'", kHistory));
  const Tensor& h = it->second;
  if (h.dtype() != DType::f64 || h.shape().size() != 2 || h.shape()[1] != kHistoryCols)
    throw bad(fmt::format("'{}' is {}, not f64[n, {}]", kHistory, h.type().str(), kHistoryCols));
  const double* p = h.as<double>();
  for (int64_t i = 0; i < h.shape()[0]; ++i, p += kHistoryCols)
    c.history.push_back({static_cast<int64_t>(p[0]), static_cast<int64_t>(p[1]), p[2], p[3],
                         p[4], static_cast<int64_t>(p[5])});
  if (static_cast<int64_t>(c.history.size()) != c.step)
    throw bad(fmt::format("the history has {} rows for step {}", c.history.size(), c.step));
  f.tensors.erase(it);
  // Training never writes a NaN or an infinity into the parameters or the optimizer state
  // (saveCheckpoint refuses): one there is damage, and resuming from it would train on NaN.
  if (const std::string why = nonFiniteTensor(f.tensors); !why.empty()) throw bad(why);
  c.tensors = std::move(f.tensors);
  return c;
}

std::string checkpointFileName(int64_t step) {
  return fmt::format("{}{:08d}{}", kPrefix, step, kSuffix);
}

std::string checkpointDir(const std::string& runDir) {
  return (fs::path(runDir) / "checkpoints").string();
}

std::vector<std::string> listCheckpoints(const std::string& dir) {
  const std::string folder = folderOf(dir);
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    const int64_t step = stepOf(e.path().filename().string());
    if (step >= 0 && e.is_regular_file()) found.emplace_back(step, e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

void pruneCheckpoints(const std::string& dir, int keep) {
  std::vector<std::string> all = listCheckpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep, 1)) < all.size(); ++i)
    fs::remove(all[i]);
}

int removeStaleTemporaries(const std::string& dir) {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folderOf(dir), ec)) {
    const std::string name = e.path().filename().string();
    // writeSafetensors's temporaries: <target>.tmp.<pid>.<n>
    if (name.starts_with(kPrefix) && name.find(std::string(kSuffix) + ".tmp.") != std::string::npos) {
      fs::remove(e.path(), ec);
      ++removed;
    }
  }
  return removed;
}

Checkpoint loadLatestCheckpoint(const std::string& pathOrDir, std::string* loadedPath) {
  if (!fs::exists(pathOrDir))
    throw CheckpointError(fmt::format("{}: error: no such checkpoint file or run directory",
                                      pathOrDir));
  if (!fs::is_directory(pathOrDir)) {
    if (loadedPath) *loadedPath = pathOrDir;
    return loadCheckpoint(pathOrDir);
  }
  const std::vector<std::string> all = listCheckpoints(pathOrDir);
  if (all.empty())
    throw CheckpointError(fmt::format("{}: error: no checkpoints (step-*.safetensors) in it",
                                      pathOrDir));
  try {
    if (loadedPath) *loadedPath = all.back();
    return loadCheckpoint(all.back());
  } catch (const CheckpointError& newest) {
    // Say which earlier checkpoint still loads, so the user can go on from there.
    for (size_t i = all.size() - 1; i-- > 0;) {
      try {
        loadCheckpoint(all[i]);
      } catch (const CheckpointError&) {
        continue;
      }
      throw CheckpointError(fmt::format(
          "{}\nthe previous checkpoint {} is intact: pass its path to use it", newest.what(),
          all[i]));
    }
    throw;
  }
}

}  // namespace tgc::train
