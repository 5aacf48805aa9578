#include "runtime/data/vocab.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "runtime/data/error.h"
#include "runtime/data/sentencepiece.h"
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
    case TokenizerKind::sentencepiece: return "sentencepiece";
  }
  return "?";
}

constexpr std::string_view kBase64 =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 2]);
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kBase64[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kBase64[v & 63] : '=';
  }
  return out;
}

// Strict: whole groups of four, padding only at the end.
std::optional<std::string> base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      const size_t d = kBase64.find(c);
      if (d == std::string_view::npos || pad > 0) return std::nullopt;
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out += static_cast<char>((v >> 16) & 0xFF);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xFF);
    if (pad < 1) out += static_cast<char>(v & 0xFF);
  }
  return out;
}

[[noreturn]] void invalid(std::string_view source, std::string_view why) {
  throw DataError(fmt::format("{}: error: invalid vocabulary: {}", source, why));
}

}  // namespace

Vocab::Vocab(TokenizerKind kind, bool lowercase) : kind_(kind), lowercase_(lowercase) {
  if (kind == TokenizerKind::sentencepiece)
    throw std::invalid_argument("a SentencePiece vocabulary comes from trainSentencePiece");
  for (const char* s : kSpecials) add(s);
}

bool Vocab::sentencePieceAvailable() { return spm::available(); }

Vocab Vocab::trainSentencePiece(const std::vector<std::string>& texts, bool lowercase,
                                int64_t vocabSize) {
  if (vocabSize <= kNumSpecial)
    throw std::invalid_argument("a SentencePiece vocabulary needs more than the 4 specials");
  Vocab v(TokenizerKind::words, lowercase);
  std::vector<std::string> sentences;
  sentences.reserve(texts.size());
  for (const auto& t : texts) sentences.push_back(v.normalized(t));
  v.kind_ = TokenizerKind::sentencepiece;
  v.spm_ = spm::train(sentences, vocabSize);
  v.tokens_.clear();
  v.ids_.clear();
  for (auto& p : spm::pieces(*v.spm_)) v.add(std::move(p));
  return v;
}

std::string Vocab::normalized(std::string_view text) const {
  std::string s = normalizeText(text);
  return lowercase_ ? asciiLower(s) : s;
}

std::string Vocab::modelBytes() const { return spm_ ? spm::serialized(*spm_) : std::string(); }

void Vocab::add(std::string token) {
  ids_.emplace(token, size());
  tokens_.push_back(std::move(token));
}

Vocab Vocab::build(TokenizerKind kind, bool lowercase, const TokenCounts& counts,
                   int64_t minCount, int64_t maxSize) {
  if (kind == TokenizerKind::sentencepiece)
    throw std::invalid_argument("a SentencePiece vocabulary comes from trainSentencePiece");
  Vocab v(kind, lowercase);
  std::vector<std::pair<std::string_view, int64_t>> sorted;
  for (const auto& [t, n] : counts.counts())
    if (n >= minCount && !v.ids_.count(t)) sorted.emplace_back(t, n);
  // Most frequent first, ties in byte order: the same vocabulary from the same counts.
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  for (const auto& [t, n] : sorted) {
    if (maxSize > 0 && v.size() >= maxSize) break;
    v.add(std::string(t));
  }
  return v;
}

Vocab Vocab::build(TokenizerKind kind, bool lowercase,
                   const std::vector<std::vector<std::string>>& sentences, int64_t minCount,
                   int64_t maxSize) {
  TokenCounts counts;
  for (const auto& s : sentences) counts.add(s);
  return build(kind, lowercase, counts, minCount, maxSize);
}

std::string Vocab::summary() const {
  const char* kind = kind_ == TokenizerKind::chars   ? "characters"
                     : kind_ == TokenizerKind::words ? "words"
                                                     : "SentencePiece pieces";
  return fmt::format("vocabulary {} {}{}", size(), kind, lowercase_ ? " (lowercased)" : "");
}

const std::string& Vocab::token(int64_t id) const {
  if (id < 0 || id >= size())
    throw std::out_of_range(fmt::format("token id {} outside the vocabulary of {}", id, size()));
  return tokens_[static_cast<size_t>(id)];
}

int64_t Vocab::id(std::string_view token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? kUnk : it->second;
}

std::vector<std::string> Vocab::tokenize(std::string_view text) const {
  const std::string s = normalized(text);
  switch (kind_) {
    case TokenizerKind::chars: return tokenizeChars(s);
    case TokenizerKind::words: return tokenizeWords(s);
    case TokenizerKind::sentencepiece: return spm::encode(*spm_, s);
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
    case TokenizerKind::sentencepiece: return spm::decode(*spm_, tokens);
  }
  return {};
}

std::string Vocab::toJson() const {
  json j = {{"format", "tgc-vocab"},
            {"version", kFormatVersion},
            {"tokenizer", kindName(kind_)},
            {"lowercase", lowercase_},
            {"tokens", tokens_}};
  if (spm_) j["model"] = base64Encode(spm::serialized(*spm_));
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
  else if (kind == "sentencepiece")
    k = TokenizerKind::sentencepiece;
  else
    invalid(source,
            fmt::format("unknown \"tokenizer\" {} (chars, words or sentencepiece)", kind.dump()));
  const json& lower = field("lowercase");
  if (!lower.is_boolean()) invalid(source, "\"lowercase\" is not true or false");
  const json& tokens = field("tokens");
  if (!tokens.is_array()) invalid(source, "\"tokens\" is not an array");
  if (tokens.size() < Vocab::kNumSpecial)
    invalid(source, fmt::format("{} tokens, fewer than the {} special ones", tokens.size(),
                                Vocab::kNumSpecial));

  Vocab v(TokenizerKind::words, lower.get<bool>());
  v.kind_ = k;
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
  if (k == TokenizerKind::sentencepiece) {
    const json& model = field("model");
    if (!model.is_string()) invalid(source, "\"model\" is not a string");
    const auto bytes = base64Decode(model.get_ref<const std::string&>());
    if (!bytes) invalid(source, "\"model\" is not base64");
    v.spm_ = spm::load(*bytes, source);
    if (spm::pieces(*v.spm_) != v.tokens_)
      invalid(source, "\"tokens\" differ from the SentencePiece model's pieces");
  } else if (j.contains("model")) {
    invalid(source, fmt::format("a \"model\" in a {} vocabulary", kindName(k)));
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
