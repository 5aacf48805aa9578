// Checkpoint files: round trip, refusal of cut-short and corrupted files with the reason
// while the previous checkpoint stays loadable, and a save killed half-way (SIGKILL in a
// forked child) leaving the last good checkpoint intact.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "runtime/safetensors.h"
#include "runtime/train/checkpoint.h"
#include "tests/train/trainer_test_util.h"

using namespace tgc;
using namespace tgc::train;
namespace fs = std::filesystem;

namespace {

Checkpoint sample(int64_t step, int64_t floats = 64) {
  Checkpoint c;
  Tensor w(TensorType{DType::f32, {floats}});
  for (int64_t i = 0; i < floats; ++i) w.setF(i, 0.5 * static_cast<double>(i) + static_cast<double>(step));
  c.tensors.emplace("encoder.w", w);
  c.tensors.emplace("adam.m.encoder.w", Tensor(w.type()));
  c.step = step;
  c.updates = step - 1;
  c.skipped = 1;
  c.seconds = 1.25;
  c.model = R"({"path":"m.tg"})";
  c.data = R"({"kind":"numerals"})";
  c.options = "{}";
  c.srcVocab = data::Vocab::build(data::TokenizerKind::chars, false, {{"三", "千"}});
  c.tgtVocab = data::Vocab::build(data::TokenizerKind::words, false, {{"three", "thousand"}});
  for (int64_t s = 1; s <= step; ++s)
    c.history.push_back({s, s == 1 ? 0 : s - 1, 3.0 / static_cast<double>(s), 1.5, 1e-3, 40});
  c.valid.push_back({step, 0.75, 0.5, 42.0});
  return c;
}

std::string readAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void writeAll(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

TEST(CheckpointTest, RoundTrip) {
  traintest::ScratchDir dir("tgc-ckpt");
  const Checkpoint c = sample(5);
  const std::string path = dir.str(checkpointFileName(5));
  saveCheckpoint(path, c);
  const Checkpoint r = loadCheckpoint(path);
  EXPECT_EQ(r.step, 5);
  EXPECT_EQ(r.updates, 4);
  EXPECT_EQ(r.skipped, 1);
  EXPECT_EQ(r.seconds, 1.25);
  EXPECT_EQ(r.model, c.model);
  EXPECT_EQ(r.history, c.history);
  EXPECT_EQ(r.valid, c.valid);
  EXPECT_TRUE(r.srcVocab == c.srcVocab);
  EXPECT_TRUE(r.tgtVocab == c.tgtVocab);
  ASSERT_EQ(r.tensors.size(), 2u);
  EXPECT_EQ(r.tensors.at("encoder.w").toDoubles(), c.tensors.at("encoder.w").toDoubles());
  EXPECT_EQ(r.parameters().size(), 1u);  // adam.* are optimizer state
}

TEST(CheckpointTest, CutShortOrCorruptIsRefusedAndThePreviousStillLoads) {
  traintest::ScratchDir dir("tgc-ckpt");
  const std::string ckdir = checkpointDir(dir.str());
  fs::create_directories(ckdir);
  const std::string good = ckdir + "/" + checkpointFileName(10);
  const std::string newest = ckdir + "/" + checkpointFileName(20);
  saveCheckpoint(good, sample(10));
  saveCheckpoint(newest, sample(20));
  const std::string bytes = readAll(newest);

  // Cut short: the data section ends early.
  writeAll(newest, bytes.substr(0, bytes.size() - 17));
  try {
    loadLatestCheckpoint(dir.str());
    FAIL() << "a truncated checkpoint loaded";
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(newest), std::string::npos) << msg;
    EXPECT_NE(msg.find("invalid safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("previous checkpoint " + good + " is intact"), std::string::npos) << msg;
  }
  EXPECT_EQ(loadLatestCheckpoint(good).step, 10);

  // A corrupted header (a byte of the JSON flipped), and a header length past the end.
  std::string flipped = bytes;
  flipped[8 + 2] = '\x01';
  writeAll(newest, flipped);
  EXPECT_THROW(loadCheckpoint(newest), CheckpointError);
  std::string huge = bytes;
  huge[6] = '\x7f';
  writeAll(newest, huge);
  EXPECT_THROW(loadCheckpoint(newest), CheckpointError);
  writeAll(newest, "");
  EXPECT_THROW(loadCheckpoint(newest), CheckpointError);
  EXPECT_EQ(loadCheckpoint(good).step, 10);

  // Valid safetensors that is not a checkpoint.
  TensorFile plain;
  plain.tensors.emplace("x", Tensor(TensorType{DType::f32, {2}}));
  writeSafetensors(newest, plain);
  try {
    loadCheckpoint(newest);
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("invalid checkpoint: no 'format'"), std::string::npos)
        << e.what();
  }
}

// A NaN or an infinity in a parameter or in the optimizer state is damage (training skips
// steps with non-finite gradients, so it never makes one): such a state is not written, and
// a file holding one is refused on loading, naming the tensor.
TEST(CheckpointTest, NonFiniteParametersOrStateAreNeitherWrittenNorLoaded) {
  traintest::ScratchDir dir("tgc-ckpt");
  const std::string path = dir.str(checkpointFileName(3));
  const double bad[] = {std::nan(""), std::numeric_limits<double>::infinity(),
                        -std::numeric_limits<double>::infinity()};
  for (const char* name : {"encoder.w", "adam.m.encoder.w"})
    for (double v : bad) {
      SCOPED_TRACE(std::string(name) + " holding " + std::to_string(v));
      Checkpoint c = sample(3);
      c.tensors.at(name).setF(17, v);
      // Runs f, which must throw CheckpointError saying `what` about the tensor.
      auto refused = [&](auto f, const std::string& what) {
        try {
          f();
          ADD_FAILURE() << "no error: expected " << what;
        } catch (const CheckpointError& e) {
          const std::string msg = e.what();
          EXPECT_NE(msg.find(path + ": error: " + what + ": tensor '" + name + "' holds"),
                    std::string::npos) << msg;
          EXPECT_NE(msg.find("at element 17 of 64"), std::string::npos) << msg;
        }
      };
      refused([&] { saveCheckpoint(path, c); }, "not written");
      EXPECT_FALSE(fs::exists(path));

      // The same damage in a file written some other way.
      saveCheckpoint(path, sample(3));
      TensorFile f = readSafetensors(path);
      f.tensors.at(name).setF(17, v);
      writeSafetensors(path, f);
      refused([&] { loadCheckpoint(path); }, "invalid checkpoint");
      fs::remove(path);
    }
  // bf16 and f64 tensors are checked too; integer ones have no NaN.
  Checkpoint c = sample(3);
  Tensor h(TensorType{DType::bf16, {4}});
  h.setF(3, std::nan(""));
  c.tensors.emplace("decoder.h", h);
  EXPECT_THROW(saveCheckpoint(path, c), CheckpointError);
  c = sample(3);
  Tensor d(TensorType{DType::f64, {4}});
  d.setF(0, std::numeric_limits<double>::infinity());
  c.tensors.emplace("decoder.d", d);
  EXPECT_THROW(saveCheckpoint(path, c), CheckpointError);
  c = sample(3);
  c.tensors.emplace("decoder.i", Tensor(TensorType{DType::i64, {4}}));
  saveCheckpoint(path, c);
  EXPECT_EQ(loadCheckpoint(path).tensors.size(), 3u);
}

TEST(CheckpointTest, ListPruneAndTemporaries) {
  traintest::ScratchDir dir("tgc-ckpt");
  const std::string ckdir = checkpointDir(dir.str());
  fs::create_directories(ckdir);
  for (int64_t s : {3, 1, 2, 10}) saveCheckpoint(ckdir + "/" + checkpointFileName(s), sample(s));
  writeAll(ckdir + "/" + checkpointFileName(11) + ".tmp.123.0", "partial");
  writeAll(ckdir + "/notes.txt", "x");
  auto all = listCheckpoints(dir.str());
  ASSERT_EQ(all.size(), 4u);
  EXPECT_TRUE(all.back().ends_with(checkpointFileName(10)));
  EXPECT_EQ(loadLatestCheckpoint(dir.str()).step, 10);
  pruneCheckpoints(dir.str(), 2);
  all = listCheckpoints(dir.str());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_TRUE(all.front().ends_with(checkpointFileName(3)));
  EXPECT_EQ(removeStaleTemporaries(dir.str()), 1);
  EXPECT_TRUE(fs::exists(ckdir + "/notes.txt"));
}

// A child process saves a large checkpoint over and over and is killed with SIGKILL while
// its temporary file is being written; the newest checkpoint file still loads (the first
// one, or a complete later one) and the temporary it left is the only debris.
TEST(CheckpointTest, KillDuringSaveLeavesTheLastGoodCheckpoint) {
  traintest::ScratchDir dir("tgc-ckpt");
  const std::string ckdir = checkpointDir(dir.str());
  fs::create_directories(ckdir);
  saveCheckpoint(ckdir + "/" + checkpointFileName(1), sample(1));
  const Checkpoint big = sample(2, 24 << 20);  // 96 MiB of parameters
  bool sawPartial = false;
  for (int attempt = 0; attempt < 6 && !sawPartial; ++attempt) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (;;) saveCheckpoint(ckdir + "/" + checkpointFileName(2), big);
    }
    // Kill it as soon as its temporary file appears (or after 20 s at the latest).
    auto writing = [&] {
      for (const auto& e : fs::directory_iterator(ckdir))
        if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
      return false;
    };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!writing() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * attempt));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    for (const auto& e : fs::directory_iterator(ckdir))
      if (e.path().filename().string().find(".tmp.") != std::string::npos) sawPartial = true;
    // The newest checkpoint always loads: step 1, or a complete step 2.
    const Checkpoint c = loadLatestCheckpoint(dir.str());
    EXPECT_TRUE(c.step == 1 || c.step == 2);
    if (c.step == 2) {
      EXPECT_EQ(c.tensors.at("encoder.w").numel(), 24 << 20);
    }
    removeStaleTemporaries(dir.str());
  }
  EXPECT_TRUE(sawPartial) << "the child was never caught in the middle of a save";
  EXPECT_EQ(loadCheckpoint(ckdir + "/" + checkpointFileName(1)).step, 1);
}

}  // namespace
