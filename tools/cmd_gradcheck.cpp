// `tgc gradcheck`: the model's generated gradients against central finite differences, both
// evaluated in float64 (by the reference interpreter, or compiled for the CPU with
// --backend cpu), on a random batch with padding.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <random>

#include "frontend/frontend.h"
#include "ir/tensor.h"
#include "runtime/executable.h"
#include "runtime/gradcheck.h"
#include "tools/commands.h"
#include "tools/model_args.h"
#include "tools/model_warnings.h"

namespace tgc::cli {
namespace {

struct GradcheckArgs {
  ModelArgs model;
  WarningArgs warnings;
  int samples = 3;
  uint64_t seed = 1;
  // A model's loss sums many terms, so f(p+h) - f(p-h) carries round-off around 1e-10;
  // h = 1e-5 and comparing gradients below 1e-5 absolutely keep that noise under 1e-5
  // relative, while the truncation error (h^2 |f'''| / 6) stays far smaller.
  double step = 1e-5;
  double abs_floor = 1e-5;
  double tolerance = 1e-4;
  std::string backend = "interp";
  bool no_cache = false;
};

// Token inputs get ids in [1, V) with the last positions of odd rows set to the padding id 0,
// so masks are exercised; V is the smallest embedding table an input indexes.
std::map<std::string, Tensor> randomBatch(const Graph& g, uint64_t seed) {
  int64_t vocab = 0;
  for (const auto& n : g.nodes())
    if (n->op() == OpKind::Gather) {
      int64_t rows = n->operand(0)->type().shape[0];
      vocab = vocab ? std::min(vocab, rows) : rows;
    }
  if (vocab < 2) vocab = 16;
  std::mt19937_64 rng(seed);
  std::map<std::string, Tensor> in;
  for (Node* n : g.inputs()) {
    if (n->attrString("role") != "data") continue;
    const Value* v = n->result();
    Tensor t(v->type());
    if (v->name() == "step") {
      t.setI(0, 1);
    } else if (v->type().rank() == 0) {
      t.setI(0, static_cast<int64_t>(rng() % 1000));
    } else if (isInteger(v->type().dtype)) {
      const Shape& s = v->type().shape;
      int64_t cols = s.back(), rows = t.numel() / std::max<int64_t>(cols, 1);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          bool pad = r % 2 == 1 && c >= cols - std::max<int64_t>(1, cols / 3) && c > 0;
          t.setI(r * cols + c, pad ? 0 : 1 + static_cast<int64_t>(rng() % (vocab - 1)));
        }
    } else {
      std::normal_distribution<double> d;
      for (int64_t i = 0; i < t.numel(); ++i) t.setF(i, d(rng));
    }
    in.emplace(v->name(), std::move(t));
  }
  return in;
}

int run(const GradcheckArgs& a) {
  ModelOptions opts = toModelOptions(a.model);
  CompiledModel m = compileModelFile(a.model.model, opts);
  // Small dims unless given: the interpreter is slow and the check runs the model many times.
  bool shrunk = false;
  for (const auto& [dim, size] : m.graph->dims()) {
    bool given = std::any_of(opts.dims.begin(), opts.dims.end(), [&](auto& p) { return p.first == dim; });
    if (!given) {
      opts.dims.emplace_back(dim, dim == "B" ? 2 : 5);
      shrunk = true;
    }
  }
  if (shrunk) m = compileModelFile(a.model.model, opts);
  reportWarnings(m, a.warnings);
  if (m.loss_output < 0)
    throw std::runtime_error(fmt::format("graph @{} has no output named loss", m.graph->name()));
  // The loss first: gradCheck differentiates outputs[0].
  std::vector<Value*> outs{m.graph->outputs()[m.loss_output]};
  m.graph->setOutputs(outs);
  m.graph->removeDeadNodes();

  std::map<std::string, Tensor> inputs = randomBatch(*m.graph, a.seed);
  std::vector<std::string> wrt;
  for (auto& [name, t] : initParams(m.params, a.seed)) {
    wrt.push_back(name);
    inputs.insert_or_assign(name, std::move(t));
  }
  std::sort(wrt.begin(), wrt.end(), [&](const std::string& x, const std::string& y) {
    auto pos = [&](const std::string& n) {
      return std::find_if(m.params.begin(), m.params.end(), [&](auto& p) { return p.name == n; }) -
             m.params.begin();
    };
    return pos(x) < pos(y);
  });
  fmt::print("gradcheck @{} {}: {} parameter tensors, {} entries each, h = {:g}, float64{}\n",
             m.graph->name(), a.model.model, wrt.size(), a.samples, a.step,
             a.backend == "cpu" ? ", compiled for the CPU" : "");
  GradCheckOptions gc{.samples_per_tensor = a.samples, .step = a.step, .seed = a.seed,
                      .abs_floor = a.abs_floor};
  if (a.backend == "cpu") {
    runtime::ExecOptions eo = runtime::ExecOptions::fromEnv();
    if (a.no_cache) eo.useCache = false;
    gc.backend = runtime::cpuF64Backend(eo);
  }
  auto results = gradCheck(*m.graph, inputs, wrt, gc);
  double worst = 0;
  std::string worstName;
  fmt::print("{:<52} {:>8} {:>12} {:>12}\n", "parameter", "checked", "max rel err", "max abs err");
  for (const auto& r : results) {
    fmt::print("{:<52} {:>8} {:>12.3e} {:>12.3e}\n", r.name, r.checked, r.max_rel_error,
               r.max_abs_error);
    if (r.max_rel_error >= worst) {
      worst = r.max_rel_error;
      worstName = r.name;
    }
  }
  // All zeros compare equal: a loss blind to the parameters would pass any gradient rule.
  const std::string nothing = gradCheckProvedNothing(results);
  if (!nothing.empty()) {
    fmt::print("worst relative error {:.3e} ({}): FAIL: {}\n", worst, worstName, nothing);
    return 1;
  }
  bool ok = worst <= a.tolerance;
  fmt::print("worst relative error {:.3e} ({}): {} (tolerance {:g})\n", worst, worstName,
             ok ? "PASS" : "FAIL", a.tolerance);
  return ok ? 0 : 1;
}

}  // namespace

void registerGradcheck(CLI::App& app) {
  auto args = std::make_shared<GradcheckArgs>();
  CLI::App* cmd = app.add_subcommand(
      "gradcheck",
      "Check a model's generated gradients against central finite differences in float64");
  addModelArgs(cmd, args->model);
  addWarningArgs(cmd, args->warnings);
  cmd->add_option("--samples", args->samples, "Entries checked per parameter tensor")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", args->seed, "Seed for parameters, the batch and the sampled entries");
  cmd->add_option("--step", args->step, "Finite-difference step h")->check(CLI::PositiveNumber);
  cmd->add_option("--abs-floor", args->abs_floor,
                  "Gradients below this size are compared absolutely, not relatively");
  cmd->add_option("--tolerance", args->tolerance, "Largest relative error that passes");
  cmd->add_option("--backend", args->backend,
                  "interp (the reference interpreter) or cpu (the graphs compiled for this CPU, "
                  "in float64)")
      ->check(CLI::IsMember({"interp", "cpu"}))
      ->capture_default_str();
  cmd->add_flag("--no-cache", args->no_cache,
                "cpu backend: compile every kernel, neither reading nor writing the kernel cache");
  cmd->footer(R"(
The check compiles the model's train graph (dims default to B=2 and 5 for the others;
override with --dim), initializes its parameters from --seed, builds a random batch whose odd rows end in
padding, and compares d loss / d parameter from the generated backward graph with
(loss(p + h) - loss(p - h)) / 2h on sampled entries of every parameter tensor. Dropout
masks depend only on (seed, step), so the check is valid with dropout on.

With --backend cpu both graphs (loss with gradients, and the loss alone for the finite
differences) are promoted to float64 and compiled once for the CPU; every evaluation then
runs compiled code.

Examples:
  tgc gradcheck models/transformer.tg --preset tiny --set src_vocab=24 --set tgt_vocab=24
  tgc gradcheck models/transformer.tg --preset tiny --set src_vocab=24 --set tgt_vocab=24 --backend cpu

Exit status: 0 when every error is within --tolerance, 1 otherwise or on error. A check that
proved nothing fails too: when every checked gradient and every finite difference is exactly
0 (the loss does not depend on the parameters on this batch), the verdict is
"FAIL: gradcheck proved nothing: ...".)");
  cmd->callback([args] {
    int rc = run(*args);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tgc::cli
