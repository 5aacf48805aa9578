#include "runtime/data/vocab.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "runtime/data/error.h"
#include "runtime/data/text.h"

namespace tgc::data {

namespace {

using json = nlohmann::json;

constexpr const char* kSpecials[Vocab::kNumSpecial] = {"<pad>", "<bos>", "<eos>", "<unk>"};
constexpr int kFormatVersion = 1;

const char* kindName(TokenizerKind k) {
  switch (k) {
    case TokenizerKind::chars: return "chars";
    case TokenizerKind::words: return "words";
  }
  return "?";
}

[[noreturn]] void invalid(std::string_view source, std::string_view why) {
  throw DataError(fmt::format("{}: error: invalid vocabulary: {}", source, why));
}

}  // namespace

Vocab::Vocab(TokenizerKind kind, bool lowercase) : kind_(kind), lowercase_(lowercase) {
  for (const char* s : kSpecials) add(s);
}

void Vocab::add(std::string token) {
  ids_.emplace(token, size());
  tokens_.push_back(std::move(token));
}

Vocab Vocab::build(TokenizerKind kind, bool lowercase,
                   const std::vector<std::vector<std::string>>& sentences, int64_t minCount,
                   int64_t maxSize) {
  std::map<std::string, int64_t> counts;
  for (const auto& s : sentences)
    for (const auto& t : s) ++counts[t];
  Vocab v(kind, lowercase);
  std::vector<std::pair<std::string, int64_t>> sorted;
  for (auto& [t, n] : counts)
    if (n >= minCount && !v.ids_.count(t)) sorted.emplace_back(t, n);
  // Most frequent first; std::map gave byte order, stable_sort keeps it among ties.
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  for (auto& [t, n] : sorted) {
    if (maxSize > 0 && v.size() >= maxSize) break;
    v.add(t);
  }
  return v;
}

const std::string& Vocab::token(int64_t id) const {
  if (id < 0 || id >= size())
    throw std::out_of_range(fmt::format("token id {} outside the vocabulary of {}", id, size()));
  return tokens_[static_cast<size_t>(id)];
}

int64_t Vocab::id(std::string_view token) const {
  auto it = ids_.find(std::string(token));
  return it == ids_.end() ? kUnk : it->second;
}

std::vector<std::string> Vocab::tokenize(std::string_view text) const {
  std::string s = normalizeText(text);
  if (lowercase_) s = asciiLower(s);
  switch (kind_) {
    case TokenizerKind::chars: return tokenizeChars(s);
    case TokenizerKind::words: return tokenizeWords(s);
  }
  return {};
}

std::vector<int64_t> Vocab::encode(const std::vector<std::string>& tokens) const {
  std::vector<int64_t> out;
  out.reserve(tokens.size());
  for (const auto& t : tokens) out.push_back(id(t));
  return out;
}

std::vector<std::string> Vocab::decodeTokens(std::span<const int64_t> ids) const {
  std::vector<std::string> out;
  for (int64_t i : ids) {
    if (i == kEos) break;
    if (i == kPad || i == kBos) continue;
    out.push_back(token(i));
  }
  return out;
}

std::string Vocab::decode(std::span<const int64_t> ids) const {
  const auto tokens = decodeTokens(ids);
  switch (kind_) {
    case TokenizerKind::chars: return detokenizeChars(tokens);
    case TokenizerKind::words: return detokenizeWords(tokens);
  }
  return {};
}

std::string Vocab::toJson() const {
  json j = {{"format", "tgc-vocab"},
            {"version", kFormatVersion},
            {"tokenizer", kindName(kind_)},
            {"lowercase", lowercase_},
            {"tokens", tokens_}};
  return j.dump(1) + "\n";
}

Vocab Vocab::fromJson(std::string_view text, std::string_view source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    invalid(source, fmt::format("not JSON ({})", e.what()));
  }
  if (!j.is_object()) invalid(source, "not a JSON object");
  auto field = [&](const char* name) -> const json& {
    auto it = j.find(name);
    if (it == j.end()) invalid(source, fmt::format("missing \"{}\"", name));
    return *it;
  };
  const json& format = field("format");
  if (!format.is_string() || format.get<std::string>() != "tgc-vocab")
    invalid(source, "\"format\" is not \"tgc-vocab\"");
  const json& version = field("version");
  if (!version.is_number_integer() || version.get<int64_t>() != kFormatVersion)
    invalid(source, fmt::format("unsupported \"version\" {} (this tgc reads {})", version.dump(),
                                kFormatVersion));
  const json& kind = field("tokenizer");
  TokenizerKind k;
  if (kind == "chars")
    k = TokenizerKind::chars;
  else if (kind == "words")
    k = TokenizerKind::words;
  else
    invalid(source, fmt::format("unknown \"tokenizer\" {} (chars or words)", kind.dump()));
  const json& lower = field("lowercase");
  if (!lower.is_boolean()) invalid(source, "\"lowercase\" is not true or false");
  const json& tokens = field("tokens");
  if (!tokens.is_array()) invalid(source, "\"tokens\" is not an array");
  if (tokens.size() < Vocab::kNumSpecial)
    invalid(source, fmt::format("{} tokens, fewer than the {} special ones", tokens.size(),
                                Vocab::kNumSpecial));

  Vocab v(k, lower.get<bool>());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const json& t = tokens[i];
    if (!t.is_string()) invalid(source, fmt::format("token {} is not a string", i));
    const std::string& s = t.get_ref<const std::string&>();
    if (i < Vocab::kNumSpecial) {
      if (s != kSpecials[i])
        invalid(source, fmt::format("token {} is \"{}\", expected \"{}\"", i, s, kSpecials[i]));
      continue;
    }
    if (s.empty()) invalid(source, fmt::format("token {} is empty", i));
    if (v.ids_.count(s))
      invalid(source, fmt::format("token {} (\"{}\") repeats id {}", i, s, v.ids_.at(s)));
    v.add(s);
  }
  return v;
}

void Vocab::save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << toJson();
  out.flush();
  if (!out) throw DataError(fmt::format("{}: error: cannot write the vocabulary", path));
}

Vocab Vocab::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(fmt::format("{}: error: cannot open the vocabulary", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return fromJson(ss.str(), path);
}

}  // namespace tgc::data
