// What bench/tatoeba_bleu.py needs from tgc: the data export for other implementations
// (what it writes is the trainer's data exactly: ids, buckets, batch order, validation
// texts, vocabularies that read back equal), `tgc train --export-data` writing it without
// training, and `tgc eval --hypotheses` writing the translations it scored.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/data/dataset.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/data_export.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/trainer.h"
#include "tests/tools/tool_test_util.h"
#include "tests/train/trainer_test_util.h"

using namespace tgc;
using nlohmann::json;

namespace {

data::TranslationData smallCorpus() {
  std::string tsv;
  const char* en[] = {"I run.", "You run.", "We eat rice.", "He is tall.", "She reads books.",
                      "It is cold today.", "They like tea.", "The cat sleeps."};
  const char* zh[] = {"我跑。", "你跑。", "我们吃饭。", "他很高。", "她看书。", "今天很冷。",
                      "他们喜欢茶。", "猫在睡觉。"};
  for (int rep = 0; rep < 6; ++rep)
    for (int i = 0; i < 8; ++i)
      tsv += std::string(en[i]) + (rep ? std::string(" ") + std::to_string(rep) : "") + "\t" +
             zh[i] + std::to_string(rep) + "\tattribution\n";
  data::CorpusOptions o;
  o.validFraction = 0.2;
  return data::corpusData(data::parseTsvCorpus(tsv, "small.tsv"), o);
}

TEST(DataExport, WritesTheTrainersDataExactly) {
  const data::TranslationData d = smallCorpus();
  ASSERT_FALSE(d.valid.empty());
  const data::Batcher batcher(data::encodeSplit(d, d.train), {.batchSize = 4, .numBuckets = 2});
  train::DataExportInfo info;
  info.spec.kind = "tsv";
  info.spec.path = "small.tsv";
  info.seed = 7;
  info.batchSize = 4;
  info.epochs = 3;
  info.lengthCap = 11;
  traintest::ScratchDir dir("data-export");
  const std::string path = (dir.path / "data.json").string();
  train::writeDataExport(path, d, batcher, info);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::ifstream f(path);
  const json j = json::parse(f);

  EXPECT_EQ(j.at("format"), "tgc-data-export");
  EXPECT_EQ(j.at("seed"), 7);
  EXPECT_EQ(j.at("batch_size"), 4);
  EXPECT_EQ(j.at("length_cap"), 11);
  EXPECT_EQ(j.at("data").at("kind"), "tsv");
  ASSERT_EQ(j.at("buckets").size(), batcher.buckets().size());
  for (size_t b = 0; b < batcher.buckets().size(); ++b) {
    EXPECT_EQ(j["buckets"][b][0], batcher.buckets()[b].srcLen);
    EXPECT_EQ(j["buckets"][b][1], batcher.buckets()[b].tgtLen);
  }
  EXPECT_TRUE(data::Vocab::fromJson(j.at("src_vocab").dump()) == d.srcVocab);
  EXPECT_TRUE(data::Vocab::fromJson(j.at("tgt_vocab").dump()) == d.tgtVocab);

  ASSERT_EQ(j["train"]["src"].size(), batcher.data().size());
  for (size_t i = 0; i < batcher.data().size(); ++i) {
    EXPECT_EQ(j["train"]["src"][i].get<std::vector<int64_t>>(), batcher.data()[i].src);
    EXPECT_EQ(j["train"]["tgt"][i].get<std::vector<int64_t>>(), batcher.data()[i].tgt);
  }
  ASSERT_EQ(j.at("epochs").size(), 3u);
  for (uint64_t e = 0; e < 3; ++e) {
    const auto plans = batcher.planEpoch(7, e);
    ASSERT_EQ(j["epochs"][e].size(), plans.size());
    for (size_t k = 0; k < plans.size(); ++k) {
      EXPECT_EQ(j["epochs"][e][k][0], plans[k].bucket);
      EXPECT_EQ(j["epochs"][e][k][1].get<std::vector<size_t>>(), plans[k].examples);
    }
  }
  // Epochs differ in order (the export is not one epoch repeated).
  EXPECT_NE(j["epochs"][0], j["epochs"][1]);

  const auto valid = data::encodeSplit(d, d.valid);
  ASSERT_EQ(j["valid"]["tgt_text"].size(), d.valid.size());
  for (size_t i = 0; i < d.valid.size(); ++i) {
    EXPECT_EQ(j["valid"]["src"][i].get<std::vector<int64_t>>(), valid[i].src);
    EXPECT_EQ(j["valid"]["tgt"][i].get<std::vector<int64_t>>(), valid[i].tgt);
    EXPECT_EQ(j["valid"]["src_text"][i], d.valid[i].srcText);
    EXPECT_EQ(j["valid"]["tgt_text"][i], d.valid[i].tgtText);
  }
}

TEST(DataExport, CommandLineExportAndHypotheses) {
  traintest::ScratchDir dir("data-export-cli");
  const std::string model = std::string(TGC_SOURCE_DIR) + "/models/transformer.tg";
  const std::string exportPath = (dir.path / "data.json").string();
  // --export-data writes the file and trains nothing (no checkpoint).
  auto r = tgc::testing::runTgc({"train", model, "--preset", "tiny", "--batch", "16",
                                 "--export-data", exportPath, "--export-epochs", "2", "--out",
                                 (dir.path / "export-run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(train::listCheckpoints((dir.path / "export-run").string()).empty());
  std::ifstream f(exportPath);
  const json j = json::parse(f);
  EXPECT_EQ(j.at("batch_size"), 16);
  EXPECT_EQ(j.at("epochs").size(), 2u);
  EXPECT_EQ(j.at("data").at("kind"), "numerals");
  EXPECT_EQ(j.at("valid").at("tgt_text").size(), 1000u);  // the built-in validation split

  // A few steps of a very small model, then `tgc eval --hypotheses`: the file holds what
  // the library decodes from the same checkpoint, one line per scored sentence.
  const std::string run = (dir.path / "run").string();
  train::Trainer t(traintest::microModel("0"), traintest::microData(500),
                   traintest::microConfig(), run, traintest::trainExecOptions());
  train::StopRule rule;
  rule.steps = 20;
  t.train(rule);
  const std::string hyps = (dir.path / "hyps.txt").string();
  r = tgc::testing::runTgc({"eval", "--checkpoint", run, "--limit", "12", "--show", "0",
                            "--hypotheses", hyps});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream h(hyps);
  std::vector<std::string> lines;
  for (std::string line; std::getline(h, line);) lines.push_back(line);
  const train::EvalResult want = train::evaluatePairs(t.translator(), t.data(),
                                                      train::evalSplit(t.data()),
                                                      t.decodeOptions(), 12);
  EXPECT_EQ(lines, want.hypotheses);
}

}  // namespace
