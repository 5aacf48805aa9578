// `tgc run --checkpoint DIR --graph NAME`: any graph of a checkpoint's model, compiled with
// the checkpoint's settings, run with its parameters (their moving averages where kept).
// The checkpoint is made here (saveCheckpoint over initParams), so nothing is trained.
#include <gtest/gtest.h>

#include <filesystem>

#include "frontend/frontend.h"
#include "ir/interpreter.h"
#include "runtime/safetensors.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/spec.h"
#include "tests/tools/tool_test_util.h"

namespace tgc {
namespace {

using testing::runTgc;
using testing::TempDir;

// A classifier over embedded ids and float features; `vocab` is set by the checkpoint's
// --set entries as a trainer sets the vocabulary sizes.
constexpr const char* kModel = R"(config {
  vocab = 3
  d = 4
  classes = 3
}
dim B = 2

module Linear(d_in: int, d_out: int) {
  param weight: f32[d_in, d_out] = xavier_uniform
  param bias: f32[d_out] = normal(0.5)
  fn forward(x) { return x @ weight + bias }
}
module Embedding(n: int, d: int) {
  param weight: f32[n, d] = normal(1.0)
  fn forward(ids) { return gather(weight, ids) }
}
let embed = Embedding(vocab, d)
let head = Linear(d, classes)

graph train(ids: i64[B], x: f32[B, d], y: f32[B, classes]) training {
  let diff = head(embed(ids) + x) - y
  output loss = reduce_mean(diff * diff, axes=[0, 1])
}

graph predict(ids: i64[B], x: f32[B, d]) {
  output logits = head(embed(ids) + x)
}
)";

struct Fixture {
  TempDir dir;
  std::string model, run;
  train::ModelSpec spec;
  std::map<std::string, Tensor> params;  // what the graphs must run with

  // A checkpoint of the model with vocab=7, its parameters from initParams, and a moving
  // average of head.weight that the run must use instead of the raw weight. `drop` names a
  // parameter left out.
  explicit Fixture(const std::string& drop = "") {
    model = dir.write("model.tg", kModel);
    run = dir.file("run");
    spec.path = model;
    spec.sets = {{"vocab", "7"}};
    CompiledModel m = compileModelFile(model, spec.options("train"));
    train::Checkpoint c;
    c.tensors = initParams(m.params, 11);
    Tensor ema = c.tensors.at("head.weight");
    for (int64_t i = 0; i < ema.numel(); ++i) ema.setF(i, 0.01 * static_cast<double>(i) - 0.05);
    c.tensors.emplace("ema.head.weight", ema);
    c.tensors.emplace("adam.m.head.weight", Tensor(ema.type()));
    params = c.tensors;
    params.erase("adam.m.head.weight");
    params.erase("ema.head.weight");
    params.insert_or_assign("head.weight", ema);
    if (!drop.empty()) c.tensors.erase(drop);
    c.step = c.updates = 2;
    c.history = {{1, 1, 0.5, 1, 1e-3, 2}, {2, 2, 0.4, 1, 1e-3, 4}};
    c.model = spec.toJson();
    c.data = "{}";
    c.options = "{}";
    std::filesystem::create_directories(train::checkpointDir(run));
    train::saveCheckpoint(train::checkpointDir(run) + "/" + train::checkpointFileName(2), c);
  }

  // The interpreter's outputs of `graph` compiled with the checkpoint's settings and `dims`.
  std::vector<Tensor> expected(const std::string& graph, std::map<std::string, Tensor> inputs,
                               const std::vector<std::pair<std::string, int64_t>>& dims = {}) {
    CompiledModel m = compileModelFile(model, spec.options(graph, dims));
    for (const auto& [k, v] : params) inputs.insert_or_assign(k, v);
    return Interpreter().run(*m.graph, inputs);
  }
};

TensorFile predictInputs(int64_t batch) {
  TensorFile in;
  Tensor ids({DType::i64, {batch}}), x({DType::f32, {batch, 4}});
  for (int64_t i = 0; i < batch; ++i) ids.setI(i, (3 * i + 6) % 7);  // 6 needs vocab=7
  for (int64_t i = 0; i < x.numel(); ++i) x.setF(i, 0.25 * static_cast<double>(i % 5) - 0.5);
  in.tensors.emplace("ids", ids);
  in.tensors.emplace("x", x);
  return in;
}

void expectClose(const Tensor& got, const Tensor& want, double tol) {
  ASSERT_EQ(got.type(), want.type());
  for (int64_t i = 0; i < want.numel(); ++i)
    EXPECT_NEAR(got.getF(i), want.getF(i), tol) << "element " << i;
}

TEST(ToolRunCheckpoint, RunsAGraphWithTheCheckpointsParametersAndSettings) {
  Fixture f;
  writeSafetensors(f.dir.file("in.safetensors"), predictInputs(2));
  const auto want = f.expected("predict", predictInputs(2).tensors);
  for (const std::string backend : {"interp", "cpu"}) {
    const std::string out = f.dir.file("out-" + backend + ".safetensors");
    auto r = runTgc({"run", "--checkpoint", f.run, "--graph", "predict", "--inputs",
                     f.dir.file("in.safetensors"), "--outputs", out, "--backend", backend});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    TensorFile got = readSafetensors(out);
    EXPECT_EQ(got.metadata.at("graph"), "predict");
    EXPECT_TRUE(got.metadata.at("checkpoint").ends_with("/checkpoints/step-00000002.safetensors"))
        << got.metadata.at("checkpoint");
    expectClose(got.tensors.at("logits"), want[0], backend == "cpu" ? 1e-5 : 0);
  }
}

TEST(ToolRunCheckpoint, DimsAndRandomInputsAsForAGraphFile) {
  Fixture f;
  writeSafetensors(f.dir.file("in.safetensors"), predictInputs(5));
  auto r = runTgc({"run", "--checkpoint", f.run, "--graph", "predict", "--dim", "B=5",
                   "--inputs", f.dir.file("in.safetensors"), "--outputs",
                   f.dir.file("out.safetensors")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto want = f.expected("predict", predictInputs(5).tensors, {{"B", 5}});
  expectClose(readSafetensors(f.dir.file("out.safetensors")).tensors.at("logits"), want[0], 0);

  // The training graph's loss, its data inputs drawn from a seed; --print summarizes.
  r = runTgc({"run", "--checkpoint", f.run, "--graph", "train", "--random-inputs", "3",
              "--int-range", "0,7", "--print"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("%loss: f32[]"), std::string::npos) << r.out;
}

TEST(ToolRunCheckpoint, AParameterTheCheckpointLacksIsAnErrorNamingIt) {
  Fixture f("embed.weight");
  auto r = runTgc({"run", "--checkpoint", f.run, "--graph", "predict", "--random-inputs", "1"});
  EXPECT_TRUE(testing::failsCleanly(r));
  EXPECT_NE(r.err.find("%embed.weight (f32[7,4])"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("step-00000002.safetensors"), std::string::npos) << r.err;
}

TEST(ToolRunCheckpoint, BadCombinationsAreErrors) {
  Fixture f;
  auto r = runTgc({"run", "--checkpoint", f.run, "--random-inputs", "1"});
  EXPECT_TRUE(testing::failsCleanly(r));
  EXPECT_NE(r.err.find("--graph"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("train, predict"), std::string::npos) << r.err;
  // Usage errors (CLI11's exit codes, 100 and up): a file and a checkpoint, a graph without one.
  r = runTgc({"run", f.model, "--checkpoint", f.run, "--graph", "predict", "--random-inputs",
              "1"});
  EXPECT_GE(r.exit_code, 100) << r.err;
  EXPECT_NE(r.err.find("excludes --checkpoint"), std::string::npos) << r.err;
  r = runTgc({"run", f.model, "--graph", "predict"});
  EXPECT_GE(r.exit_code, 100) << r.err;
  EXPECT_NE(r.err.find("--graph requires --checkpoint"), std::string::npos) << r.err;
  r = runTgc({"run", "--checkpoint", f.run, "--graph", "nope", "--random-inputs", "1"});
  EXPECT_TRUE(testing::failsCleanly(r));
  EXPECT_NE(r.err.find("nope"), std::string::npos) << r.err;
  r = runTgc({"run", "--checkpoint", f.dir.file("absent"), "--graph", "predict",
              "--random-inputs", "1"});
  EXPECT_TRUE(testing::failsCleanly(r));
  EXPECT_NE(r.err.find("absent"), std::string::npos) << r.err;
}

// An id outside the checkpoint's vocabulary is an error on the compiled backend too.
TEST(ToolRunCheckpoint, AnIdOutsideTheVocabularyIsAnError) {
  Fixture f;
  auto r = runTgc({"run", "--checkpoint", f.run, "--graph", "predict", "--random-inputs", "1",
                   "--int-range", "7,8", "--backend", "cpu"});
  EXPECT_TRUE(testing::failsCleanly(r));
  EXPECT_NE(r.err.find("index 7 (at position [0] of input %ids) is out of range for a table of "
                       "7 rows"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace tgc
