// Sample continuations at the end of an lm run: what a person reads to see what was learnt.
#include <fmt/format.h>

#include <algorithm>

#include "runtime/train/generator.h"
#include "runtime/train/task_kinds.h"

namespace tgc::train {

std::string lmSamples(ValidationContext& ctx, const data::LmData& data, int samples) {
  if (samples <= 0 || data.valid.empty() || !ctx.model || !ctx.parameters) return {};
  // A model that only trains (no next_token graph) has nothing to sample with.
  const std::vector<std::string> graphs = compileModelFile(ctx.model->path, ctx.model->options("")).graph_names;
  if (std::find(graphs.begin(), graphs.end(), "next_token") == graphs.end())
    return fmt::format("samples: none ({} has no next_token graph to generate with)\n",
                       ctx.model->path);
  // Validation sequences spread over the split; each prompt is bos and the first third of
  // the line (at least one token), continued greedily to the end of the line.
  const size_t n = std::min(data.valid.size(), static_cast<size_t>(samples));
  std::vector<std::vector<int64_t>> prompts, rests;
  int64_t longest = 0;
  for (size_t k = 0; k < n; ++k) {
    const auto& seq = data.valid[n == 1 ? 0 : k * (data.valid.size() - 1) / (n - 1)];
    const size_t cut = std::max<size_t>(2, seq.size() / 3);
    prompts.emplace_back(seq.begin(), seq.begin() + static_cast<std::ptrdiff_t>(std::min(cut, seq.size())));
    rests.emplace_back(seq.begin() + static_cast<std::ptrdiff_t>(std::min(cut, seq.size())), seq.end());
    longest = std::max<int64_t>(longest, static_cast<int64_t>(seq.size()));
  }
  runtime::ExecOptions exec = ctx.exec;
  exec.updateInPlace = false;
  LmGenerator gen(*ctx.model, ctx.parameters(), exec);
  SampleOptions o;
  o.temperature = 0;  // greedy
  o.maxNew = longest + 8;
  o.seed = ctx.seed;
  o.batchSize = static_cast<int64_t>(n);
  const auto outs = gen.generate(prompts, o);
  const bool chars = data.vocab.kind() == data::TokenizerKind::chars;
  auto text = [&](const std::vector<int64_t>& ids) { return data.vocab.decode(ids); };
  std::string out = "samples (prompt | continuation | the line's own rest):\n";
  for (size_t i = 0; i < n; ++i) {
    const std::string sep = chars ? "" : " ";
    out += fmt::format("  {}{}| {}{}| {}\n", text(prompts[i]), sep, text(outs[i]), sep, text(rests[i]));
  }
  return out;
}

}  // namespace tgc::train
