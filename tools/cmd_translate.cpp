// `tgc translate`: translates sentences with a trained checkpoint (greedy or beam search).
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
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
  int beam = 1;
  double lengthPenalty = 0.6;
  int64_t maxLen = 0, batch = 64;
  int threads = 0;
  bool noCache = false, noKvCache = false;
};

constexpr const char* kFooter = R"(
Input: the TEXT arguments, each one sentence; without them, standard input, one sentence per
line (empty lines give empty translations). The source is tokenized with the checkpoint's
own vocabulary (characters for Chinese; words or SentencePiece subwords for English);
unknown tokens become <unk>.

Output: one translation per input sentence and line, in order, on standard output.

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

int runTranslate(const TranslateArgs& a) {
  const runtime::ExecOptions exec = commandExecOptions(a.threads, a.noCache);
  train::Checkpoint c = train::loadLatestCheckpoint(a.checkpoint);
  train::ModelSpec m = train::ModelSpec::fromJson(c.model);
  if (!a.model.empty()) m.path = std::filesystem::absolute(a.model).string();
  train::Translator tr(m, c.parameters(), exec);

  std::vector<std::string> texts = a.texts;
  if (texts.empty())
    for (std::string line; std::getline(std::cin, line);) texts.push_back(line);
  train::DecodeOptions o;
  o.beam = a.beam;
  o.lengthPenalty = a.lengthPenalty;
  o.maxLen = a.maxLen;
  o.lengthCap = c.lengthCap();
  o.kvCache = !a.noKvCache;
  o.batchSize = a.batch;
  for (const std::string& t : train::translateTexts(tr, c.srcVocab, c.tgtVocab, texts, o))
    std::cout << t << "\n";
  std::cout.flush();
  return 0;
}

}  // namespace

// Options shared by translate and eval.
void addDecodeOptions(CLI::App* cmd, std::string& checkpoint, std::string& model, int& beam,
                      double& lengthPenalty, int64_t& maxLen, int64_t& batch, int& threads,
                      bool& noCache, bool& noKvCache) {
  cmd->add_flag("--no-kv-cache", noKvCache,
                "Recompute the whole prefix every step instead of reusing keys and values");
  cmd->add_option("-c,--checkpoint", checkpoint,
                  "Run directory (its newest checkpoint) or checkpoint file")
      ->option_text("DIR")
      ->required();
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
  cmd->add_option("TEXT", a->texts, "Sentences to translate (default: lines of standard input)");
  addDecodeOptions(cmd, a->checkpoint, a->model, a->beam, a->lengthPenalty, a->maxLen, a->batch,
                   a->threads, a->noCache, a->noKvCache);
  cmd->callback([a] { runCommand("translate", [&] { return runTranslate(*a); }); });
}

}  // namespace tgc::cli
