// `tgc eval`: exact match and corpus BLEU of a checkpoint on held-out data.
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/data/bleu.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/forward.h"
#include "runtime/train/run_info.h"
#include "runtime/train/task.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/spec.h"
#include "runtime/train/translator.h"
#include "tools/commands.h"

namespace tgc::cli {

void addDecodeOptions(CLI::App* cmd, std::string& checkpoint, std::string& model, int& beam,
                      double& lengthPenalty, int64_t& maxLen, int64_t& batch, int& threads,
                      bool& noCache, bool& noKvCache, std::string& quantize, bool requireCheckpoint);

namespace {

struct EvalArgs {
  std::string checkpoint, model, data, hypotheses, scoreFile, references, quantize;
  int beam = 1;
  double lengthPenalty = 0.6;
  int64_t maxLen = 0, batch = 128, limit = 0;
  int threads = 0, show = 5;
  bool noCache = false, noKvCache = false;
};

constexpr const char* kFooter = R"(
Each task has its metric:
  translation     exact match (the hypothesis equals the reference byte for byte) and corpus
                  BLEU as sacreBLEU computes it by default (13a tokenization, exp smoothing)
  lm              the loss averaged over target tokens, and its perplexity exp(loss); sample
                  continuations of --show validation lines
  classification  accuracy and a confusion summary (recall and precision per class)
  tensors         the graph's loss

Data: by default the held-out split of the checkpoint's own data: the built-in task's 1,000
test numbers (never seen in training), or the validation split (rebuilt from the data with
the training run's seed and options). --data FILE scores another file read with the same
options: a translation corpus's validation split; every line of a text or labelled file,
every row of a tensors file. Texts are encoded with the checkpoint's vocabulary; a label the
checkpoint does not know is an error.

Examples:
  tgc eval --checkpoint runs/numerals
  tgc eval --checkpoint runs/numerals --beam 4 --show 10
  tgc eval --checkpoint runs/cmn --data cmn.txt --limit 500
  tgc eval --checkpoint runs/gpt-tiny --data held_out.txt
  tgc eval --checkpoint runs/classifier --data test.tsv
  tgc eval --score out.txt --references ref.txt   # a file `tgc translate -o` wrote

Exit status: 0 on success; 1 with a message on stderr when the checkpoint or the data cannot
be read or the model does not compile.
)";

// The lm, classification and tensors tasks: the loss and the task's metric from the bound
// graph's forward pass, and what the task shows (a confusion summary, sample continuations).
int evalTask(const EvalArgs& a, const train::RunInfo& run, runtime::ExecOptions exec) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<train::Task> task = train::evaluationTask(run, a.data);
  train::ForwardRunner runner(run.model, run.binding, exec);
  const std::map<std::string, Tensor> params = run.checkpoint.parameters();
  train::ValidationContext ctx;
  ctx.forward = [&](const data::FieldBatch& b) { return runner.run(b, params, run.config.seed); };
  ctx.limit = a.limit;
  ctx.seed = run.config.seed;
  ctx.model = &run.model;
  ctx.parameters = [&] { return params; };
  ctx.exec = exec;
  const train::ValidRow v = task->validate(ctx);
  const int64_t n = a.limit > 0 ? std::min(a.limit, task->validExamples()) : task->validExamples();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("{} (step {}) on {}: {} ({} {}, {:.1f} s)\n", run.path, run.checkpoint.step,
             a.data.empty() ? run.data.describe(run.binding.task) + ", validation split"
                            : std::filesystem::path(a.data).filename().string(),
             train::scoreText(task->metric(), v), n, run.binding.task == "tensors" ? "rows" : "examples",
             took);
  fmt::print("{}", task->report(ctx, a.show));
  return 0;
}

std::vector<std::string> readLines(const std::string& path, const char* what) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(fmt::format("cannot read {} {}", what, path));
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  if (f.bad()) throw std::runtime_error(fmt::format("reading {} {} failed", what, path));
  return lines;
}

// --score FILE --references FILE: a translation file against its references.
int scoreFile(const EvalArgs& a) {
  if (a.references.empty()) throw std::invalid_argument("--score needs --references FILE");
  const auto hyps = readLines(a.scoreFile, "--score");
  const auto refs = readLines(a.references, "--references");
  if (hyps.size() != refs.size())
    throw std::runtime_error(fmt::format("{} has {} lines but {} has {}: one translation per "
                                         "reference, in order", a.scoreFile, hyps.size(),
                                         a.references, refs.size()));
  const double exact = hyps.empty() ? 0 : data::exactMatch(hyps, refs);
  const double bleu = hyps.empty() ? 0 : data::corpusBleu(hyps, refs).score;
  fmt::print("{} against {}: exact match {:.2f}%, BLEU {:.2f} ({} sentences)\n", a.scoreFile,
             a.references, 100 * exact, bleu, hyps.size());
  return 0;
}

int runEval(const EvalArgs& a) {
  if (!a.scoreFile.empty()) return scoreFile(a);
  if (a.checkpoint.empty())
    throw std::invalid_argument("give --checkpoint DIR, or --score FILE --references FILE");
  const runtime::ExecOptions exec = commandExecOptions(a.threads, a.noCache);
  const train::RunInfo run = train::loadRun(a.checkpoint, a.model);
  if (run.binding.task != "translation") return evalTask(a, run, exec);
  const std::string& used = run.path;
  const train::Checkpoint& c = run.checkpoint;
  const train::ModelSpec& m = run.model;
  train::DataSpec spec = run.data;
  if (!a.data.empty()) {
    spec.kind = "tsv";
    spec.path = std::filesystem::absolute(a.data).string();
  }
  data::TranslationData d = train::loadData(spec);
  // Scored through the checkpoint's vocabularies, whatever the data would build.
  d.srcVocab = c.srcVocab;
  d.tgtVocab = c.tgtVocab;
  train::Translator tr(m, c.parameters(), exec);
  tr.setQuantize(a.quantize == "int8");
  train::DecodeOptions o;
  o.beam = a.beam;
  o.lengthPenalty = a.lengthPenalty;
  o.maxLen = a.maxLen;
  o.lengthCap = c.lengthCap();
  o.kvCache = !a.noKvCache;
  o.batchSize = a.batch;
  const auto& split = train::evalSplit(d);
  const train::EvalResult r = train::evaluatePairs(tr, d, split, o, a.limit);
  fmt::print("{} (step {}) on {} {}: exact match {:.2f}%, BLEU {:.2f} ({} sentences, {}, {:.1f} s)\n",
             used, c.step, spec.describe(), d.test.empty() ? "validation split" : "test split",
             100 * r.exactMatch, r.bleu, r.sentences,
             a.beam == 1 ? std::string("greedy") : fmt::format("beam {}", a.beam), r.seconds);
  if (!a.hypotheses.empty()) {
    // One hypothesis per line, in the split's order (for scoring with other tools).
    std::ofstream f(a.hypotheses, std::ios::trunc);
    for (const std::string& h : r.hypotheses) f << h << "\n";
    if (!f.flush()) throw std::runtime_error("cannot write " + a.hypotheses);
  }
  for (int64_t i = 0; i < std::min<int64_t>(a.show, r.sentences); ++i) {
    const size_t k = static_cast<size_t>(i * (r.sentences - 1) / std::max<int64_t>(1, std::min<int64_t>(a.show, r.sentences) - 1));
    const bool ok = r.hypotheses[k] == split[k].tgtText;
    fmt::print("  {} {} -> {}{}\n", ok ? "ok " : "BAD", split[k].srcText, r.hypotheses[k],
               ok ? "" : fmt::format("   (expected: {})", split[k].tgtText));
  }
  return 0;
}

}  // namespace

void registerEval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Score a checkpoint on held-out data with its task's metric (BLEU, perplexity, accuracy, loss)");
  cmd->footer(kFooter);
  addDecodeOptions(cmd, a->checkpoint, a->model, a->beam, a->lengthPenalty, a->maxLen, a->batch,
                   a->threads, a->noCache, a->noKvCache, a->quantize, false);
  cmd->add_option("--score", a->scoreFile,
                  "Score this file of translations (one per line, as `tgc translate --output` "
                  "writes them) against --references, without a checkpoint")
      ->option_text("FILE");
  cmd->add_option("--references", a->references, "The reference translations for --score, one per line")
      ->option_text("FILE");
  cmd->add_option("--data", a->data,
                  "Data scored instead of the run's own held-out split (a corpus's validation "
                  "split; all of a text, labelled or tensors file)")
      ->option_text("FILE");
  cmd->add_option("--limit", a->limit, "Score only the first N sentences (0: all)")
      ->option_text("N")
      ->capture_default_str();
  cmd->add_option("--hypotheses", a->hypotheses, "Write the translations, one per line, to FILE")
      ->option_text("FILE");
  cmd->add_option("--show", a->show, "Examples printed, spread over the split")->capture_default_str();
  cmd->callback([a] { runCommand("eval", [&] { return runEval(*a); }); });
}

}  // namespace tgc::cli
