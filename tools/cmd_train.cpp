// `tgc train`: trains a model file's `train` graph, compiled for the CPU or a CUDA GPU
// (--target), on the built-in
// numerals task or a parallel corpus; checkpoints, validation, a loss curve, and at the end
// the score on held-out data with a few sample translations.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/cuda/driver.h"
#include "runtime/safetensors.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/data_export.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/trainer.h"
#include "support/thread_pool.h"
#include "tools/commands.h"
#include "tools/pass_args.h"
#include "tools/model_args.h"
#include "tools/model_warnings.h"

namespace tgc::cli {
namespace {

namespace fs = std::filesystem;

// Defaults of the built-in task with the tiny preset, chosen (and measured) so that the
// README's command reaches >= 98% exact match within two minutes on two cores.
constexpr int64_t kNumeralsBatch = 64;
constexpr const char* kNumeralsSets[][2] = {{"p_drop", "0"}, {"label_smoothing", "0"}};

bool hasDModel(const train::ModelSpec& m) {
  for (const auto& [k, v] : compileModelFile(m.path, m.options("")).config)
    if (k == "d_model" && std::holds_alternative<int64_t>(v)) return true;
  return false;
}

// The config entries the built-in data of `task` sets before the user's --set entries (those
// the model has): the numerals and the built-in text and labels are clean and plentiful, so
// no dropout and no label smoothing.
std::vector<std::pair<std::string, std::string>> builtinSets(const train::ModelSpec& m,
                                                             const std::string& task) {
  (void)task;
  std::vector<std::pair<std::string, std::string>> out;
  const CompiledModel probe = compileModelFile(m.path, m.options(""));
  for (const auto& [k, v] : kNumeralsSets)
    for (const auto& entry : probe.config)
      if (entry.first == k) out.emplace_back(k, v);
  return out;
}

struct TrainArgs {
  ModelArgs model;
  WarningArgs warnings;
  std::string data, alignedEn, alignedZh;
  std::string source = "zh", english = "words";
  std::string task, tokens, packing = "lines", labelColumn = "first";
  int64_t blockLength = 64;
  int64_t spmVocab = 0, maxTokens = 0;
  int64_t steps = 0;
  double minutes = 0;
  std::string out, resume;
  int64_t batch = 0;
  int buckets = 2;
  uint64_t seed = 1;
  std::string schedule;  // "": noam when the model has d_model, else constant
  double lr = 1e-3, lrScale = 0, clipNorm = 1.0, weightDecay = 0, ema = 0.99;
  int64_t warmup = 0;
  DType precision = DType::f32;
  int threads = 0;
  int64_t validEvery = 250, validSize = 256, checkpointEvery = 500;
  int keep = 3, maxBadSteps = 10, samples = 8;
  bool noCache = false;
  std::string target = "cpu";
  std::string exportData;
  int64_t exportEpochs = 100;
  PassManagerOptions pm;  // the step's pipeline, watched as in tgc opt
  CLI::Option *minutesOpt = nullptr, *batchOpt = nullptr, *precisionOpt = nullptr;
};

constexpr const char* kFooter = R"(
Tasks: the model file's `bind TASK to GRAPH { ... }` says which data feeds which graph input,
which config entries take the vocabulary sizes or class counts, and which named dims the
batch shapes set (docs/language.md, "Data bindings"); --task chooses when it declares several.
  translation     models/transformer.tg: the built-in numerals, --data TSV, --aligned EN ZH
  lm              models/gpt.tg: the built-in text or --data TEXT (--pack lines|blocks,
                  --tokens chars|words|sentencepiece); validation perplexity
  classification  models/classifier.tg: the built-in labelled set or --data TSV
                  (--label-column first|last); accuracy and a confusion summary
  tensors         models/examples/regression.tg: --data FILE.safetensors or a folder of
                  shards, tensors named after the bound fields; the loss

Data:
  Translation without --data: Chinese numerals to English words (三千零五 -> three
  thousand five) for 0..99,999,999, generated from --seed: 100,000 training examples, 1,000
  validation and 1,000 test numbers never seen in training. --data FILE reads a Tatoeba-style
  TSV corpus (English<TAB>Chinese<TAB>...), --aligned EN ZH two line-aligned files; 5% of a
  corpus (by source sentence) is held out for validation. The lm task's built-in text is 6,000
  generated lines of simple English (sentences, counting, sums, dates), read as characters;
  the classification task's is 4,000 short sentences in 4 topics. A file's validation split
  is 5% (lm, by line or the last blocks) or 10% (classification by text, tensors by row).

Defaults for the built-in task (the README's command): batch 64, 2 length buckets, the noam
schedule scaled by 0.5 with 300 warm-up steps (peak rate 3.6e-3 at d_model 64), no dropout and
no label smoothing (--set p_drop=0 --set label_smoothing=0; your --set entries come after
them), evaluation with a moving average of the parameters (--ema 0.99), and a 2-minute budget
for the whole run (compiles and the final test included). Measured on 2 shared cores: 100%
exact match on the 1,000 test numbers, 97% on validation after 500 steps. For a corpus: the
model's own config, 30 minutes, warm-up 4000.

Output (in --out, default runs/<model>-<preset>-<data>, made unique):
  checkpoints/step-NNNNNNNN.safetensors  every --checkpoint-every steps and at the end, the
                last --keep kept: parameters, their moving average (--ema; what validation,
                tgc translate and tgc eval use), AdamW moments, step counters, options,
                vocabularies and the loss history; written atomically (temporary file,
                fsync, rename), so an interrupted save leaves the previous one intact
  loss.csv      step,update,loss,grad_norm,lr,tokens per step (the same after a resume)
  valid.csv     step,loss,exact_match,bleu,perplexity,accuracy per validation (the
                task's metric filled in)
  loss.svg      the loss curve with validation loss and the task's metric: exact match
                (built-in translation), BLEU (a corpus), perplexity, accuracy
--resume DIR continues the run of DIR's newest checkpoint (or of a checkpoint file) exactly
as if it had not stopped: same batches, same dropout, same loss curve. Options that define
the run (batch, seed, optimizer and precision, data) come from the checkpoint; --steps and --minutes set
where this invocation stops. Ctrl-C saves a checkpoint and exits. A step whose loss or
gradient is not finite changes nothing and is counted; --max-bad-steps of them in a row stop
training with a message.

Each bucket's step is built by the training pipeline (`tgc compile --train --print-pipeline`
prints it: the forward fusions, autodiff, fuse-ffn, a canonicalize/cse/dce clean-up,
adamw, rematerialize) through the pass
manager: --print-after-all, --print-changed, --time-passes and --dump-dir (one directory per
bucket, bucket-0, bucket-1, ...) show it as tgc opt does.

Examples:
  tgc train models/transformer.tg --preset tiny
  tgc train models/transformer.tg --preset tiny --steps 2000 --out runs/numerals
  tgc train --resume runs/numerals --steps 4000
  tgc train models/transformer.tg --preset tiny --steps 1 --dump-dir dumps --time-passes
  tgc train models/transformer.tg --preset base --data cmn.txt --target cuda --batch 64
  tgc train models/transformer.tg --preset small --data cmn.txt --minutes 30
  tgc translate --checkpoint runs/numerals 三千零五

Exit status: 0 when training ends (step limit or time budget) and the final evaluation ran;
1 with a message on stderr for unreadable data, an unusable checkpoint, a model that does not
compile, or training stopped by repeated non-finite steps; 130 after Ctrl-C (a checkpoint was
saved).
)";

std::atomic<bool> gInterrupted{false};

extern "C" void onInterrupt(int) { gInterrupted.store(true); }

std::string defaultOutDir(const train::ModelSpec& m, const train::DataSpec& d) {
  std::string name = fs::path(m.path).stem().string();
  if (!m.preset.empty()) name += "-" + m.preset;
  name += "-" + (d.kind == "numerals" ? std::string("numerals") : fs::path(d.path).stem().string());
  std::string dir = "runs/" + name;
  for (int i = 2; !train::listCheckpoints(dir).empty(); ++i) dir = fmt::format("runs/{}-{}", name, i);
  return dir;
}

void printSummary(train::Trainer& t, const train::TrainResult& r, const train::EvalResult* test,
                  int samples, const std::string& extra = "") {
  const double tokS = r.stepSeconds > 0 ? static_cast<double>(r.tokens) / r.stepSeconds : 0;
  fmt::print("\n{}\n", r.message);
  fmt::print("steps {} ({} this run, {} skipped) in {:.1f} s: compile {:.1f} s, steps {:.1f} s "
             "({:.2f} steps/s, {:.0f} {}/s)\n",
             r.step, r.stepsRun, r.skipped, r.seconds, r.compileSeconds, r.stepSeconds,
             r.stepSeconds > 0 ? static_cast<double>(r.stepsRun) / r.stepSeconds : 0, tokS,
             t.binding().task == "tensors" ? "rows" : "tokens");
  fmt::print("{}", extra);
  if (test) {
    const auto& d = t.data();
    const bool builtin = !d.test.empty();
    fmt::print("{}: exact match {:.1f}% ({} sentences), BLEU {:.1f} ({:.1f} s)\n",
               builtin ? "test (held-out numbers)" : "validation split", 100 * test->exactMatch,
               test->sentences, test->bleu, test->seconds);
    const auto& split = train::evalSplit(d);
    // Samples from short to long sources.
    std::vector<size_t> byLength(split.size());
    std::iota(byLength.begin(), byLength.end(), size_t{0});
    std::stable_sort(byLength.begin(), byLength.end(), [&](size_t x, size_t y) {
      return split[x].src.size() < split[y].src.size();
    });
    const size_t n = std::min<size_t>(static_cast<size_t>(std::max(samples, 0)), split.size());
    for (size_t k = 0; k < n; ++k) {
      const size_t i = byLength[n == 1 ? 0 : k * (split.size() - 1) / (n - 1)];
      const bool ok = test->hypotheses[i] == split[i].tgtText;
      fmt::print("  {} {} -> {}{}\n", ok ? "ok " : "BAD", split[i].srcText, test->hypotheses[i],
                 ok ? "" : fmt::format("   (expected: {})", split[i].tgtText));
    }
  }
  fmt::print("checkpoint {}\nloss curve {}/loss.csv, {}/loss.svg\n",
             r.checkpoint.empty() ? "none written" : r.checkpoint, t.outDir(), t.outDir());
}

int runTrain(TrainArgs& a) {
  // Without a driver or a device this stops with "no CUDA device: ..." before anything is
  // read or written.
  if (a.target == "cuda") runtime::cuda::Device::open();
  const train::Target target = a.target == "cuda" ? train::Target::cuda : train::Target::cpu;
  const runtime::ExecOptions exec = commandExecOptions(a.threads, a.noCache);

  std::unique_ptr<train::Trainer> trainer;
  bool builtin = true;
  std::string task;
  if (!a.resume.empty()) {
    if (!a.model.model.empty())
      throw std::invalid_argument("--resume takes the model from the checkpoint: give no MODEL");
    trainer = train::Trainer::resume(a.resume, a.out, exec, &std::cerr, target);
    const DType saved = trainer->config().optimizer.precision;
    if (a.precisionOpt->count() && a.precision != saved)
      throw std::invalid_argument(fmt::format(
          "--precision {}: the run in {} trains with {} matmuls (a resumed run keeps its "
          "precision)", a.precision == DType::bf16 ? "bf16" : "fp32", a.resume,
          saved == DType::bf16 ? "bf16" : "fp32"));
    task = trainer->binding().task;
    builtin = trainer->dataSpec().builtin();
  } else {
    if (a.model.model.empty()) throw std::invalid_argument("give a MODEL file (or --resume DIR)");
    train::ModelSpec m;
    m.path = fs::absolute(a.model.model).lexically_normal().string();
    m.preset = a.model.preset;
    m.libPaths = a.model.libs;
    for (const auto& kv : toModelOptions(a.model).sets) m.sets.push_back(kv);
    // The binding says which task feeds the model; the defaults depend on it.
    task = train::findBinding(m, a.task).task;
    train::DataSpec d;
    d.seed = a.seed;
    if (!a.data.empty() && !a.alignedEn.empty())
      throw std::invalid_argument("give either --data or --aligned, not both");
    if (!a.data.empty()) {
      d.kind = "tsv";
      d.path = fs::absolute(a.data).string();
    } else if (!a.alignedEn.empty()) {
      d.kind = "aligned";
      d.path = fs::absolute(a.alignedEn).string();
      d.path2 = fs::absolute(a.alignedZh).string();
    } else if (task == "tensors") {
      throw std::invalid_argument(
          "the tensors task has no built-in data: give --data FILE.safetensors (or a folder of shards)");
    } else if (task != "translation") {
      d.kind = "builtin";
    }
    builtin = d.builtin();
    d.source = a.source;
    d.english = a.english;
    d.tokens = a.tokens;
    d.packing = a.packing;
    d.blockLength = a.blockLength;
    d.labelColumn = a.labelColumn;
    if (task == "translation") {
      d.sentencePieceVocab = a.spmVocab > 0 ? a.spmVocab : 8000;
      d.maxTokens = a.maxTokens > 0 ? a.maxTokens : 64;
    } else {
      d.source.clear();
      d.sentencePieceVocab = a.spmVocab > 0 ? a.spmVocab : 2000;
      d.maxTokens = a.maxTokens > 0 ? a.maxTokens : 128;
      d.validFraction = task == "lm" ? 0.05 : 0.1;
      if (builtin) d.trainSize = task == "lm" ? 6000 : 4000;
    }
    // The built-in data's defaults come first; the user's --set entries after them.
    if (builtin) {
      const auto sets = builtinSets(m, task);
      m.sets.insert(m.sets.begin(), sets.begin(), sets.end());
    }

    train::TrainConfig c;
    c.batchSize = a.batch > 0 ? a.batch : kNumeralsBatch;
    c.buckets = a.buckets;
    c.task = a.task;
    c.seed = a.seed;
    // noam scales by d_model^-0.5: without such an entry the rate is --lr itself.
    c.optimizer.schedule = !a.schedule.empty() ? a.schedule : hasDModel(m) ? "noam" : "constant";
    c.optimizer.lr = a.lr;
    c.optimizer.lr_scale = a.lrScale > 0 ? a.lrScale : builtin ? 0.5 : 1.0;
    c.optimizer.warmup = a.warmup > 0 ? a.warmup : builtin ? 300 : 4000;
    c.optimizer.clip_norm = a.clipNorm;
    c.optimizer.weight_decay = a.weightDecay;
    c.optimizer.precision = a.precision;
    c.validEvery = a.validEvery;
    c.validSize = a.validSize;
    c.checkpointEvery = a.checkpointEvery;
    c.keepCheckpoints = a.keep;
    c.maxBadSteps = a.maxBadSteps;
    c.ema = a.ema;
    const std::string out = a.out.empty() ? defaultOutDir(m, d) : a.out;
    std::cerr << fmt::format("training {} ({}{}) on the {} into {}\n", a.model.model,
                             m.preset.empty() ? "default config" : "preset " + m.preset,
                             a.precision == DType::bf16 ? ", bf16 matmuls" : "", d.describe(task), out);
    trainer = std::make_unique<train::Trainer>(m, d, c, out, exec, &std::cerr, target);
  }
  trainer->setTty(isatty(STDERR_FILENO));
  trainer->setPassOptions(a.pm);
  {  // the model's warnings, once, from the bound graph's lowering (cheap: no code)
    const train::ModelSpec& spec = trainer->model();
    reportWarnings(compileModelFile(spec.path, spec.options(trainer->binding().graph)), a.warnings);
  }
  if (!a.exportData.empty()) {
    // The run's data for another implementation (bench/tatoeba_bleu.py, bench/gpt_lm.py); no
    // training.
    train::DataExportInfo info;
    info.spec = trainer->dataSpec();
    info.seed = trainer->config().seed;
    info.batchSize = trainer->config().batchSize;
    info.epochs = a.exportEpochs;
    if (task != "translation") {
      const std::string text = trainer->task().exportJson(info);
      if (text.empty())
        throw std::invalid_argument(fmt::format(
            "--export-data writes translation and lm data; this run's task is {}", task));
      train::writeExportFile(a.exportData, text);
      // The run's initial parameters too (those the first step starts from: the bound
      // graph's initializers from the seed), so that the other side starts from the same ones.
      const std::string params = fs::path(a.exportData).replace_extension(".init.safetensors").string();
      const train::ModelSpec& m = trainer->model();
      TensorFile init;
      init.tensors = initParams(compileModelFile(m.path, m.options(trainer->binding().graph)).params,
                                trainer->config().seed);
      writeSafetensors(params, init);
      std::cerr << fmt::format("wrote the data of the run ({} training examples, {} validation, {} "
                               "epochs of batches) to {} and its initial parameters to {}\n",
                               trainer->task().trainExamples(), trainer->task().validExamples(),
                               a.exportEpochs, a.exportData, params);
      return 0;
    }
    info.lengthCap = trainer->decodeOptions().lengthCap;
    train::writeDataExport(a.exportData, trainer->data(), trainer->batcher(), info);
    std::cerr << fmt::format("wrote the data of the run ({} training pairs, {} validation, {} "
                             "epochs of batches) to {}\n",
                             trainer->batcher().data().size(), trainer->data().valid.size(),
                             a.exportEpochs, a.exportData);
    return 0;
  }

  train::StopRule rule;
  rule.steps = a.steps;
  const double minutes = a.minutesOpt->count() ? a.minutes : a.steps > 0 ? 0 : builtin ? 2.0 : 30.0;
  rule.seconds = minutes * 60;
  rule.reserveSentences =
      task == "translation" ? static_cast<int64_t>(train::evalSplit(trainer->data()).size()) : 0;

  gInterrupted.store(false);
  struct sigaction sa {};
  sa.sa_handler = onInterrupt;
  sigemptyset(&sa.sa_mask);
  struct sigaction old {};
  sigaction(SIGINT, &sa, &old);
  train::TrainResult r;
  try {
    r = trainer->train(rule, &gInterrupted);
  } catch (...) {
    sigaction(SIGINT, &old, nullptr);
    throw;
  }
  sigaction(SIGINT, &old, nullptr);

  if (r.reason == train::TrainResult::Reason::interrupted) {
    printSummary(*trainer, r, nullptr, 0);
    return 130;
  }
  if (r.reason == train::TrainResult::Reason::nonFinite) {
    printSummary(*trainer, r, nullptr, 0);
    std::cerr << "tgc train: error: " << r.message << "\n";
    return 1;
  }
  if (task == "translation") {
    const train::DecodeOptions dec = trainer->decodeOptions();
    const train::EvalResult test =
        train::evaluatePairs(trainer->translator(), trainer->data(), train::evalSplit(trainer->data()), dec);
    printSummary(*trainer, r, &test, a.samples);
    return 0;
  }
  // The whole validation split with the task's metric, and what the task shows of it.
  const auto t0 = std::chrono::steady_clock::now();
  const train::ValidRow v = trainer->score(0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string extra = fmt::format("validation split ({} {}): {} ({:.1f} s)\n",
                                  trainer->task().validExamples(), task == "tensors" ? "rows" : "sentences",
                                  train::scoreText(trainer->task().metric(), v), took);
  extra += trainer->report(a.samples);
  printSummary(*trainer, r, nullptr, 0, extra);
  return 0;
}

}  // namespace

void registerTrain(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a model on the built-in numerals task or a parallel corpus (CPU or CUDA GPU)");
  cmd->footer(kFooter);
  cmd->add_option("MODEL", a->model.model, "Model file in the tgc model language (.tg)");
  cmd->add_option("--preset", a->model.preset, "Named preset of the model's config (tiny, small, base)")
      ->option_text("NAME");
  cmd->add_option("--set", a->model.sets, "Override a config entry: --set d_model=128 (repeatable)")
      ->option_text("KEY=VALUE")
      ->allow_extra_args(false);
  cmd->add_option("--lib", a->model.libs, "Extra folder searched for imports (repeatable)")
      ->option_text("DIR")
      ->allow_extra_args(false);
  addWarningArgs(cmd, a->warnings);
  cmd->add_option("--data", a->data,
                  "The task's data: translation a Tatoeba-style TSV corpus, lm a text file, "
                  "classification a TSV of labels and texts, tensors a safetensors file or a "
                  "folder of shards (default: the task's built-in data)")
      ->option_text("FILE");
  cmd->add_option("--task", a->task,
                  "The binding that feeds the model, by its task (translation, lm, "
                  "classification, tensors), when the model file declares several")
      ->option_text("NAME");
  cmd->add_option("--tokens", a->tokens,
                  "lm and classification: tokens as chars, words or sentencepiece subwords "
                  "(default chars for lm, words for classification)")
      ->check(CLI::IsMember({"chars", "words", "sentencepiece"}));
  cmd->add_option("--pack", a->packing,
                  "lm: each line a sequence, or the text packed into blocks of --block tokens")
      ->check(CLI::IsMember({"lines", "blocks"}))
      ->capture_default_str();
  cmd->add_option("--block", a->blockLength, "lm --pack blocks: tokens per block")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--label-column", a->labelColumn,
                  "classification: the TSV's label is its first column (label<TAB>text) or its "
                  "last (text<TAB>label)")
      ->check(CLI::IsMember({"first", "last"}))
      ->capture_default_str();
  cmd->add_option("--aligned", [a](const CLI::results_t& r) {
        a->alignedEn = r.at(0);
        a->alignedZh = r.at(1);
        return true;
      }, "Two line-aligned files, English then Chinese")
      ->expected(2)
      ->option_text("EN ZH");
  cmd->add_option("--source", a->source, "Corpus: translate from this language")
      ->check(CLI::IsMember({"zh", "en"}))
      ->capture_default_str();
  cmd->add_option("--english", a->english, "Corpus: English as words or sentencepiece subwords")
      ->check(CLI::IsMember({"words", "sentencepiece"}))
      ->capture_default_str();
  cmd->add_option("--spm-vocab", a->spmVocab,
                  "SentencePiece vocabulary size (default 8000 translation, 2000 lm and classification)")
      ->option_text("N");
  cmd->add_option("--max-tokens", a->maxTokens,
                  "Drop examples with more tokens (default 64 translation, either side; 128 lm lines "
                  "and classification)")
      ->option_text("N");
  cmd->add_option("--steps", a->steps, "Stop at this many steps (batches) in all")
      ->option_text("N")
      ->check(CLI::NonNegativeNumber);
  a->minutesOpt = cmd->add_option("--minutes", a->minutes,
                                  "Time budget of the whole run, compiles and final evaluation "
                                  "included (default 2 built-in, 30 corpus; none with --steps)");
  a->minutesOpt->option_text("M")->check(CLI::NonNegativeNumber);
  cmd->add_option("-o,--out", a->out, "Run directory (default runs/<model>-<preset>-<data>)")
      ->option_text("DIR");
  cmd->add_option("--resume", a->resume, "Continue the run in DIR (its newest checkpoint) or a checkpoint file")
      ->option_text("DIR");
  cmd->add_option("--batch", a->batch, "Sentences per batch (default 64)")
      ->option_text("B")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--buckets", a->buckets, "Length buckets, each with its own compiled step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the parameters, the data and its order, dropout")
      ->capture_default_str();
  cmd->add_option("--schedule", a->schedule,
                  "Learning-rate schedule: noam (warm-up; the default for models with a config "
                  "entry d_model) or constant (the default otherwise)")
      ->check(CLI::IsMember({"noam", "constant"}))
      ->capture_default_str();
  cmd->add_option("--lr", a->lr, "Learning rate of --schedule constant")->capture_default_str();
  cmd->add_option("--lr-scale", a->lrScale,
                  "Factor on the noam schedule (default 0.5 built-in, 1 corpus)")
      ->option_text("X");
  cmd->add_option("--warmup", a->warmup, "Warm-up steps of the noam schedule (default 300 built-in, 4000 corpus)")
      ->option_text("N");
  cmd->add_option("--clip-norm", a->clipNorm, "Clip gradients to this global L2 norm (0: off)")
      ->capture_default_str();
  cmd->add_option("--weight-decay", a->weightDecay, "Decoupled weight decay (AdamW)")
      ->capture_default_str();
  a->precisionOpt = addPrecisionOption(cmd, a->precision);
  cmd->add_option("--ema", a->ema,
                  "Decay of the parameters' moving average used for validation, evaluation and "
                  "translation (0: off)")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "Threads (default: $TGC_NUM_THREADS, else every core)")
      ->option_text("N");
  cmd->add_option("--valid-every", a->validEvery, "Steps between validations (0: none)")
      ->capture_default_str();
  cmd->add_option("--valid-size", a->validSize, "Validation sentences decoded each time (0: all)")
      ->capture_default_str();
  cmd->add_option("--checkpoint-every", a->checkpointEvery, "Steps between checkpoints (0: only at the end)")
      ->capture_default_str();
  cmd->add_option("--keep", a->keep, "Checkpoints kept")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--max-bad-steps", a->maxBadSteps,
                  "Non-finite steps in a row that stop training")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--samples", a->samples, "Sample translations shown at the end")
      ->capture_default_str();
  cmd->add_flag("--no-cache", a->noCache, "Compile every kernel, bypassing the kernel cache");
  addPassManagerArgs(cmd, a->pm);
  cmd->add_option("--target", a->target,
                  "Where training steps run: cpu, or cuda (the first NVIDIA GPU; parameters and "
                  "optimizer state stay on it; validation and translation decode on the CPU; "
                  "without a GPU: 'no CUDA device' and exit 1)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--export-data", a->exportData,
                  "Write the run's data (vocabularies, token ids, buckets, batch order, "
                  "validation split) as JSON to FILE and exit without training (translation "
                  "and lm; lm also writes the initial parameters to FILE's stem + "
                  ".init.safetensors)")
      ->option_text("FILE");
  cmd->add_option("--export-epochs", a->exportEpochs, "Epochs of batch order --export-data writes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->callback([a] {
    const int status = runCommand("train", [&] { return runTrain(*a); });
    if (status != 0) throw CLI::RuntimeError(status);
  });
}

}  // namespace tgc::cli
