#include "runtime/train/data_export.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace tgc::train {

namespace {

using nlohmann::json;

json idRows(const std::vector<data::EncodedPair>& pairs, bool source) {
  json rows = json::array();
  for (const auto& p : pairs) rows.push_back(source ? p.src : p.tgt);
  return rows;
}

// Every epoch's batch plans, [bucket, [example...]] each: the order training consumes them.
template <class Batcher>
json epochPlans(const Batcher& train, const DataExportInfo& info) {
  json epochs = json::array();
  for (int64_t e = 0; e < info.epochs; ++e) {
    json plans = json::array();
    for (const auto& p : train.planEpoch(info.seed, static_cast<uint64_t>(e)))
      plans.push_back({p.bucket, p.examples});
    epochs.push_back(std::move(plans));
  }
  return epochs;
}

}  // namespace

std::string dataExportJson(const data::TranslationData& d, const data::Batcher& train,
                           const DataExportInfo& info) {
  json j;
  j["format"] = "tgc-data-export";
  j["version"] = 1;
  j["data"] = json::parse(info.spec.toJson());
  j["seed"] = info.seed;
  j["batch_size"] = info.batchSize;
  json buckets = json::array();
  for (const auto& b : train.buckets()) buckets.push_back({b.srcLen, b.tgtLen});
  j["buckets"] = buckets;
  j["length_cap"] = info.lengthCap;
  j["src_vocab"] = json::parse(d.srcVocab.toJson());
  j["tgt_vocab"] = json::parse(d.tgtVocab.toJson());
  j["train"] = {{"src", idRows(train.data(), true)}, {"tgt", idRows(train.data(), false)}};
  j["epochs"] = epochPlans(train, info);
  const auto valid = data::encodeSplit(d, d.valid);
  json srcText = json::array(), tgtText = json::array();
  for (const auto& p : d.valid) {
    srcText.push_back(p.srcText);
    tgtText.push_back(p.tgtText);
  }
  j["valid"] = {{"src", idRows(valid, true)}, {"tgt", idRows(valid, false)},
                {"src_text", srcText}, {"tgt_text", tgtText}};
  return j.dump();
}

std::string lmDataExportJson(const data::LmData& d, const data::LmBatcher& train,
                             const DataExportInfo& info) {
  json j;
  j["format"] = "tgc-data-export";
  j["version"] = 1;
  j["task"] = "lm";
  j["data"] = json::parse(info.spec.toJson());
  j["seed"] = info.seed;
  j["batch_size"] = info.batchSize;
  json buckets = json::array();
  for (const auto& b : train.buckets()) buckets.push_back(b.at("length"));
  j["buckets"] = buckets;
  j["vocab"] = json::parse(d.vocab.toJson());
  j["pad"] = data::Vocab::kPad;
  j["bos"] = data::Vocab::kBos;
  j["eos"] = data::Vocab::kEos;
  j["train"] = train.data();
  j["epochs"] = epochPlans(train, info);
  j["valid"] = d.valid;
  return j.dump();
}

void writeDataExport(const std::string& path, const data::TranslationData& d,
                     const data::Batcher& train, const DataExportInfo& info) {
  writeExportFile(path, dataExportJson(d, train, info));
}

void writeExportFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw std::runtime_error("cannot write " + tmp);
    f << text;
    if (!f.flush()) throw std::runtime_error("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace tgc::train
