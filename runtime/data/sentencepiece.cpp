#include "runtime/data/sentencepiece.h"

#include <fmt/format.h>

#include "runtime/data/error.h"

#ifdef TGC_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

// Exported by libsentencepiece 0.1.97 but not declared in its installed headers (later
// versions declare it in sentencepiece_processor.h).
namespace sentencepiece::logging {
void SetMinLogLevel(int v);
}
#endif

namespace tgc::data::spm {

#ifdef TGC_HAVE_SENTENCEPIECE

struct Model {
  sentencepiece::SentencePieceProcessor processor;
  std::string bytes;
};

namespace {

class Sentences : public sentencepiece::SentenceIterator {
 public:
  explicit Sentences(const std::vector<std::string>& s) : s_(s) {}
  bool done() const override { return i_ >= s_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return s_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& s_;
  size_t i_ = 0;
};

}  // namespace

bool available() { return true; }

std::shared_ptr<const Model> train(const std::vector<std::string>& sentences, int64_t vocabSize) {
  // Quiet: the trainer logs its command line and progress at INFO level otherwise.
  sentencepiece::logging::SetMinLogLevel(2);
  // identity normalization: tgc's normalizeText already ran, and decoding must give it back.
  const std::string args = fmt::format(
      "--model_type=unigram --vocab_size={} --hard_vocab_limit=false --character_coverage=1.0 "
      "--byte_fallback=true "
      "--normalization_rule_name=identity --pad_id=0 --bos_id=1 --eos_id=2 --unk_id=3 "
      "--pad_piece=<pad> --bos_piece=<bos> --eos_piece=<eos> --unk_piece=<unk> "
      "--num_threads=1 --shuffle_input_sentence=false --input_sentence_size=0",
      vocabSize);
  Sentences it(sentences);
  std::string bytes;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &bytes);
  if (!status.ok())
    throw DataError(fmt::format("error: training the SentencePiece model failed: {}",
                                status.ToString()));
  return load(bytes, "<trained>");
}

std::shared_ptr<const Model> load(std::string_view serialized, std::string_view source) {
  auto m = std::make_shared<Model>();
  m->bytes = std::string(serialized);
  const auto status = m->processor.LoadFromSerializedProto(m->bytes);
  if (!status.ok())
    throw DataError(fmt::format("{}: error: invalid vocabulary: the SentencePiece model does "
                                "not load: {}",
                                source, status.ToString()));
  return m;
}

const std::string& serialized(const Model& m) { return m.bytes; }

std::vector<std::string> pieces(const Model& m) {
  std::vector<std::string> out;
  for (int i = 0; i < m.processor.GetPieceSize(); ++i) out.push_back(m.processor.IdToPiece(i));
  return out;
}

std::vector<std::string> encode(const Model& m, std::string_view text) {
  std::vector<std::string> out;
  const auto status = m.processor.Encode(text, &out);
  if (!status.ok())
    throw DataError(fmt::format("error: SentencePiece encoding failed: {}", status.ToString()));
  return out;
}

std::string decode(const Model& m, const std::vector<std::string>& pieces) {
  std::string out;
  const auto status = m.processor.Decode(pieces, &out);
  if (!status.ok())
    throw DataError(fmt::format("error: SentencePiece decoding failed: {}", status.ToString()));
  return out;
}

#else  // built without libsentencepiece

struct Model {
  std::string bytes;
};

namespace {
[[noreturn]] void missing() {
  throw DataError(
      "error: this tgc was built without SentencePiece (install libsentencepiece-dev and "
      "rebuild), so it cannot train or read a SentencePiece vocabulary");
}
}  // namespace

bool available() { return false; }
std::shared_ptr<const Model> train(const std::vector<std::string>&, int64_t) { missing(); }
std::shared_ptr<const Model> load(std::string_view, std::string_view) { missing(); }
const std::string& serialized(const Model& m) { return m.bytes; }
std::vector<std::string> pieces(const Model&) { missing(); }
std::vector<std::string> encode(const Model&, std::string_view) { missing(); }
std::string decode(const Model&, const std::vector<std::string>&) { missing(); }

#endif

}  // namespace tgc::data::spm
