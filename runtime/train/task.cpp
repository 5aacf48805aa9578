#include "runtime/train/task.h"

#include <fmt/format.h>

#include <stdexcept>

#include "runtime/train/task_kinds.h"
#include "runtime/train/task_translation.h"

namespace tgc::train {

std::string bindingKey(const BindingEntry& e) {
  return e.axis < 0 ? e.from : fmt::format("{}.shape[{}]", e.from, e.axis);
}

std::vector<std::pair<std::string, int64_t>> boundDims(const DataBinding& binding,
                                                       const BucketDims& dims) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const BindingEntry& e : binding.dims) {
    auto it = dims.find(bindingKey(e));
    if (it == dims.end())
      throw std::runtime_error(fmt::format("{}: the {} task's batches have no dim '{}'", e.loc,
                                           binding.task, bindingKey(e)));
    out.emplace_back(e.name, it->second);
  }
  return out;
}

std::unique_ptr<Task> makeTask(const DataSpec& spec, const DataBinding& binding,
                               const BatchOptions& batching, const Checkpoint* stored) {
  const std::string& task = binding.task;
  const bool translationData = spec.kind == "numerals" || spec.kind == "tsv" || spec.kind == "aligned";
  if (task == "translation") {
    if (!translationData)
      throw std::runtime_error(fmt::format(
          "{}: the binding feeds the translation task, which reads the built-in numerals, a TSV "
          "corpus (--data) or aligned files (--aligned), not {} data", binding.loc, spec.kind));
    return std::make_unique<TranslationTask>(spec, batching);
  }
  if (spec.kind == "aligned")
    throw std::runtime_error(fmt::format(
        "--aligned: aligned files are translation data, and the binding ({}) feeds the {} task",
        binding.loc, task));
  if (task == "lm") return makeLmTask(spec, batching, stored);
  if (task == "classification") return makeClassificationTask(spec, batching, stored);
  if (task == "tensors") return makeTensorsTask(spec, binding, batching);
  throw std::runtime_error(fmt::format("{}: unknown task '{}'", binding.loc, task));
}

std::string scoreText(const std::string& metric, const ValidRow& v) {
  std::string s = fmt::format("loss {:.4f}", v.loss);
  if (metric == "exact_match" || metric == "bleu")
    s += fmt::format(", exact match {:.1f}%, BLEU {:.1f}", 100 * v.exactMatch, v.bleu);
  else if (metric == "perplexity")
    s += fmt::format(", perplexity {:.3f}", v.perplexity);
  else if (metric == "accuracy")
    s += fmt::format(", accuracy {:.1f}%", 100 * v.accuracy);
  return s;
}

double averageLoss(
    ValidationContext& ctx, const std::vector<FieldBatch>& batches,
    const std::function<void(const FieldBatch&, const std::map<std::string, Tensor>&)>& each) {
  double sum = 0, weight = 0;
  for (const FieldBatch& b : batches) {
    const std::map<std::string, Tensor> out = ctx.forward(b);
    sum += out.at("loss").getF(0) * b.weight;
    weight += b.weight;
    if (each) each(b, out);
  }
  return weight > 0 ? sum / weight : 0;
}

}  // namespace tgc::train
