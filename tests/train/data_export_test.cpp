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
#include "runtime/data/lm_data.h"
#include "runtime/safetensors.h"
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

TEST(DataExport, WritesTheLmTasksDataExactly) {
  data::LmOptions o;
  o.validFraction = 0.1;
  const data::LmData d = data::lmData(data::builtinText(3, 300), o);
  ASSERT_FALSE(d.valid.empty());
  const data::LmBatcher batcher(d.train, {.batchSize = 8, .numBuckets = 2, .dropPartial = true});
  train::DataExportInfo info;
  info.spec.kind = "builtin";
  info.seed = 5;
  info.batchSize = 8;
  info.epochs = 2;
  const json j = json::parse(train::lmDataExportJson(d, batcher, info));
  EXPECT_EQ(j.at("format"), "tgc-data-export");
  EXPECT_EQ(j.at("task"), "lm");
  EXPECT_EQ(j.at("seed"), 5);
  EXPECT_EQ(j.at("batch_size"), 8);
  EXPECT_EQ(j.at("data").at("kind"), "builtin");
  EXPECT_EQ(j.at("pad"), data::Vocab::kPad);
  EXPECT_EQ(j.at("bos"), data::Vocab::kBos);
  EXPECT_EQ(j.at("eos"), data::Vocab::kEos);
  EXPECT_TRUE(data::Vocab::fromJson(j.at("vocab").dump()) == d.vocab);
  ASSERT_EQ(j.at("buckets").size(), batcher.buckets().size());
  for (size_t b = 0; b < batcher.buckets().size(); ++b)
    EXPECT_EQ(j["buckets"][b], batcher.buckets()[b].at("length"));
  EXPECT_EQ(j.at("train").get<std::vector<std::vector<int64_t>>>(), batcher.data());
  EXPECT_EQ(j.at("valid").get<std::vector<std::vector<int64_t>>>(), d.valid);
  ASSERT_EQ(j.at("epochs").size(), 2u);
  for (uint64_t e = 0; e < 2; ++e) {
    const auto plans = batcher.planEpoch(5, e);
    ASSERT_EQ(j["epochs"][e].size(), plans.size());
    for (size_t k = 0; k < plans.size(); ++k) {
      EXPECT_EQ(j["epochs"][e][k][0], plans[k].bucket);
      EXPECT_EQ(j["epochs"][e][k][1].get<std::vector<size_t>>(), plans[k].examples);
    }
  }
  // A batch rebuilt from the export by the documented rule is the batcher's.
  const auto plan = batcher.planEpoch(5, 0).front();
  const data::FieldBatch b = batcher.makeBatch(plan);
  const int64_t L = j["buckets"][static_cast<size_t>(plan.bucket)].get<int64_t>();
  for (size_t r = 0; r < plan.examples.size(); ++r) {
    const auto seq = j["train"][plan.examples[r]].get<std::vector<int64_t>>();
    for (int64_t t = 0; t < L; ++t) {
      const auto n = static_cast<int64_t>(seq.size()) - 1;
      const auto i = static_cast<size_t>(t);
      const size_t at = r * static_cast<size_t>(L) + i;
      EXPECT_EQ(b.fields.at("tokens").as<int64_t>()[at], t < n ? seq[i] : 0);
      EXPECT_EQ(b.fields.at("targets").as<int64_t>()[at], t < n ? seq[i + 1] : 0);
    }
  }
}

TEST(DataExport, CommandLineLmExportWritesTheInitialParameters) {
  traintest::ScratchDir dir("data-export-lm");
  const std::string model = std::string(TGC_SOURCE_DIR) + "/models/gpt.tg";
  const std::string exportPath = (dir.path / "lm.json").string();
  auto r = tgc::testing::runTgc({"train", model, "--preset", "tiny", "--batch", "16",
                                 "--export-data", exportPath, "--export-epochs", "1", "--out",
                                 (dir.path / "export-run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(train::listCheckpoints((dir.path / "export-run").string()).empty());
  std::ifstream f(exportPath);
  const json j = json::parse(f);
  EXPECT_EQ(j.at("task"), "lm");
  EXPECT_EQ(j.at("batch_size"), 16);
  EXPECT_EQ(j.at("epochs").size(), 1u);
  const TensorFile init = readSafetensors((dir.path / "lm.init.safetensors").string());
  ASSERT_TRUE(init.tensors.contains("tok_embed.weight"));
  const auto vocab = static_cast<int64_t>(j.at("vocab").at("tokens").size());
  EXPECT_EQ(init.tensors.at("tok_embed.weight").shape(), (Shape{vocab, 64}));
  for (const auto& [name, t] : init.tensors) EXPECT_FALSE(name.starts_with("adam.")) << name;

  // Tasks without an export say so.
  r = tgc::testing::runTgc({"train", std::string(TGC_SOURCE_DIR) + "/models/classifier.tg",
                            "--export-data", (dir.path / "c.json").string(), "--out",
                            (dir.path / "c-run").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--export-data writes translation and lm data; this run's task is "
                       "classification"),
            std::string::npos)
      << r.err;
}

}  // namespace
