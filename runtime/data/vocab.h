// Vocabularies: how a language's text becomes token ids and back.
//
// A vocabulary carries its tokenizer (characters, words, or a SentencePiece model trained on
// the corpus; optional ASCII lowercasing), so a checkpoint's vocabularies alone turn new
// input into ids exactly as in training. Ids 0..3 are the special tokens: pad = 0 (the
// model's padding index), bos, eos, unk. Saved as JSON:
//   {"format": "tgc-vocab", "version": 1, "tokenizer": "words", "lowercase": true,
//    "tokens": ["<pad>", "<bos>", "<eos>", "<unk>", "the", ...]}
// with, for "sentencepiece", "model": the serialized model in base64 (its pieces are the
// tokens).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tgc::data {

enum class TokenizerKind { chars, words, sentencepiece };

namespace spm {
struct Model;
}

// Token frequencies, gathered sentence by sentence (no copies of the data).
class TokenCounts {
 public:
  void add(const std::vector<std::string>& sentence) {
    for (const auto& t : sentence) ++counts_[t];
  }
  // n more of one token (n = 0 adds nothing).
  void add(const std::string& token, int64_t n) {
    if (n > 0) counts_[token] += n;
  }
  const std::unordered_map<std::string, int64_t>& counts() const { return counts_; }

 private:
  std::unordered_map<std::string, int64_t> counts_;
};

class Vocab {
 public:
  static constexpr int64_t kPad = 0, kBos = 1, kEos = 2, kUnk = 3;
  static constexpr int64_t kNumSpecial = 4;

  // The special tokens only (chars or words; a SentencePiece vocabulary comes from
  // trainSentencePiece).
  explicit Vocab(TokenizerKind kind = TokenizerKind::words, bool lowercase = false);

  // From tokenized training text: tokens seen at least minCount times, most frequent first
  // (ties in byte order), at most maxSize ids in all (0: no limit).
  static Vocab build(TokenizerKind kind, bool lowercase, const TokenCounts& counts,
                     int64_t minCount = 1, int64_t maxSize = 0);
  static Vocab build(TokenizerKind kind, bool lowercase,
                     const std::vector<std::vector<std::string>>& sentences, int64_t minCount = 1,
                     int64_t maxSize = 0);

  // A SentencePiece model of at most vocabSize pieces trained on the text (normalized and
  // lowercased first, as tokenize does). Throws DataError when tgc was built without
  // SentencePiece (sentencePieceAvailable()).
  static Vocab trainSentencePiece(const std::vector<std::string>& texts, bool lowercase,
                                  int64_t vocabSize);
  static bool sentencePieceAvailable();

  TokenizerKind kind() const { return kind_; }
  bool lowercase() const { return lowercase_; }
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  // For the data summaries: "vocabulary 58 characters (lowercased)" (or words, SentencePiece
  // pieces; the case only when lowercased).
  std::string summary() const;
  const std::string& token(int64_t id) const;  // throws std::out_of_range
  int64_t id(std::string_view token) const;    // kUnk when unknown

  // Raw text → normalized, lowercased if asked, tokenized (no ids yet).
  std::vector<std::string> tokenize(std::string_view text) const;
  std::vector<int64_t> encode(const std::vector<std::string>& tokens) const;
  std::vector<int64_t> encodeText(std::string_view text) const { return encode(tokenize(text)); }
  // Ids → tokens, stopping at the first eos and skipping pad and bos.
  std::vector<std::string> decodeTokens(std::span<const int64_t> ids) const;
  // Ids → text (characters concatenated; words detokenized).
  std::string decode(std::span<const int64_t> ids) const;

  std::string toJson() const;
  // Refuses anything that is not a well-formed vocabulary, saying why:
  // "<source>: error: invalid vocabulary: <reason>" (a DataError).
  static Vocab fromJson(std::string_view text, std::string_view source = "<memory>");
  void save(const std::string& path) const;
  static Vocab load(const std::string& path);

  friend bool operator==(const Vocab& a, const Vocab& b) {
    return a.kind_ == b.kind_ && a.lowercase_ == b.lowercase_ && a.tokens_ == b.tokens_ &&
           a.modelBytes() == b.modelBytes();
  }

 private:
  void add(std::string token);
  std::string normalized(std::string_view text) const;
  std::string modelBytes() const;  // empty without a SentencePiece model

  TokenizerKind kind_;
  bool lowercase_;
  std::vector<std::string> tokens_;
  // Transparent hashing: id(string_view) looks up without building a std::string.
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int64_t, Hash, std::equal_to<>> ids_;
  std::shared_ptr<const spm::Model> spm_;
};

}  // namespace tgc::data
