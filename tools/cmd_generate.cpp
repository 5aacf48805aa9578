// `tgc generate`: continues prompts with a trained language model (greedy, temperature,
// top-k, top-p; seeded), reusing keys and values between steps.
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/data/vocab.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/generator.h"
#include "runtime/train/spec.h"
#include "tools/commands.h"

namespace tgc::cli {
namespace {

struct GenerateArgs {
  std::string checkpoint, model;
  std::vector<std::string> texts;
  int64_t maxNew = 100, topK = 0, batch = 16, count = 1;
  double temperature = 1.0, topP = 1.0;
  uint64_t seed = 1;
  int threads = 0;
  bool noCache = false, noKvCache = false, greedy = false, ignoreEos = false;
};

constexpr const char* kFooter = R"(
Input: the PROMPT arguments; without them, standard input, one prompt per line. Each prompt
is tokenized with the checkpoint's own vocabulary (unknown tokens become <unk>) after a bos
token; an empty prompt ("") generates from bos alone.

Output: each prompt followed by its continuation, one sample per line, in order (--count N:
N lines per prompt, samples 1..N of it). A sample ends at eos or after --max-new tokens.
Statistics (tokens, tokens/s, compile time) go to standard error.

Sampling: the log-probabilities are divided by --temperature (0 or --greedy: always the
most likely token), cut to the --top-k most likely tokens (0: all), then to the fewest most
likely tokens whose probabilities add up to at least --top-p (1: all), and drawn from in
float64 with a SplitMix64 stream seeded by --seed and the sample's index: the same seed
gives the same text on every machine and at every --batch.

Decoding: the prompt runs once (graph generate_prefill of the model file), then each step
runs one position per row, reusing the keys and values of the earlier positions (graph
generate_step); --no-kv-cache recomputes each whole prefix every step (graph
next_token_at). The prompt (with its bos) plus --max-new must fit in the model's context
(config entry max_len); a longer request is refused.

Examples:
  tgc train models/gpt.tg --preset tiny --out runs/gpt
  tgc generate --checkpoint runs/gpt "today is "
  tgc generate --checkpoint runs/gpt --temperature 0.8 --top-p 0.9 --count 3 "the dog"
  tgc generate --checkpoint runs/gpt --greedy --max-new 40 "two plus" "eight"
  tgc generate --checkpoint runs/gpt --ignore-eos --max-new 200 --count 16 ""   # tokens/s

Exit status: 0 on success; 1 with a message on stderr when the checkpoint cannot be read or
is not a language model's, the model does not compile, or a prompt does not fit.
)";

// The vocabulary of an lm run's checkpoint: taskState {"task": "lm", "vocab": "<json>"}.
data::Vocab lmVocab(const train::Checkpoint& c, const std::string& where) {
  if (c.taskState.empty())
    throw std::runtime_error(fmt::format(
        "{}: not a language model's checkpoint: it holds no task state (a translation run's?); "
        "tgc generate needs a checkpoint of `tgc train` on an lm task",
        where));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(c.taskState);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("{}: invalid task state: {}", where, e.what()));
  }
  const std::string task = j.is_object() && j.contains("task") && j["task"].is_string()
                               ? j["task"].get<std::string>()
                               : std::string();
  if (!j.is_object() || !j.contains("vocab") || !j["vocab"].is_string() || (!task.empty() && task != "lm"))
    throw std::runtime_error(fmt::format(
        "{}: not a language model's checkpoint (its task is {}); tgc generate needs a "
        "checkpoint of `tgc train` on an lm task",
        where, task.empty() ? "unknown: no vocabulary in its task state" : "'" + task + "'"));
  return data::Vocab::fromJson(j["vocab"].get<std::string>(), where + " (vocab)");
}

// The prompt as typed followed by the continuation, decoded after the prompt so that words
// get their spaces. Trailing spaces the tokenizer dropped (the model never saw them) are
// dropped from the prompt too.
std::string sampleText(const data::Vocab& v, std::string text, const std::vector<int64_t>& prompt,
                       const std::vector<int64_t>& tokens) {
  std::vector<int64_t> all = prompt;
  all.insert(all.end(), tokens.begin(), tokens.end());
  const std::string whole = v.decode(all), head = v.decode(prompt);
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  if (!head.empty() && !space(head.back()))
    while (!text.empty() && space(text.back())) text.pop_back();
  return text + (whole.starts_with(head) ? whole.substr(head.size()) : v.decode(tokens));
}

int runGenerate(const GenerateArgs& a) {
  const runtime::ExecOptions exec = commandExecOptions(a.threads, a.noCache);
  std::string used;
  train::Checkpoint c = train::loadLatestCheckpoint(a.checkpoint, &used);
  const data::Vocab vocab = lmVocab(c, used.empty() ? a.checkpoint : used);
  train::ModelSpec m = train::ModelSpec::fromJson(c.model);
  if (!a.model.empty()) m.path = std::filesystem::absolute(a.model).string();
  train::LmGenerator gen(m, c.parameters(), exec);

  std::vector<std::string> texts = a.texts;
  if (texts.empty())
    for (std::string line; std::getline(std::cin, line);) texts.push_back(line);
  std::vector<std::vector<int64_t>> prompts;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int64_t> ids{data::Vocab::kBos};
    for (int64_t id : vocab.encodeText(texts[i])) ids.push_back(id);
    const int64_t L = static_cast<int64_t>(ids.size()), C = gen.contextLength();
    if (L > C)
      throw std::runtime_error(fmt::format(
          "prompt {} is {} tokens long (its bos included), longer than the model's context of "
          "{} tokens (config entry max_len)",
          i + 1, L, C));
    if (L + a.maxNew > C)
      throw std::runtime_error(fmt::format(
          "prompt {} is {} tokens long (its bos included); with --max-new {} that makes {}, "
          "more than the model's context of {} tokens (config entry max_len): use --max-new {} "
          "or less",
          i + 1, L, a.maxNew, L + a.maxNew, C, C - L));
    for (int64_t k = 0; k < a.count; ++k) prompts.push_back(ids);
  }
  train::SampleOptions o;
  o.maxNew = a.maxNew;
  o.temperature = a.greedy ? 0.0 : a.temperature;
  o.topK = a.topK;
  o.topP = a.topP;
  o.seed = a.seed;
  o.kvCache = !a.noKvCache;
  o.batchSize = a.batch;
  o.stopAtEos = !a.ignoreEos;
  const std::vector<std::vector<int64_t>> out = gen.generate(prompts, o);
  for (size_t i = 0; i < out.size(); ++i) {
    std::cout << sampleText(vocab, texts[i / static_cast<size_t>(a.count)], prompts[i], out[i]) << "\n";
  }
  std::cout.flush();
  const train::GenerateStats& s = gen.lastStats();
  fmt::print(stderr,
             "tgc generate: {} samples, {} new tokens in {:.2f} s ({:.1f} tokens/s without the "
             "{:.2f} s of compiling; {}, batch {})\n",
             s.samples, s.tokens, s.seconds, s.tokensPerSecond(), s.compileSeconds,
             o.kvCache ? "key/value cache" : "no key/value cache", o.batchSize);
  return 0;
}

}  // namespace

void registerGenerate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Continue prompts with a trained language model");
  cmd->footer(kFooter);
  cmd->add_option("PROMPT", a->texts, "Prompts to continue (default: lines of standard input)");
  cmd->add_option("-c,--checkpoint", a->checkpoint,
                  "Run directory (its newest checkpoint) or checkpoint file")
      ->option_text("DIR")
      ->required();
  cmd->add_option("--model", a->model, "Model file, when it moved since training (default: the checkpoint's)")
      ->option_text("FILE");
  cmd->add_option("--max-new", a->maxNew, "New tokens per sample at most")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--temperature", a->temperature, "Sampling temperature (0: greedy)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--greedy", a->greedy, "Always the most likely token (--temperature 0)");
  cmd->add_option("--top-k", a->topK, "Sample among the K most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--top-p", a->topP, "Sample among the most likely tokens of total probability P")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Random seed of the sampling")->capture_default_str();
  cmd->add_option("--count", a->count, "Samples per prompt")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--batch", a->batch, "Samples generated together")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", a->ignoreEos,
                "Generate --max-new tokens whatever the model says (benchmarks; the text shown "
                "still ends at an eos)");
  cmd->add_flag("--no-kv-cache", a->noKvCache,
                "Recompute the whole prefix every step instead of reusing keys and values");
  cmd->add_option("--threads", a->threads, "Threads (default: $TGC_NUM_THREADS, else every core)")
      ->option_text("N");
  cmd->add_flag("--no-cache", a->noCache, "Compile every kernel, bypassing the kernel cache");
  cmd->callback([a] { runCommand("generate", [&] { return runGenerate(*a); }); });
}

}  // namespace tgc::cli
