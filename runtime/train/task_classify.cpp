// The classification task: labelled text (a TSV file, or the built-in set); validation reports
// accuracy from the graph's `logits` output, and the end of a run a confusion summary.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "runtime/train/task_kinds.h"

namespace tgc::train {

namespace {

// Per example of a scored batch: the predicted class and -log p(label).
struct Scored {
  int64_t label = 0, predicted = 0;
  double nll = 0;
};

class ClassifyTask final : public BatchedTask<data::ClassifyBatcher> {
 public:
  ClassifyTask(const DataSpec& spec, const BatchOptions& batching, const Checkpoint* stored)
      : batchSize_(batching.batchSize) {
    if (spec.labelColumn != "first" && spec.labelColumn != "last")
      throw std::runtime_error(
          fmt::format("the label column must be first or last, not '{}'", spec.labelColumn));
    const auto examples =
        spec.builtin() ? data::builtinClassification(spec.seed, spec.trainSize)
                       : data::readClassifyTsv(spec.path, spec.labelColumn == "first"
                                                              ? data::LabelColumn::first
                                                              : data::LabelColumn::last);
    if (stored) {
      TaskState s = parseTaskState(stored->taskState, "the checkpoint");
      data_ = data::classifyDataWithVocab(examples, classifyOptions(spec), std::move(s.vocab),
                                          std::move(s.labels));
    } else {
      data_ = data::classifyData(examples, classifyOptions(spec));
    }
    data::BatchingOptions bo;
    bo.batchSize = batching.batchSize;
    bo.numBuckets = batching.buckets;
    bo.dropPartial = true;
    batcher_ = std::make_unique<data::ClassifyBatcher>(data_.train, bo);
  }

  std::string name() const override { return "classification"; }
  std::string summary() const override { return data_.summary; }
  std::optional<int64_t> value(const std::string& key) const override {
    if (key == "vocab") return data_.vocab.size();
    if (key == "classes") return static_cast<int64_t>(data_.labels.size());
    if (key == "pad") return data::Vocab::kPad;
    return std::nullopt;
  }
  int64_t validExamples() const override { return static_cast<int64_t>(data_.valid.size()); }
  std::string metric() const override { return "accuracy"; }

  // The loss is the mean of -log softmax(logits)[label] over the real rows, computed here
  // in float64 (the rows that fill up a batch repeat real ones, so the graph's own mean
  // over a batch would count them twice).
  ValidRow validate(ValidationContext& ctx) override {
    ValidRow v;
    const std::vector<Scored> s = score(ctx);
    if (s.empty()) return v;
    double nll = 0, right = 0;
    for (const Scored& e : s) {
      nll += e.nll;
      right += e.predicted == e.label ? 1 : 0;
    }
    v.loss = nll / static_cast<double>(s.size());
    v.accuracy = right / static_cast<double>(s.size());
    return v;
  }

  // Per class: examples, recall and precision; then the most frequent confusions.
  std::string report(ValidationContext& ctx, int samples) override {
    ctx.limit = 0;
    const std::vector<Scored> s = score(ctx);
    const size_t C = data_.labels.size();
    std::vector<std::vector<int64_t>> m(C, std::vector<int64_t>(C, 0));
    for (const Scored& e : s) ++m[static_cast<size_t>(e.label)][static_cast<size_t>(e.predicted)];
    size_t width = 5;
    for (const auto& l : data_.labels) width = std::max(width, l.size());
    std::string out = fmt::format("  {:<{}}  {:>8}  {:>7}  {:>9}\n", "class", width, "examples", "recall", "precision");
    for (size_t c = 0; c < C; ++c) {
      int64_t row = 0, col = 0;
      for (size_t k = 0; k < C; ++k) {
        row += m[c][k];
        col += m[k][c];
      }
      out += fmt::format("  {:<{}}  {:>8}  {:>6.1f}%  {:>8.1f}%\n", data_.labels[c], width, row,
                         row ? 100.0 * static_cast<double>(m[c][c]) / static_cast<double>(row) : 0.0,
                         col ? 100.0 * static_cast<double>(m[c][c]) / static_cast<double>(col) : 0.0);
    }
    std::vector<std::tuple<int64_t, size_t, size_t>> confusions;
    for (size_t a = 0; a < C; ++a)
      for (size_t b = 0; b < C; ++b)
        if (a != b && m[a][b] > 0) confusions.emplace_back(-m[a][b], a, b);
    std::sort(confusions.begin(), confusions.end());
    if (confusions.empty()) {
      out += "  no confusions\n";
    } else {
      out += "  most confused (true -> predicted):";
      const size_t shown = std::min(confusions.size(), static_cast<size_t>(std::max(samples, 1)));
      for (size_t i = 0; i < shown; ++i) {
        const auto& [neg, a, b] = confusions[i];
        out += fmt::format("{} {} -> {} ({})", i ? "," : "", data_.labels[a], data_.labels[b], -neg);
      }
      out += "\n";
    }
    return out;
  }

  void save(Checkpoint& c) const override {
    c.taskState = taskStateJson({"classification", data_.vocab, data_.labels});
  }
  void checkResume(const Checkpoint& c) const override {
    const TaskState s = parseTaskState(c.taskState, "the checkpoint");
    if (s.task != "classification" || !(s.vocab == data_.vocab) || s.labels != data_.labels)
      throw std::runtime_error(
          "the data no longer gives the checkpoint's vocabulary and labels (was the file changed?)");
  }

 private:
  std::vector<Scored> score(ValidationContext& ctx) {
    const auto& split = data_.valid;
    const size_t n = ctx.limit > 0 ? std::min(split.size(), static_cast<size_t>(ctx.limit)) : split.size();
    std::vector<Scored> out;
    if (n == 0) return out;
    data::BatchingOptions bo;
    bo.batchSize = batchSize_;
    bo.numBuckets = 1;
    bo.dropPartial = false;
    const data::ClassifyBatcher valid(
        std::vector<data::LabeledIds>(split.begin(), split.begin() + static_cast<std::ptrdiff_t>(n)), bo);
    for (const data::BatchPlan& plan : valid.planEpoch(ctx.seed, 0)) {
      const FieldBatch b = valid.makeBatch(plan);
      const std::map<std::string, Tensor> o = ctx.forward(b);
      auto it = o.find("logits");
      if (it == o.end())
        throw std::runtime_error(
            "the classification task scores the graph's output `logits` [batch, classes], and the "
            "graph has no output of that name: add `output logits = ...`");
      const Tensor& logits = it->second;
      const int64_t C = static_cast<int64_t>(data_.labels.size());
      if (logits.shape().size() != 2 || logits.shape()[1] != C)
        throw std::runtime_error(fmt::format("the output logits is {}, not [batch, {}] (the classes)",
                                             logits.type().str(), C));
      const Tensor& labels = b.fields.at("labels");
      for (int64_t r = 0; r < b.rows; ++r) {
        Scored e;
        e.label = labels.getI(r);
        double best = -INFINITY, mx = -INFINITY;
        for (int64_t c = 0; c < C; ++c) mx = std::max(mx, logits.getF(r * C + c));
        double z = 0;
        for (int64_t c = 0; c < C; ++c) {
          const double x = logits.getF(r * C + c);
          z += std::exp(x - mx);
          if (x > best) {
            best = x;
            e.predicted = c;
          }
        }
        e.nll = -(logits.getF(r * C + e.label) - mx - std::log(z));
        out.push_back(e);
      }
    }
    return out;
  }

  data::ClassifyData data_;
  int64_t batchSize_ = 0;
};

}  // namespace

std::unique_ptr<Task> makeClassificationTask(const DataSpec& spec, const BatchOptions& batching,
                                             const Checkpoint* stored) {
  return std::make_unique<ClassifyTask>(spec, batching, stored);
}

}  // namespace tgc::train
