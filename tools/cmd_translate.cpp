// `tgc translate`: translates sentences with a trained checkpoint (greedy or beam search).
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "runtime/train/checkpoint.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/translator.h"
#include "tools/commands.h"

namespace tgc::cli {
namespace {

struct TranslateArgs {
  std::string checkpoint, model;
  std::vector<std::string> texts;
  std::string input, output, quantize;
  int beam = 1;
  double lengthPenalty = 0.6;
  int64_t maxLen = 0, batch = 64, maxTokens = 0;
  int threads = 0;
  bool noCache = false, noKvCache = false, scores = false, stats = false, tokens = false;
};

constexpr const char* kFooter = R"(
Input: the TEXT arguments, each one sentence; without them, --input FILE or standard input,
one sentence per line (empty lines give empty translations). The source is tokenized with
the checkpoint's own vocabulary (characters for Chinese; words or SentencePiece subwords for
English); unknown tokens become <unk>.

Output: one translation per input sentence and line, in input order, on standard output or
in --output FILE (written to FILE.tmp and renamed once complete, so a failed run leaves no
partial file). --scores puts the translation's log-probability under the model (its tokens
and eos) and a tab before each line; --tokens writes the target tokens (the vocabulary's strings,
joined by spaces) instead of text. With --input, progress goes to stderr.

Batching: sentences are sorted by length (longest first) and decoded in batches of at most
--batch rows and, with --max-tokens N, at most N source tokens (rows x the batch's longest
source); the translations come back in input order. --stats prints to stderr: sentences,
target tokens, tokens/s (over the whole run, compiling aside), time to the first token,
time per decoder step, and the time in encoding, steps, search and compiling.

Decoding: the encoder and the decoder's cross-attention projections run once per sentence;
each step runs the decoder for one position, reusing the keys and values of the earlier
positions (graphs decode_memory and decode_cached of the model file; --no-kv-cache
recomputes the whole prefix each step with graph decode_at). Greedy by
default; --beam K keeps the K best hypotheses and ranks finished ones by log-probability
divided by ((5 + length) / 6)^A, A = --length-penalty (GNMT's; 0: no normalization).
--max-len defaults to twice the source length plus 10, at most 1.5 times the longest
training target plus 2.

Examples:
  tgc translate --checkpoint runs/numerals 三千零五 一百万零一十
  echo 两千零二十六 | tgc translate --checkpoint runs/numerals --beam 4
  tgc translate --checkpoint runs/numerals/checkpoints/step-00001000.safetensors 九十九

Exit status: 0 on success; 1 with a message on stderr when the checkpoint cannot be read (it
names the reason, and an earlier intact checkpoint if there is one) or the model file does
not compile.
)";

std::string formatDecodeStats(const train::DecodeStats& s) {
  const double run = s.totalSeconds - s.compileSeconds;
  return fmt::format(
      "tgc translate: {} sentences in {} batches, {} target tokens in {:.3f} s ({:.0f} tokens/s; "
      "compiling {:.3f} s more)\n"
      "  time to the first token {:.1f} ms (compiling aside: {:.1f} ms), {} decoder steps of "
      "{:.2f} ms each\n"
      "  encoding {:.3f} s, decoder steps {:.3f} s, search and cache moves {:.3f} s\n",
      s.sentences, s.batches, s.tokens, run, run > 0 ? s.tokens / run : 0.0, s.compileSeconds,
      1000 * s.firstTokenSeconds, 1000 * (s.firstTokenSeconds - s.firstTokenCompileSeconds),
      s.steps, s.steps ? 1000 * s.stepSeconds / static_cast<double>(s.steps) : 0.0,
      s.encodeSeconds, s.stepSeconds, s.searchSeconds);
}

int runTranslate(const TranslateArgs& a) {
  const runtime::ExecOptions exec = commandExecOptions(a.threads, a.noCache);
  train::Checkpoint c = train::loadLatestCheckpoint(a.checkpoint);
  train::ModelSpec m = train::ModelSpec::fromJson(c.model);
  if (!a.model.empty()) m.path = std::filesystem::absolute(a.model).string();
  train::Translator tr(m, c.parameters(), exec);
  tr.setQuantize(a.quantize == "int8");

  std::vector<std::string> texts = a.texts;
  if (!texts.empty() && !a.input.empty())
    throw std::invalid_argument("give sentences as TEXT arguments or in --input, not both");
  if (texts.empty()) {
    std::ifstream file;
    if (!a.input.empty()) {
      file.open(a.input);
      if (!file) throw std::runtime_error(fmt::format("cannot read --input {}", a.input));
    }
    std::istream& in = a.input.empty() ? std::cin : file;
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      texts.push_back(line);
    }
    if (in.bad()) throw std::runtime_error(fmt::format("reading {} failed", a.input.empty() ? "stdin" : a.input));
  }
  train::DecodeOptions o;
  o.beam = a.beam;
  o.lengthPenalty = a.lengthPenalty;
  o.maxLen = a.maxLen;
  o.lengthCap = c.lengthCap();
  o.kvCache = !a.noKvCache;
  o.batchSize = a.batch;
  o.maxTokens = a.maxTokens;
  const bool tty = isatty(STDERR_FILENO);
  auto last = std::chrono::steady_clock::now();
  if (!a.input.empty())
    o.progress = [&](size_t done, size_t total) {
      const auto now = std::chrono::steady_clock::now();
      if (done < total && now - last < std::chrono::milliseconds(tty ? 200 : 5000)) return;
      last = now;
      std::cerr << fmt::format("{}translated {} of {} sentences{}", tty ? "\r" : "", done, total,
                               tty && done < total ? "" : "\n");
    };
  std::vector<double> scores;
  const std::vector<std::string> out =
      train::translateTexts(tr, c.srcVocab, c.tgtVocab, texts, o, a.scores ? &scores : nullptr, a.tokens);

  const std::string tmp = a.output + ".tmp";
  std::ofstream file;
  if (!a.output.empty()) {
    file.open(tmp, std::ios::trunc);
    if (!file) throw std::runtime_error(fmt::format("cannot write {}", tmp));
  }
  std::ostream& dst = a.output.empty() ? std::cout : file;
  for (size_t i = 0; i < out.size(); ++i) {
    if (a.scores) dst << fmt::format("{:.4f}\t", scores[i]);
    dst << out[i] << "\n";
  }
  dst.flush();
  if (!dst) throw std::runtime_error(fmt::format("writing {} failed", a.output.empty() ? "stdout" : tmp));
  if (!a.output.empty()) {
    file.close();
    std::filesystem::rename(tmp, a.output);
  }
  if (a.stats) std::cerr << formatDecodeStats(tr.stats());
  return 0;
}

}  // namespace

// Options shared by translate and eval.
void addDecodeOptions(CLI::App* cmd, std::string& checkpoint, std::string& model, int& beam,
                      double& lengthPenalty, int64_t& maxLen, int64_t& batch, int& threads,
                      bool& noCache, bool& noKvCache, std::string& quantize, bool requireCheckpoint) {
  cmd->add_option("--quantize", quantize,
                  "int8: the graphs' matmuls by weights run in int8 (pass quantize; weights per "
                  "column, activations per row, VPDPBUSD where the host has it)")
      ->check(CLI::IsMember({"int8"}));
  cmd->add_flag("--no-kv-cache", noKvCache,
                "Recompute the whole prefix every step instead of reusing keys and values");
  auto* c = cmd->add_option("-c,--checkpoint", checkpoint,
                            "Run directory (its newest checkpoint) or checkpoint file")
                ->option_text("DIR");
  if (requireCheckpoint) c->required();
  cmd->add_option("--model", model, "Model file, when it moved since training (default: the checkpoint's)")
      ->option_text("FILE");
  cmd->add_option("--beam", beam, "Beam size (1: greedy)")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--length-penalty", lengthPenalty, "Beam: exponent A of the length normalization")
      ->option_text("A")
      ->capture_default_str();
  cmd->add_option("--max-len", maxLen, "Tokens generated at most (0: 2 x source length + 10)")
      ->option_text("N")
      ->capture_default_str();
  cmd->add_option("--batch", batch, "Rows decoded together")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--threads", threads, "Threads (default: $TGC_NUM_THREADS, else every core)")
      ->option_text("N");
  cmd->add_flag("--no-cache", noCache, "Compile every kernel, bypassing the kernel cache");
}

void registerTranslate(CLI::App& app) {
  auto a = std::make_shared<TranslateArgs>();
  CLI::App* cmd = app.add_subcommand("translate", "Translate sentences with a trained checkpoint");
  cmd->footer(kFooter);
  cmd->add_option("TEXT", a->texts, "Sentences to translate (default: lines of --input or standard input)");
  cmd->add_option("-i,--input", a->input, "Translate the lines of this file")->option_text("FILE");
  cmd->add_option("-o,--output", a->output, "Write the translations to this file (default: stdout)")
      ->option_text("FILE");
  cmd->add_flag("--scores", a->scores, "Put each translation's log-probability and a tab before it");
  cmd->add_flag("--tokens", a->tokens,
                "Write the target tokens separated by spaces instead of detokenized text");
  cmd->add_flag("--stats", a->stats,
                "Print tokens/s, time to the first token and time per step to stderr");
  cmd->add_option("--max-tokens", a->maxTokens, "Source tokens per batch at most (0: rows only)")
      ->option_text("N")
      ->check(CLI::NonNegativeNumber);
  addDecodeOptions(cmd, a->checkpoint, a->model, a->beam, a->lengthPenalty, a->maxLen, a->batch,
                   a->threads, a->noCache, a->noKvCache, a->quantize, true);
  cmd->callback([a] { runCommand("translate", [&] { return runTranslate(*a); }); });
}

}  // namespace tgc::cli
