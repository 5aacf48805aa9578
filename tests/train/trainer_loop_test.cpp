// The training loop on a very small model: resuming is bit-exact (loss curve, validation,
// parameters and optimizer state), a non-finite step changes nothing and is counted, and
// repeated non-finite steps stop training with a message.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "frontend/frontend.h"
#include "passes/train_step.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/trainer.h"
#include "tests/train/trainer_test_util.h"

using namespace tgc;
using namespace tgc::train;
namespace fs = std::filesystem;

namespace {

std::string readAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

bool sameBytes(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

void expectSameState(const runtime::ParamStore& a, const runtime::ParamStore& b) {
  ASSERT_EQ(a.names(), b.names());
  for (const auto& [name, t] : a.tensors())
    EXPECT_TRUE(sameBytes(t, b.at(name))) << name << " differs";
}

TEST(TrainerTest, GuardCoversEveryStateUpdate) {
  ModelOptions o = traintest::microModel().options("train", {{"B", 2}, {"S", 4}, {"T", 3}},
                                                 {{"src_vocab", "8"}, {"tgt_vocab", "8"}});
  CompiledModel m = compileModelFile(traintest::microModel().path, o);
  m.graph->setOutputs({m.graph->outputs()[static_cast<size_t>(m.loss_output)]});
  const size_t params = buildTrainStep(*m.graph, OptimizerConfig{});
  EXPECT_EQ(guardNonFinite(*m.graph), 3 * params);  // parameter, first and second moment
  EXPECT_EQ(m.graph->outputs().back()->name(), "finite");
  for (const Value* out : m.graph->outputs())
    if (out->name().starts_with("new.")) {
      EXPECT_EQ(out->def()->op(), OpKind::Where) << out->name();
    }
}

// 12 steps in one go against 6 steps, a new process's worth of Trainer resumed from the
// checkpoint, then 6 more: the same loss.csv, valid.csv and final state, byte for byte.
// Dropout is on, so its random stream must continue where it stopped too.
TEST(TrainerTest, ResumeIsBitExact) {
  traintest::ScratchDir whole("tgc-whole"), split("tgc-split");
  TrainConfig c = traintest::microConfig();
  c.validEvery = 4;
  c.validSize = 16;
  c.checkpointEvery = 5;
  const auto exec = traintest::trainExecOptions();

  Trainer a(traintest::microModel(), traintest::microData(), c, whole.str(), exec);
  StopRule all;
  all.steps = 12;
  const TrainResult ra = a.train(all);
  EXPECT_EQ(ra.reason, TrainResult::Reason::steps);
  ASSERT_EQ(a.stepCount(), 12);

  {
    Trainer b(traintest::microModel(), traintest::microData(), c, split.str(), exec);
    StopRule half;
    half.steps = 6;
    b.train(half);
  }
  auto resumed = Trainer::resume(split.str(), "", exec);
  EXPECT_EQ(resumed->stepCount(), 6);
  resumed->train(all);

  EXPECT_EQ(readAll(whole.str("loss.csv")), readAll(split.str("loss.csv")));
  EXPECT_EQ(readAll(whole.str("valid.csv")), readAll(split.str("valid.csv")));
  const std::string csv = readAll(whole.str("loss.csv"));
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 13);  // header and 12 steps
  expectSameState(a.store(), resumed->store());
  const Checkpoint ca = loadLatestCheckpoint(whole.str()), cb = loadLatestCheckpoint(split.str());
  EXPECT_EQ(ca.step, 12);
  EXPECT_EQ(ca.history, cb.history);
  EXPECT_EQ(ca.valid, cb.valid);
  EXPECT_EQ(ca.valid.size(), 3u);
  EXPECT_TRUE(fs::exists(whole.str("loss.svg")));
  // keep 3: steps 5, 10 and 12.
  EXPECT_EQ(listCheckpoints(whole.str()).size(), 3u);
}

// NaN in a layer norm gain makes the loss NaN: the step is skipped (no parameter or moment
// changes, the update counter stays), and once the NaN is gone training goes on.
TEST(TrainerTest, NonFiniteStepChangesNothing) {
  traintest::ScratchDir dir("tgc-nan");
  Trainer t(traintest::microModel("0"), traintest::microData(), traintest::microConfig(), dir.str(),
            traintest::trainExecOptions());
  t.step();
  t.step();
  ASSERT_EQ(t.updates(), 2);
  const std::string gain = "encoder.layers.0.norm1.gamma";
  Tensor& g = t.store().at(gain);
  const double kept = g.getF(3);
  g.setF(3, std::numeric_limits<double>::quiet_NaN());
  const runtime::ParamStore before = t.store();

  const HistoryRow bad = t.step();
  EXPECT_TRUE(std::isnan(bad.loss));
  EXPECT_EQ(t.updates(), 2);
  EXPECT_EQ(t.skipped(), 1);
  EXPECT_EQ(bad.update, 2);
  expectSameState(before, t.store());

  t.store().at(gain).setF(3, kept);
  const HistoryRow good = t.step();
  EXPECT_TRUE(std::isfinite(good.loss));
  EXPECT_EQ(t.updates(), 3);
  EXPECT_EQ(t.stepCount(), 4);
}

TEST(TrainerTest, RepeatedNonFiniteStepsStop) {
  traintest::ScratchDir dir("tgc-nan");
  TrainConfig c = traintest::microConfig();
  c.maxBadSteps = 3;
  Trainer t(traintest::microModel("0"), traintest::microData(), c, dir.str(), traintest::trainExecOptions());
  t.step();
  t.store().at("decoder.layers.0.norm3.beta").setF(0, std::numeric_limits<double>::infinity());
  StopRule rule;
  rule.steps = 50;
  const TrainResult r = t.train(rule);
  EXPECT_EQ(r.reason, TrainResult::Reason::nonFinite);
  EXPECT_EQ(r.step, 4);
  EXPECT_EQ(r.updates, 1);
  EXPECT_EQ(r.skipped, 3);
  EXPECT_NE(r.message.find("3 steps in a row had a non-finite loss"), std::string::npos) << r.message;
  // The parameters hold the infinity, so no checkpoint is written on the way out (it would
  // replace, and in time prune, the good ones); there was none before it.
  EXPECT_EQ(r.checkpoint, "");
  EXPECT_TRUE(listCheckpoints(checkpointDir(dir.str())).empty());
}

// The same with a good checkpoint on disk: it stays the last one, and resuming takes it.
TEST(TrainerTest, NonFiniteStateKeepsTheLastGoodCheckpoint) {
  traintest::ScratchDir dir("tgc-nan-keep");
  TrainConfig c = traintest::microConfig();
  c.maxBadSteps = 2;
  c.checkpointEvery = 1;
  Trainer t(traintest::microModel("0"), traintest::microData(), c, dir.str(), traintest::trainExecOptions());
  StopRule one;
  one.steps = 1;
  const std::string good = t.train(one).checkpoint;
  ASSERT_FALSE(good.empty());
  t.store().at("decoder.layers.0.norm3.beta").setF(0, std::numeric_limits<double>::quiet_NaN());
  StopRule rule;
  rule.steps = 50;
  const TrainResult r = t.train(rule);
  EXPECT_EQ(r.reason, TrainResult::Reason::nonFinite);
  EXPECT_EQ(r.checkpoint, good);
  EXPECT_EQ(listCheckpoints(checkpointDir(dir.str())), std::vector<std::string>{good});
  EXPECT_EQ(loadLatestCheckpoint(dir.str()).updates, 1);
}

TEST(TrainerTest, NewRunRefusesADirectoryWithCheckpoints) {
  traintest::ScratchDir dir("tgc-again");
  TrainConfig c = traintest::microConfig();
  {
    Trainer t(traintest::microModel(), traintest::microData(), c, dir.str(), traintest::trainExecOptions());
    StopRule r;
    r.steps = 1;
    t.train(r);
  }
  try {
    Trainer t(traintest::microModel(), traintest::microData(), c, dir.str(), traintest::trainExecOptions());
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--resume"), std::string::npos) << e.what();
  }
}

// Ctrl-C during `tgc train`: the command saves a checkpoint of the step it reached, says
// so, and exits with 130.
TEST(TrainCommandTest, InterruptSavesACheckpoint) {
  traintest::ScratchDir dir("tgc-sigint");
  const std::string out = dir.str("run"), err = dir.str("stderr.txt"), log = dir.str("stdout.txt");
  const char* env = std::getenv("TGC_EXE");
  const std::string exe = env && *env ? env : std::string(TGC_BINARY_DIR) + "/tools/tgc";
  const std::string model = std::string(TGC_SOURCE_DIR) + "/models/transformer.tg";
  std::vector<std::string> args{exe, "train", model, "--preset", "tiny", "--set", "d_model=32",
                                "--set", "heads=2", "--set", "d_ff=64", "--set", "n_enc=1",
                                "--set", "n_dec=1", "--batch", "16", "--buckets", "1",
                                "--steps", "1000000", "--valid-every", "0", "--out", out};
  setenv("TGC_CACHE_DIR", (std::string(TGC_BINARY_DIR) + "/test-kernel-cache").c_str(), 1);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int o = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(e, 2);
    dup2(o, 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  // Interrupt once the training step is compiled and a few steps have run.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (readAll(err).find("compiled the training step") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(child, SIGINT);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << readAll(err);
  EXPECT_EQ(WEXITSTATUS(status), 130) << readAll(err);
  EXPECT_NE(readAll(log).find("interrupted at step"), std::string::npos) << readAll(log);
  const Checkpoint c = loadLatestCheckpoint(out);
  EXPECT_GT(c.step, 0);
  EXPECT_EQ(static_cast<int64_t>(c.history.size()), c.step);
}

}  // namespace
