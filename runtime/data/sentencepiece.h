// SentencePiece subwords (Debian's libsentencepiece) behind a small interface, so that only
// sentencepiece.cpp sees the library and tgc still builds without it (then available() is
// false and the functions throw DataError saying so). Used by Vocab.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tgc::data::spm {

struct Model;  // a loaded model; immutable, shared between copies of a Vocab

bool available();

// A unigram model of at most vocabSize pieces trained on the sentences (already normalized),
// with ids 0..3 = <pad> <bos> <eos> <unk> like every tgc vocabulary, and byte fallback (256
// byte pieces), so a character never seen in training still encodes and decodes exactly.
// Single-threaded and unshuffled, so the same sentences give the same model.
std::shared_ptr<const Model> train(const std::vector<std::string>& sentences, int64_t vocabSize);
// From serialized bytes; throws DataError with the library's reason.
std::shared_ptr<const Model> load(std::string_view serialized, std::string_view source);

const std::string& serialized(const Model& m);
std::vector<std::string> pieces(const Model& m);  // in id order
std::vector<std::string> encode(const Model& m, std::string_view text);
std::string decode(const Model& m, const std::vector<std::string>& pieces);

}  // namespace tgc::data::spm
