#include "runtime/train/spec.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "runtime/data/corpus.h"

namespace tgc::train {

using nlohmann::json;

ModelOptions ModelSpec::options(const std::string& graph,
                                const std::vector<std::pair<std::string, int64_t>>& dims,
                                const std::vector<std::pair<std::string, std::string>>& extra) const {
  ModelOptions o;
  o.graph = graph;
  o.preset = preset;
  o.sets = sets;
  o.sets.insert(o.sets.end(), extra.begin(), extra.end());
  o.dims = dims;
  o.lib_paths = libPaths;
  return o;
}

std::string ModelSpec::toJson() const {
  json j;
  j["path"] = path;
  j["preset"] = preset;
  j["sets"] = json::array();
  for (const auto& [k, v] : sets) j["sets"].push_back({k, v});
  j["lib_paths"] = libPaths;
  return j.dump();
}

ModelSpec ModelSpec::fromJson(std::string_view text) {
  try {
    json j = json::parse(text);
    ModelSpec s;
    s.path = j.at("path").get<std::string>();
    s.preset = j.at("preset").get<std::string>();
    for (const auto& kv : j.at("sets"))
      s.sets.emplace_back(kv.at(0).get<std::string>(), kv.at(1).get<std::string>());
    s.libPaths = j.at("lib_paths").get<std::vector<std::string>>();
    return s;
  } catch (const json::exception& e) {
    throw std::runtime_error(fmt::format("invalid model description: {}", e.what()));
  }
}

std::string DataSpec::toJson() const {
  json j;
  j["kind"] = kind;
  j["path"] = path;
  j["path2"] = path2;
  j["source"] = source;
  j["english"] = english;
  j["sentencepiece_vocab"] = sentencePieceVocab;
  j["max_tokens"] = maxTokens;
  j["valid_fraction"] = validFraction;
  j["train_size"] = trainSize;
  j["seed"] = seed;
  j["tokens"] = tokens;
  j["lowercase"] = lowercase;
  j["packing"] = packing;
  j["block_length"] = blockLength;
  j["label_column"] = labelColumn;
  return j.dump();
}

DataSpec DataSpec::fromJson(std::string_view text) {
  try {
    json j = json::parse(text);
    DataSpec s;
    s.kind = j.at("kind").get<std::string>();
    s.path = j.at("path").get<std::string>();
    s.path2 = j.at("path2").get<std::string>();
    s.source = j.at("source").get<std::string>();
    s.english = j.at("english").get<std::string>();
    s.sentencePieceVocab = j.at("sentencepiece_vocab").get<int64_t>();
    s.maxTokens = j.at("max_tokens").get<int64_t>();
    s.validFraction = j.at("valid_fraction").get<double>();
    s.trainSize = j.at("train_size").get<int64_t>();
    s.seed = j.at("seed").get<uint64_t>();
    // Runs from before the other tasks have none of these (translation ignores them).
    s.tokens = j.value("tokens", std::string());
    s.lowercase = j.value("lowercase", -1);
    s.packing = j.value("packing", std::string("lines"));
    s.blockLength = j.value("block_length", int64_t{64});
    s.labelColumn = j.value("label_column", std::string("first"));
    return s;
  } catch (const json::exception& e) {
    throw std::runtime_error(fmt::format("invalid data description: {}", e.what()));
  }
}

std::string DataSpec::describe(const std::string& task) const {
  if (kind == "numerals") return "built-in numerals task (Chinese numerals → English words)";
  if (kind == "builtin")
    return task == "lm" ? "built-in text (language modelling)"
                        : fmt::format("built-in {} data", task);
  const std::string name = std::filesystem::path(path).filename().string();
  if (task == "lm") return fmt::format("text {} (language modelling, {})", name, packing);
  if (task == "classification") return fmt::format("labelled text {} (classification)", name);
  if (task == "tensors") return fmt::format("tensors {}", name);
  return fmt::format("corpus {} ({}→{})", name, source, source == "zh" ? "en" : "zh");
}

data::TranslationData loadData(const DataSpec& s) {
  if (s.kind == "numerals") {
    data::NumeralsOptions o;
    o.seed = s.seed;
    o.trainSize = s.trainSize;
    return data::numeralsData(o);
  }
  if (s.kind != "tsv" && s.kind != "aligned")
    throw std::runtime_error(fmt::format("unknown data kind '{}' (numerals, tsv, aligned)", s.kind));
  if (s.source != "zh" && s.source != "en")
    throw std::runtime_error(fmt::format("source language must be zh or en, not '{}'", s.source));
  data::CorpusOptions o;
  o.source = s.source == "zh" ? data::Language::zh : data::Language::en;
  if (s.english == "sentencepiece")
    o.englishTokenizer = data::TokenizerKind::sentencepiece;
  else if (s.english == "words")
    o.englishTokenizer = data::TokenizerKind::words;
  else
    throw std::runtime_error(
        fmt::format("English tokens must be words or sentencepiece, not '{}'", s.english));
  o.sentencePieceVocab = s.sentencePieceVocab;
  o.maxSourceTokens = s.maxTokens;
  o.maxTargetTokens = s.maxTokens;
  o.validFraction = s.validFraction;
  o.seed = s.seed;
  const auto pairs = s.kind == "tsv" ? data::readTsvCorpus(s.path)
                                     : data::readAlignedCorpus(s.path, s.path2);
  return data::corpusData(pairs, o);
}

const std::vector<data::TokenizedPair>& evalSplit(const data::TranslationData& d) {
  return d.test.empty() ? d.valid : d.test;
}

}  // namespace tgc::train
