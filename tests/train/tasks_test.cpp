// The tasks besides translation through the trainer: each trains a very small model in
// seconds to a stated quality, the lm task resumes bit-exactly, evaluation goes through the
// checkpoint's vocabulary and labels, and bad data is refused with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/data/error.h"
#include "runtime/data/rng.h"
#include "runtime/safetensors.h"
#include "runtime/train/run_info.h"
#include "runtime/train/task.h"
#include "runtime/train/trainer.h"
#include "tests/train/trainer_test_util.h"

namespace tgc::train {
namespace {

namespace fs = std::filesystem;

std::string modelPath(const std::string& name) { return std::string(TGC_SOURCE_DIR) + "/models/" + name; }

ModelSpec lmModel() {
  ModelSpec m;
  m.path = modelPath("gpt.tg");
  m.preset = "tiny";
  m.sets = {{"d_model", "48"}, {"heads", "2"}, {"d_ff", "96"}, {"n_layers", "1"}, {"p_drop", "0"}};
  return m;
}

ModelSpec classifierModel() {
  ModelSpec m;
  m.path = modelPath("classifier.tg");
  m.preset = "tiny";
  m.sets = {{"d_model", "32"}, {"heads", "2"}, {"d_ff", "64"}, {"n_layers", "1"}, {"p_drop", "0"}};
  return m;
}

DataSpec builtinData(int64_t size) {
  DataSpec d;
  d.kind = "builtin";
  d.trainSize = size;
  d.validFraction = 0.1;
  d.maxTokens = 128;
  d.sentencePieceVocab = 2000;
  return d;
}

TrainConfig config(int64_t batch) {
  TrainConfig c = traintest::microConfig();
  c.batchSize = batch;
  c.validSize = 0;
  c.optimizer.lr_scale = 1;
  c.optimizer.warmup = 100;
  return c;
}

std::string writeFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// The built-in text: a character model's held-out perplexity falls from the vocabulary's
// size (33) to below 3 in 300 steps.
TEST(LmTask, LearnsTheBuiltInText) {
  traintest::ScratchDir dir("tgc-lm");
  Trainer t(lmModel(), builtinData(2000), config(32), dir.str(), traintest::trainExecOptions());
  EXPECT_EQ(t.binding().task, "lm");
  EXPECT_EQ(t.task().metric(), "perplexity");
  StopRule r;
  r.steps = 300;
  t.train(r);
  const ValidRow v = t.score(0);
  EXPECT_NEAR(v.perplexity, std::exp(v.loss), 1e-9);
  EXPECT_LT(v.perplexity, 3.0) << "loss " << v.loss;
  // The checkpoint keeps the vocabulary; evaluation rebuilds the same split through it.
  const RunInfo run = loadRun(dir.str());
  EXPECT_EQ(run.binding.task, "lm");
  std::unique_ptr<Task> again = evaluationTask(run);
  EXPECT_EQ(again->validExamples(), t.task().validExamples());
}

// Bit-exact resume: 10 steps straight against 5, a checkpoint and a fresh trainer, 5 more.
TEST(LmTask, ResumeIsBitExact) {
  traintest::ScratchDir whole("tgc-lm-whole"), split("tgc-lm-split");
  TrainConfig c = config(16);
  c.validEvery = 4;
  c.validSize = 16;
  ModelSpec m = lmModel();
  m.sets.back() = {"p_drop", "0.1"};  // dropout's stream must continue too
  const auto exec = traintest::trainExecOptions();
  Trainer a(m, builtinData(600), c, whole.str(), exec);
  StopRule all;
  all.steps = 10;
  a.train(all);
  {
    Trainer b(m, builtinData(600), c, split.str(), exec);
    StopRule half;
    half.steps = 5;
    b.train(half);
  }
  auto resumed = Trainer::resume(split.str(), "", exec);
  EXPECT_EQ(resumed->stepCount(), 5);
  resumed->train(all);
  const Checkpoint ca = loadLatestCheckpoint(whole.str()), cb = loadLatestCheckpoint(split.str());
  EXPECT_EQ(ca.history, cb.history);
  EXPECT_EQ(ca.valid, cb.valid);
  EXPECT_EQ(ca.taskState, cb.taskState);
  ASSERT_EQ(ca.tensors.size(), cb.tensors.size());
  for (const auto& [name, x] : ca.tensors) {
    const Tensor& y = cb.tensors.at(name);
    ASSERT_EQ(x.type(), y.type()) << name;
    EXPECT_EQ(0, std::memcmp(x.data(), y.data(), static_cast<size_t>(x.numel()) * 4)) << name;
  }
}

// The built-in labelled set: >= 95% accuracy on held-out sentences.
TEST(ClassificationTask, ReachesNinetyFivePercent) {
  traintest::ScratchDir dir("tgc-cls");
  Trainer t(classifierModel(), builtinData(2000), config(32), dir.str(), traintest::trainExecOptions());
  EXPECT_EQ(t.task().metric(), "accuracy");
  EXPECT_EQ(t.task().value("classes"), 4);
  StopRule r;
  r.steps = 200;
  t.train(r);
  const ValidRow v = t.score(0);
  EXPECT_GE(v.accuracy, 0.95) << "loss " << v.loss;
  // The confusion summary names every class.
  const std::string report = t.report(3);
  for (const char* label : {"food", "music", "sports", "weather"})
    EXPECT_NE(report.find(label), std::string::npos) << report;

  // Evaluation of a new file through the checkpoint's labels: an unseen label is an error
  // that names it.
  const std::string tsv = writeFile(dir.str("new.tsv"), "food\twe ate the pizza\ncooking\tthe pan is hot\n");
  const RunInfo run = loadRun(dir.str());
  const std::string err = errorOf([&] { evaluationTask(run, tsv); });
  EXPECT_NE(err.find("cooking"), std::string::npos) << err;
  EXPECT_NE(err.find("new.tsv:2"), std::string::npos) << err;
}

TEST(ClassificationTask, RefusesALineWithoutATab) {
  traintest::ScratchDir dir("tgc-cls-bad");
  DataSpec d = builtinData(0);
  d.kind = "tsv";
  d.path = writeFile(dir.str("bad.tsv"), "food\tpizza again\nno tab on this line\n");
  const std::string err = errorOf([&] { Trainer(classifierModel(), d, config(8), dir.str("run")); });
  EXPECT_NE(err.find("bad.tsv:2"), std::string::npos) << err;
  EXPECT_NE(err.find("tab"), std::string::npos) << err;
}

TEST(LmTask, RefusesAnEmptyText) {
  traintest::ScratchDir dir("tgc-lm-empty");
  DataSpec d = builtinData(0);
  d.kind = "tsv";
  d.path = writeFile(dir.str("empty.txt"), "\n  \n");
  const std::string err = errorOf([&] { Trainer(lmModel(), d, config(8), dir.str("run")); });
  EXPECT_NE(err.find("empty.txt"), std::string::npos) << err;
  EXPECT_NE(err.find("no text"), std::string::npos) << err;
}

// Rows of y = sin(2 x0) + x1 x2 - x3^2 / 2, written as safetensors.
std::string regressionFile(const std::string& path, int64_t rows, int64_t features, DType xType = DType::f32) {
  TensorFile f;
  Tensor x(TensorType{xType, {rows, features}}), y(TensorType{DType::f32, {rows, 1}});
  data::Rng rng(7);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> v(static_cast<size_t>(features));
    for (auto& e : v) e = 2 * rng.uniform() - 1;
    for (int64_t k = 0; k < features; ++k) x.setF(r * features + k, v[static_cast<size_t>(k)]);
    y.setF(r, std::sin(2 * v[0]) + v[1] * v[2] - 0.5 * v[3] * v[3]);
  }
  f.tensors.emplace("x", std::move(x));
  f.tensors.emplace("y", std::move(y));
  writeSafetensors(path, f);
  return path;
}

ModelSpec regressionModel() {
  ModelSpec m;
  m.path = modelPath("examples/regression.tg");
  return m;
}

TrainConfig regressionConfig() {
  TrainConfig c = config(32);
  c.optimizer.schedule = "constant";
  c.optimizer.lr = 3e-3;
  return c;
}

// A user's model fed from a tensors file: the loss falls tenfold, and the features' count
// comes from the file (the binding's `dim F = x.shape[1]`).
TEST(TensorsTask, RegressionLossFallsTenfold) {
  traintest::ScratchDir dir("tgc-tensors");
  DataSpec d;
  d.kind = "tsv";
  d.path = regressionFile(dir.str("data.safetensors"), 2048, 6);
  d.validFraction = 0.1;
  Trainer t(regressionModel(), d, regressionConfig(), dir.str("run"), traintest::trainExecOptions());
  EXPECT_EQ(t.task().value("x.shape[1]"), 6);
  EXPECT_EQ(t.task().buckets().front().at("x.shape[1]"), 6);
  const double before = t.score(0).loss;
  StopRule r;
  r.steps = 600;
  t.train(r);
  const double after = t.score(0).loss;
  EXPECT_LT(after, before / 10) << before << " -> " << after;
}

TEST(TensorsTask, RefusesAMismatchedFile) {
  traintest::ScratchDir dir("tgc-tensors-bad");
  DataSpec d;
  d.kind = "tsv";
  d.path = regressionFile(dir.str("f64.safetensors"), 64, 6, DType::f64);
  std::string err = errorOf([&] { Trainer(regressionModel(), d, regressionConfig(), dir.str("a")); });
  EXPECT_NE(err.find("'x'"), std::string::npos) << err;
  EXPECT_NE(err.find("f64"), std::string::npos) << err;

  // A file without the bound tensor y names it and what the file holds.
  TensorFile f;
  f.tensors.emplace("x", Tensor(TensorType{DType::f32, {64, 6}}));
  d.path = dir.str("no-y.safetensors");
  writeSafetensors(d.path, f);
  err = errorOf([&] { Trainer(regressionModel(), d, regressionConfig(), dir.str("b")); });
  EXPECT_NE(err.find("no tensor 'y'"), std::string::npos) << err;
  EXPECT_NE(err.find("regression.tg:"), std::string::npos) << err;  // the binding's entry

  // A corrupt file is refused with the reason.
  d.path = writeFile(dir.str("corrupt.safetensors"), "not a safetensors file at all");
  err = errorOf([&] { Trainer(regressionModel(), d, regressionConfig(), dir.str("c")); });
  EXPECT_NE(err.find("corrupt.safetensors"), std::string::npos) << err;
}

// A model without a binding, or a --task it does not declare, is told what to write.
TEST(Binding, ChoosingItIsExplained) {
  traintest::ScratchDir dir("tgc-bind");
  const std::string path = writeFile(dir.str("m.tg"), R"(
import "nn.tg"
dim B = 2
let lin = Linear(4, 1)
graph train(x: f32[B, 4]) training {
  output loss = reduce_sum(lin(x), axes=[0, 1])
}
)");
  ModelSpec m;
  m.path = path;
  std::string err = errorOf([&] { findBinding(m, ""); });
  EXPECT_NE(err.find("declares no data binding"), std::string::npos) << err;
  err = errorOf([&] { findBinding(lmModel(), "classification"); });
  EXPECT_NE(err.find("--task classification"), std::string::npos) << err;
  EXPECT_NE(err.find("lm"), std::string::npos) << err;
}

}  // namespace
}  // namespace tgc::train

namespace tgc::train {
namespace {

// A checkpoint written before bindings (no "task" among its options) whose model file
// declares none resumes with the translation binding such runs had.
TEST(Binding, CheckpointsFromBeforeBindingsResume) {
  traintest::ScratchDir dir("tgc-legacy");
  std::ifstream in(std::string(TGC_SOURCE_DIR) + "/models/transformer.tg");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  const size_t at = text.find("bind translation to train {");
  ASSERT_NE(at, std::string::npos);
  text.erase(at, text.find('}', at) + 1 - at);
  ModelSpec m = traintest::microModel();
  m.path = writeFile(dir.str("old.tg"), text);
  m.libPaths = {std::string(TGC_SOURCE_DIR) + "/models/lib"};
  // Trained through the legacy binding's twin: the same file with its binding back.
  ModelSpec bound = traintest::microModel();
  TrainConfig c = traintest::microConfig();
  {
    Trainer t(bound, traintest::microData(), c, dir.str("run"), traintest::trainExecOptions());
    StopRule r;
    r.steps = 3;
    t.train(r);
  }
  const std::string file = listCheckpoints(dir.str("run")).back();
  Checkpoint ck = loadCheckpoint(file);
  nlohmann::json o = nlohmann::json::parse(ck.options);
  o.erase("task");
  ck.options = o.dump();
  ModelSpec stored = ModelSpec::fromJson(ck.model);
  stored.path = m.path;
  stored.libPaths = m.libPaths;
  ck.model = stored.toJson();
  saveCheckpoint(file, ck);
  auto resumed = Trainer::resume(dir.str("run"), "", traintest::trainExecOptions());
  EXPECT_EQ(resumed->binding().task, "translation");
  StopRule r;
  r.steps = 5;
  resumed->train(r);
  EXPECT_EQ(resumed->stepCount(), 5);
}

}  // namespace
}  // namespace tgc::train
