// Translation with a freshly trained very small model: after a few hundred steps on the
// built-in task it gets easy numbers (零 to 十, as seen in training) right, greedy and
// with beam search, through the library and through `tgc translate` and `tgc eval`; decoding
// with the key/value cache gives what recomputing every prefix gives.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "runtime/train/checkpoint.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/trainer.h"
#include "runtime/train/translator.h"
#include "tests/tools/tool_test_util.h"
#include "tests/train/trainer_test_util.h"

using namespace tgc;
using namespace tgc::train;

namespace {

TEST(TranslateTest, LengthBuckets) {
  EXPECT_EQ(lengthBucket(1), 16);
  EXPECT_EQ(lengthBucket(16), 16);
  EXPECT_EQ(lengthBucket(17), 32);
  EXPECT_EQ(lengthBucket(100), 128);
}

TEST(TranslateTest, FreshTinyModelTranslatesEasyNumbers) {
  traintest::ScratchDir dir("tgc-translate");
  TrainConfig c = traintest::microConfig();
  c.batchSize = 32;
  c.buckets = 1;
  c.optimizer.lr_scale = 0.5;
  c.optimizer.warmup = 100;
  Trainer t(traintest::microModel("0"), traintest::microData(4000), c, dir.str(),
            traintest::trainExecOptions());
  StopRule rule;
  rule.steps = 400;
  t.train(rule);

  // The numbers of one Chinese character (零 to 十) the model was trained on.
  std::set<std::pair<std::string, std::string>> easy;
  for (const auto& p : t.data().train)
    if (p.src.size() == 1) easy.insert({p.srcText, p.tgtText});
  ASSERT_GE(easy.size(), 8u);
  std::vector<std::string> texts, expected;
  for (const auto& [zh, en] : easy) {
    texts.push_back(zh);
    expected.push_back(en);
  }
  Translator& tr = t.translator();
  DecodeOptions greedy = t.decodeOptions();
  EXPECT_EQ(translateTexts(tr, t.data().srcVocab, t.data().tgtVocab, texts, greedy), expected);
  DecodeOptions beam = greedy;
  beam.beam = 3;
  EXPECT_EQ(translateTexts(tr, t.data().srcVocab, t.data().tgtVocab, texts, beam), expected);

  // Reusing keys and values gives the outputs of recomputing every prefix, on 96 validation
  // sources (most of them long numbers this model still gets wrong).
  std::vector<std::vector<int64_t>> sources;
  for (size_t i = 0; i < 96; ++i) sources.push_back(t.data().srcVocab.encode(t.data().valid[i].src));
  for (int b : {1, 3}) {
    DecodeOptions cached = greedy, full = greedy;
    cached.beam = full.beam = b;
    full.kvCache = false;
    EXPECT_EQ(tr.translate(sources, cached), tr.translate(sources, full)) << "beam " << b;
    EXPECT_EQ(tr.stats().compilesWhileDecoding, 0) << "beam " << b;  // every shape compiled first
  }

  // The command line, on the checkpoint the run ended with.
  auto r = tgc::testing::runTgc({"translate", "--checkpoint", dir.str(), texts[0], texts[1]});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expected[0] + "\n" + expected[1] + "\n");
  r = tgc::testing::runTgc({"translate", "--checkpoint", dir.str(), "--beam", "2", texts[2]});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expected[2] + "\n");
  r = tgc::testing::runTgc({"eval", "--checkpoint", dir.str(), "--limit", "64", "--show", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("exact match"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(64 sentences, greedy"), std::string::npos) << r.out;

  // int8 matmuls (pass quantize) keep the easy numbers right, and new parameters are taken
  // (the quantized graphs pack their weights once, so they compile again).
  tr.setQuantize(true);
  EXPECT_EQ(translateTexts(tr, t.data().srcVocab, t.data().tgtVocab, texts, greedy), expected);
  std::map<std::string, Tensor> zeroed = t.parameters();
  for (auto& [name, p] : zeroed)
    if (name.find("generator") != std::string::npos) p = Tensor(p.type());  // all zeros
  tr.setParams(zeroed);
  EXPECT_NE(translateTexts(tr, t.data().srcVocab, t.data().tgtVocab, texts, greedy), expected);
  tr.setParams(t.parameters());
  tr.setQuantize(false);

  // Batching by tokens changes the batches, not the translations; scores are log-probabilities.
  DecodeOptions byTokens = greedy;
  byTokens.maxTokens = 24;
  std::vector<double> scores;
  EXPECT_EQ(tr.translate(sources, byTokens, &scores), tr.translate(sources, greedy));
  EXPECT_GT(tr.stats().batches, 4);
  EXPECT_EQ(tr.stats().sentences, 96);
  EXPECT_GT(tr.stats().steps, 0);
  EXPECT_EQ(tr.stats().compilesWhileDecoding, 0);
  ASSERT_EQ(scores.size(), sources.size());
  for (double s : scores) EXPECT_TRUE(std::isfinite(s) && s <= 0) << s;

  // A file in, a file out, in input order, a blank line for a blank line; --scores and
  // --stats; then `tgc eval --score` on what it wrote.
  {
    std::ofstream in(dir.str("in.txt"));
    in << texts[3] << "\n" << texts[0] << "\n\n" << texts[1] << "\n";
    std::ofstream ref(dir.str("ref.txt"));
    ref << expected[3] << "\n" << expected[0] << "\n\n" << expected[1] << "\n";
  }
  r = tgc::testing::runTgc({"translate", "--checkpoint", dir.str(), "--input", dir.str("in.txt"),
                            "--output", dir.str("out.txt"), "--max-tokens", "4", "--stats"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("translated 3 of 3 sentences"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("time to the first token"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.str("out.txt.tmp")));
  {
    std::ifstream out(dir.str("out.txt"));
    std::stringstream s;
    s << out.rdbuf();
    EXPECT_EQ(s.str(), expected[3] + "\n" + expected[0] + "\n\n" + expected[1] + "\n");
  }
  r = tgc::testing::runTgc({"eval", "--score", dir.str("out.txt"), "--references", dir.str("ref.txt")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("exact match 100.00%"), std::string::npos) << r.out;
  r = tgc::testing::runTgc({"translate", "--checkpoint", dir.str(), "--input", dir.str("in.txt"), "--scores"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\t" + expected[0] + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0.0000\t\n"), std::string::npos) << r.out;  // the blank line
  // An output that cannot be written is an error, and leaves nothing behind.
  r = tgc::testing::runTgc({"translate", "--checkpoint", dir.str(), "--input", dir.str("in.txt"),
                            "--output", dir.str("no-such-dir/out.txt")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot write"), std::string::npos) << r.err;
  // Translations and references that do not pair up are refused.
  {
    std::ofstream two(dir.str("two.txt"));
    two << expected[3] << "\n" << expected[0] << "\n";
  }
  r = tgc::testing::runTgc({"eval", "--score", dir.str("out.txt"), "--references", dir.str("two.txt")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("has 4 lines but"), std::string::npos) << r.err;

  // A missing checkpoint is an error that says so.
  r = tgc::testing::runTgc({"translate", "--checkpoint", dir.str("nothing-here"), "三"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no such checkpoint file or run directory"), std::string::npos) << r.err;
}

}  // namespace
