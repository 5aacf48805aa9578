// `tgc predict`: the labels a classifier's checkpoint gives texts, with their probabilities.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/data/classify_data.h"
#include "runtime/data/lm_data.h"
#include "runtime/train/forward.h"
#include "runtime/train/run_info.h"
#include "runtime/train/task_kinds.h"
#include "tools/commands.h"

namespace tgc::cli {
namespace {

struct PredictArgs {
  std::string checkpoint, model, input, output;
  std::vector<std::string> texts;
  int threads = 0;
  int top = 1;
  bool noCache = false;
};

constexpr const char* kFooter = R"(
Texts come from the command line or --input FILE (one per line; blank lines are skipped) and
are tokenized with the checkpoint's vocabulary (a token it lacks becomes <unk>), cut to the
run's --max-tokens. Each text gets one line, in input order:
  LABEL<TAB>PROBABILITY<TAB>TEXT          (with --top K: the K best LABEL:PROBABILITY pairs)
written to stdout or --output FILE. The probabilities are the softmax of the bound graph's
`logits` output, run without dropout.

Examples:
  tgc predict --checkpoint runs/classifier "the rain will not stop today"
  tgc predict --checkpoint runs/classifier --input texts.txt --output labels.tsv --top 2

Exit status: 0 on success; 1 with a message on stderr when the checkpoint is not a
classifier's, or a file cannot be read or written.
)";

int runPredict(const PredictArgs& a) {
  const runtime::ExecOptions exec = commandExecOptions(a.threads, a.noCache);
  const train::RunInfo run = train::loadRun(a.checkpoint, a.model);
  if (run.binding.task != "classification")
    throw std::invalid_argument(fmt::format(
        "{}: the run's task is {}, and tgc predict gives a classifier's labels (for a language "
        "model: tgc generate; for any graph: tgc run --checkpoint)", run.path, run.binding.task));
  const train::TaskState state = train::parseTaskState(run.checkpoint.taskState, run.path);
  std::vector<std::string> texts = a.texts;
  if (!a.input.empty())
    for (const std::string& line : data::readTextLines(a.input)) texts.push_back(line);
  if (texts.empty()) throw std::invalid_argument("give texts to classify, or --input FILE");

  const data::ClassifyOptions opt = train::classifyOptions(run.data);
  const int64_t B = run.config.batchSize;
  std::vector<std::vector<int64_t>> ids;
  int64_t longest = 1;
  for (const std::string& t : texts) {
    std::vector<int64_t> e = state.vocab.encodeText(t);
    if (static_cast<int64_t>(e.size()) > opt.maxTokens) e.resize(static_cast<size_t>(opt.maxTokens));
    if (e.empty()) e.push_back(data::Vocab::kUnk);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(e.size()));
    ids.push_back(std::move(e));
  }
  train::ForwardRunner runner(run.model, run.binding, exec);
  const std::map<std::string, Tensor> params = run.checkpoint.parameters();
  const auto C = static_cast<int64_t>(state.labels.size());
  std::ofstream file;
  if (!a.output.empty()) {
    file.open(a.output, std::ios::trunc);
    if (!file) throw std::runtime_error("cannot write " + a.output);
  }
  std::ostream& out = a.output.empty() ? std::cout : file;
  for (size_t start = 0; start < ids.size(); start += static_cast<size_t>(B)) {
    const size_t rows = std::min(ids.size() - start, static_cast<size_t>(B));
    data::FieldBatch b;
    Tensor tokens(TensorType{DType::i64, {B, longest}});
    Tensor labels(TensorType{DType::i64, {B}});
    for (int64_t r = 0; r < B; ++r) {
      // Rows past the texts repeat the last one (an all-pad row would attend to nothing).
      const auto& e = ids[start + std::min(static_cast<size_t>(r), rows - 1)];
      for (int64_t t = 0; t < longest; ++t)
        tokens.setI(r * longest + t, t < static_cast<int64_t>(e.size()) ? e[static_cast<size_t>(t)] : 0);
      labels.setI(r, 0);
    }
    b.fields.emplace("tokens", std::move(tokens));
    b.fields.emplace("labels", std::move(labels));
    b.rows = static_cast<int64_t>(rows);
    b.dims = {{"batch", B}, {"length", longest}};
    const std::map<std::string, Tensor> o = runner.run(b, params, run.config.seed);
    auto it = o.find("logits");
    if (it == o.end() || it->second.shape().size() != 2 || it->second.shape()[1] != C)
      throw std::runtime_error(fmt::format(
          "the graph '{}' has no output `logits` [batch, {}] to predict from", run.binding.graph, C));
    const Tensor& logits = it->second;
    for (size_t r = 0; r < rows; ++r) {
      std::vector<std::pair<double, int64_t>> p;
      double mx = -INFINITY, z = 0;
      for (int64_t c = 0; c < C; ++c) mx = std::max(mx, logits.getF(static_cast<int64_t>(r) * C + c));
      for (int64_t c = 0; c < C; ++c) {
        const double e = std::exp(logits.getF(static_cast<int64_t>(r) * C + c) - mx);
        z += e;
        p.emplace_back(e, c);
      }
      std::sort(p.begin(), p.end(), [](const auto& x, const auto& y) { return x.first > y.first || (x.first == y.first && x.second < y.second); });
      if (a.top <= 1) {
        out << fmt::format("{}\t{:.4f}\t{}\n", state.labels[static_cast<size_t>(p[0].second)], p[0].first / z,
                           texts[start + r]);
      } else {
        std::string best;
        for (int k = 0; k < std::min<int>(a.top, static_cast<int>(C)); ++k)
          best += fmt::format("{}{}:{:.4f}", k ? "\t" : "", state.labels[static_cast<size_t>(p[static_cast<size_t>(k)].second)],
                              p[static_cast<size_t>(k)].first / z);
        out << best << "\t" << texts[start + r] << "\n";
      }
    }
  }
  if (!out.flush()) throw std::runtime_error("cannot write " + (a.output.empty() ? std::string("stdout") : a.output));
  return 0;
}

}  // namespace

void registerPredict(CLI::App& app) {
  auto a = std::make_shared<PredictArgs>();
  CLI::App* cmd = app.add_subcommand("predict", "Label texts with a classifier's checkpoint");
  cmd->footer(kFooter);
  cmd->add_option("TEXT", a->texts, "Texts to classify");
  cmd->add_option("--checkpoint", a->checkpoint, "A run directory (its newest checkpoint) or a checkpoint file")
      ->required()
      ->option_text("DIR");
  cmd->add_option("--model", a->model, "The model file, when it moved since training")->option_text("FILE");
  cmd->add_option("--input", a->input, "Texts to classify, one per line")->option_text("FILE");
  cmd->add_option("--output", a->output, "Write the labels here instead of stdout")->option_text("FILE");
  cmd->add_option("--top", a->top, "Show the K most probable labels")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--threads", a->threads, "Threads (default: $TGC_NUM_THREADS, else every core)")->option_text("N");
  cmd->add_flag("--no-cache", a->noCache, "Compile every kernel, bypassing the kernel cache");
  cmd->callback([a] { runCommand("predict", [&] { return runPredict(*a); }); });
}

}  // namespace tgc::cli
