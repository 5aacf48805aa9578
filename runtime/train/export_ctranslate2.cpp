#include "runtime/train/export_ctranslate2.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <variant>
#include <vector>

#include "frontend/frontend.h"
#include "frontend/sinusoidal_table.h"
#include "runtime/train/spec.h"

namespace tgc::train {
namespace {

namespace fs = std::filesystem;
static_assert(std::endian::native == std::endian::little, "model.bin is little-endian");

// CTranslate2's DataType ids (include/ctranslate2/types.h) and its Activation enum.
enum class CtType : uint8_t { float32 = 0, int8 = 1, int16 = 2 };
enum class CtActivation : int8_t { relu = 0, swish = 2, gelu = 3 };

struct Variable {
  std::vector<int64_t> dims;
  CtType type = CtType::float32;
  std::string bytes;
};

class Writer {
 public:
  explicit Writer(std::map<std::string, Tensor> params) : params_(std::move(params)) {}

  // The f32 parameter `name`, checked to be [rows, cols] (cols 0: a vector of `rows`).
  const Tensor& param(const std::string& name, int64_t rows, int64_t cols = 0) {
    auto it = params_.find(name);
    if (it == params_.end())
      throw std::runtime_error(fmt::format(
          "the checkpoint has no parameter {}, which a CTranslate2 Transformer needs", name));
    const std::vector<int64_t> want = cols ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{rows};
    if (it->second.dtype() != DType::f32 || it->second.shape() != want)
      throw std::runtime_error(fmt::format("parameter {} is {}, the Transformer's layout needs f32[{}]",
                                           name, it->second.type().str(), fmt::join(want, ",")));
    used_.insert(name);
    return it->second;
  }
  bool has(const std::string& name) const { return params_.count(name) != 0; }

  void scalar(const std::string& name, int16_t v) { put(name, {}, CtType::int16, &v, sizeof v); }
  void flag(const std::string& name, int8_t v) { put(name, {}, CtType::int8, &v, sizeof v); }
  void floats(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& v) {
    put(name, std::move(dims), CtType::float32, v.data(), v.size() * sizeof(float));
  }
  // A parameter as it is (embeddings [vocab, d], vectors).
  void copy(const std::string& to, const std::string& from, int64_t rows, int64_t cols = 0) {
    const Tensor& t = param(from, rows, cols);
    put(to, t.shape(), CtType::float32, t.data(), t.nbytes());
  }
  // Linear layers: tgc's x @ W with W [in, out] is CTranslate2's [out, in]. Several
  // parameters stack along the output (the fused Q/K/V projection).
  void linear(const std::string& to, const std::vector<std::string>& from, int64_t in, int64_t out,
              bool bias) {
    std::vector<float> w;
    std::vector<float> b;
    for (const std::string& f : from) {
      const float* src = param(f + ".weight", in, out).as<float>();
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) w.push_back(src[i * out + o]);
      if (bias) {
        const float* bs = param(f + ".bias", out).as<float>();
        b.insert(b.end(), bs, bs + out);
      }
    }
    const int64_t rows = out * static_cast<int64_t>(from.size());
    floats(to + "/weight", {rows, in}, w);
    if (bias) floats(to + "/bias", {rows}, b);
  }
  void layerNorm(const std::string& to, const std::string& from, int64_t d) {
    copy(to + "/gamma", from + ".gamma", d);
    copy(to + "/beta", from + ".beta", d);
  }

  // Parameters the export did not write: parts of the model CTranslate2 would not run.
  std::vector<std::string> unused() const {
    std::vector<std::string> out;
    for (const auto& [name, t] : params_)
      if (!used_.count(name)) out.push_back(name);
    return out;
  }

  // model.bin: version, spec name, revision, the variables in name order, no aliases.
  std::string serialize() const {
    std::string s;
    auto u8 = [&](uint8_t v) { s.push_back(static_cast<char>(v)); };
    auto u16 = [&](uint16_t v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); };
    auto u32 = [&](uint64_t v) {
      if (v > UINT32_MAX) throw std::runtime_error("a variable too large for model.bin");
      const uint32_t x = static_cast<uint32_t>(v);
      s.append(reinterpret_cast<const char*>(&x), sizeof x);
    };
    auto str = [&](const std::string& t) {  // length with the NUL, the bytes, NUL
      u16(static_cast<uint16_t>(t.size() + 1));
      s += t;
      u8(0);
    };
    u32(6);
    str("TransformerSpec");
    u32(7);
    u32(vars_.size());
    for (const auto& [name, v] : vars_) {
      str(name);
      u8(static_cast<uint8_t>(v.dims.size()));
      for (int64_t d : v.dims) u32(static_cast<uint64_t>(d));
      u8(static_cast<uint8_t>(v.type));
      u32(v.bytes.size());
      s += v.bytes;
    }
    u32(0);
    return s;
  }
  size_t variables() const { return vars_.size(); }

 private:
  void put(const std::string& name, std::vector<int64_t> dims, CtType type, const void* p, size_t n) {
    vars_[name] = Variable{std::move(dims), type, std::string(static_cast<const char*>(p), n)};
  }
  std::map<std::string, Tensor> params_;
  std::set<std::string> used_;
  std::map<std::string, Variable> vars_;
};

// The resolved config entries the layout depends on.
struct Config {
  int64_t dModel = 0, heads = 0, dFf = 0, nEnc = 0, nDec = 0, maxLen = 0;
  std::string activation;
  bool useBias = true, tieOutput = false;
  double eps = 0;
};

template <class T>
T entry(const CompiledModel& m, const std::string& name) {
  for (const auto& [k, v] : m.config)
    if (k == name) {
      if (const T* x = std::get_if<T>(&v)) return *x;
      throw std::runtime_error(fmt::format("config entry {} is {}, not what the Transformer's has",
                                           name, configValueToString(v)));
    }
  throw std::runtime_error(fmt::format(
      "the model has no config entry {}: not the layout of models/transformer.tg", name));
}

Config readConfig(const ModelSpec& spec) {
  // The train graph holds both stacks: its layer_norm nodes give the epsilon.
  const CompiledModel m = compileModelFile(spec.path, spec.options("train", {{"B", 1}, {"S", 1}, {"T", 1}}));
  Config c;
  c.dModel = entry<int64_t>(m, "d_model");
  c.heads = entry<int64_t>(m, "heads");
  c.dFf = entry<int64_t>(m, "d_ff");
  c.nEnc = entry<int64_t>(m, "n_enc");
  c.nDec = entry<int64_t>(m, "n_dec");
  c.maxLen = entry<int64_t>(m, "max_len");
  c.activation = entry<std::string>(m, "activation");
  c.useBias = entry<bool>(m, "use_bias");
  c.tieOutput = entry<bool>(m, "tie_output");
  if (entry<DType>(m, "dtype") != DType::f32)
    throw std::runtime_error("only f32 models export to CTranslate2");
  std::set<double> eps;
  for (const auto& n : m.graph->nodes())
    if (n->op() == OpKind::LayerNorm) eps.insert(n->attrFloat("eps"));
  if (eps.size() != 1)
    throw std::runtime_error(fmt::format(
        "the model's layer norms have {} epsilons; CTranslate2 takes one", eps.size()));
  c.eps = *eps.begin();
  if (c.heads > INT16_MAX || c.heads < 1 || c.dModel % c.heads != 0)
    throw std::runtime_error(fmt::format("{} heads of d_model {} do not export", c.heads, c.dModel));
  return c;
}

void attention(Writer& w, const std::string& to, const std::string& from, int64_t d, bool bias) {
  w.linear(to + "/linear_0", {from + ".w_q", from + ".w_k", from + ".w_v"}, d, d, bias);
  w.linear(to + "/linear_1", {from + ".w_o"}, d, d, bias);
}

void crossAttention(Writer& w, const std::string& to, const std::string& from, int64_t d, bool bias) {
  w.linear(to + "/linear_0", {from + ".w_q"}, d, d, bias);
  w.linear(to + "/linear_1", {from + ".w_k", from + ".w_v"}, d, d, bias);
  w.linear(to + "/linear_2", {from + ".w_o"}, d, d, bias);
}

// FeedForward: linear1 (activated), linear3 (swiglu's ungated half), linear2; always biased.
void ffn(Writer& w, const std::string& to, const std::string& from, const Config& c) {
  w.linear(to + "/linear_0", {from + ".linear1"}, c.dModel, c.dFf, true);
  if (c.activation == "swiglu") w.linear(to + "/linear_0_noact", {from + ".linear3"}, c.dModel, c.dFf, true);
  w.linear(to + "/linear_1", {from + ".linear2"}, c.dFf, c.dModel, true);
}

CtActivation activation(const std::string& a) {
  if (a == "relu") return CtActivation::relu;
  if (a == "gelu") return CtActivation::gelu;  // nn.tg's gelu is the exact (erf) one
  if (a == "silu" || a == "swiglu") return CtActivation::swish;
  throw std::runtime_error(fmt::format("activation \"{}\" has no CTranslate2 equivalent", a));
}

// The stack attributes CTranslate2 reads (post-LN, scaled embeddings, no ALiBi).
void stackAttributes(Writer& w, const std::string& stack, const Config& c) {
  w.scalar(stack + "/num_heads", static_cast<int16_t>(c.heads));
  w.flag(stack + "/pre_norm", 0);
  w.flag(stack + "/activation", static_cast<int8_t>(activation(c.activation)));
  w.flag(stack + "/scale_embeddings", 1);
  if (stack == "encoder") {
    w.flag("encoder/embeddings_merge", 0);
    w.flag("encoder/multi_query_attention", 0);
  } else {
    w.scalar("decoder/alignment_layer", -1);
    w.scalar("decoder/alignment_heads", 1);
    w.flag("decoder/alibi", 0);
    w.flag("decoder/alibi_use_positive_positions", 0);
    w.flag("decoder/scale_alibi", 0);
    w.flag("decoder/start_from_zero_embedding", 0);
  }
}

std::string tokensJson(const data::Vocab& v) {
  nlohmann::json j = nlohmann::json::array();
  for (int64_t i = 0; i < v.size(); ++i) j.push_back(v.token(i));
  return j.dump(1) + "\n";
}

void writeText(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.flush();
  if (!f) throw std::runtime_error(fmt::format("cannot write {}", path.string()));
}

}  // namespace

CTranslate2Export exportCTranslate2(const Checkpoint& ck, const std::string& out,
                                    const std::string& modelPath, bool force) {
  if (ck.srcVocab.size() <= data::Vocab::kNumSpecial || ck.tgtVocab.size() <= data::Vocab::kNumSpecial)
    throw std::runtime_error("not a translation checkpoint: it has no source and target vocabularies");
  const fs::path dst(out);
  if (fs::exists(dst) && !(fs::is_directory(dst) && fs::is_empty(dst)) && !force)
    throw std::runtime_error(fmt::format("{} exists and is not empty (--force replaces it)", out));

  ModelSpec spec = ModelSpec::fromJson(ck.model);
  if (!modelPath.empty()) spec.path = fs::absolute(modelPath).string();
  const Config c = readConfig(spec);
  const int64_t d = c.dModel, Vs = ck.srcVocab.size(), Vt = ck.tgtVocab.size();

  Writer w(ck.parameters());
  stackAttributes(w, "encoder", c);
  stackAttributes(w, "decoder", c);
  std::vector<float> table;
  for (double x : sinusoidalTable(c.maxLen, d)) table.push_back(static_cast<float>(x));
  w.floats("encoder/position_encodings/encodings", {c.maxLen, d}, table);
  w.floats("decoder/position_encodings/encodings", {c.maxLen, d}, table);
  w.copy("encoder/embeddings_0/weight", "src_embed.weight", Vs, d);
  w.copy("decoder/embeddings/weight", "tgt_embed.weight", Vt, d);
  for (int64_t i = 0; i < c.nEnc; ++i) {
    const std::string to = fmt::format("encoder/layer_{}", i), from = fmt::format("encoder.layers.{}", i);
    attention(w, to + "/self_attention", from + ".self_attn", d, c.useBias);
    w.layerNorm(to + "/self_attention/layer_norm", from + ".norm1", d);
    ffn(w, to + "/ffn", from + ".ffn", c);
    w.layerNorm(to + "/ffn/layer_norm", from + ".norm2", d);
  }
  for (int64_t i = 0; i < c.nDec; ++i) {
    const std::string to = fmt::format("decoder/layer_{}", i), from = fmt::format("decoder.layers.{}", i);
    attention(w, to + "/self_attention", from + ".self_attn", d, c.useBias);
    w.layerNorm(to + "/self_attention/layer_norm", from + ".norm1", d);
    crossAttention(w, to + "/attention", from + ".cross_attn", d, c.useBias);
    w.layerNorm(to + "/attention/layer_norm", from + ".norm2", d);
    ffn(w, to + "/ffn", from + ".ffn", c);
    w.layerNorm(to + "/ffn/layer_norm", from + ".norm3", d);
  }
  if (c.tieOutput)
    w.copy("decoder/projection/weight", "tgt_embed.weight", Vt, d);
  else
    w.linear("decoder/projection", {"generator.proj"}, d, Vt, true);
  if (const auto rest = w.unused(); !rest.empty())
    throw std::runtime_error(fmt::format(
        "the checkpoint has parameters outside the Transformer's layout, which CTranslate2 "
        "would not run: {}", fmt::join(rest, ", ")));

  // Everything goes into a sibling directory first, renamed into place when complete.
  const fs::path parent = dst.has_parent_path() ? dst.parent_path() : fs::path(".");
  const fs::path tmp = parent / fmt::format(".{}.tmp-{}", dst.filename().string(), ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    const std::string bin = w.serialize();
    writeText(tmp / "model.bin", bin);
    nlohmann::json config = {
        {"add_source_bos", false}, {"add_source_eos", false},
        {"bos_token", ck.tgtVocab.token(data::Vocab::kBos)},
        {"decoder_start_token", ck.tgtVocab.token(data::Vocab::kBos)},
        {"eos_token", ck.tgtVocab.token(data::Vocab::kEos)},
        {"unk_token", ck.tgtVocab.token(data::Vocab::kUnk)},
        {"layer_norm_epsilon", c.eps}, {"multi_query_attention", false}};
    writeText(tmp / "config.json", config.dump(2) + "\n");
    writeText(tmp / "source_vocabulary.json", tokensJson(ck.srcVocab));
    writeText(tmp / "target_vocabulary.json", tokensJson(ck.tgtVocab));
    writeText(tmp / "tgc_source_vocab.json", ck.srcVocab.toJson());
    writeText(tmp / "tgc_target_vocab.json", ck.tgtVocab.toJson());
    if (fs::exists(dst)) fs::remove_all(dst);
    fs::rename(tmp, dst);
    CTranslate2Export r;
    r.variables = static_cast<int64_t>(w.variables());
    r.bytes = static_cast<int64_t>(bin.size());
    r.srcVocab = Vs;
    r.tgtVocab = Vt;
    r.encoderLayers = static_cast<int>(c.nEnc);
    r.decoderLayers = static_cast<int>(c.nDec);
    r.heads = static_cast<int>(c.heads);
    return r;
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
}

}  // namespace tgc::train
