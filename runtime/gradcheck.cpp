#include "runtime/gradcheck.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <unordered_map>

#include "ir/interpreter.h"
#include "passes/autodiff.h"

namespace tgc {

GraphBackend interpreterF64Backend() {
  return [](const Graph& g) -> GraphRunner {
    // The runner outlives the caller's graph: keep a copy.
    std::shared_ptr<const Graph> graph = g.clone();
    return [graph](const std::map<std::string, Tensor>& inputs) {
      return Interpreter(InterpreterOptions{.promote_to_f64 = true}).run(*graph, inputs);
    };
  };
}

std::unique_ptr<Graph> promoteToF64(const Graph& g) {
  auto widen = [](DType d) { return isFloat(d) ? DType::f64 : d; };
  auto out = std::make_unique<Graph>(g.name());
  out->setDims(g.dims());
  std::unordered_map<const Value*, Value*> map;
  for (const auto& n : g.nodes()) {
    std::vector<Value*> operands;
    for (const Value* v : n->operands()) operands.push_back(map.at(v));
    AttrMap attrs = n->attrs();
    for (auto& [name, attr] : attrs)
      if (auto* d = std::get_if<DType>(&attr)) *d = widen(*d);
    std::vector<std::string> names;
    std::vector<TensorType> types;
    for (size_t i = 0; i < n->numResults(); ++i) {
      names.push_back(n->result(i)->name());
      types.push_back({widen(n->result(i)->type().dtype), n->result(i)->type().shape});
    }
    Node* m = out->add(n->op(), std::move(operands), std::move(attrs), std::move(names),
                       std::move(types));
    for (size_t i = 0; i < n->numResults(); ++i) map[n->result(i)] = m->result(i);
  }
  std::vector<Value*> outs;
  for (const Value* v : g.outputs()) outs.push_back(map.at(v));
  out->setOutputs(std::move(outs));
  return out;
}

Tensor toF64(const Tensor& t) {
  if (!isFloat(t.dtype()) || t.dtype() == DType::f64) return t;
  Tensor r(TensorType{DType::f64, t.shape()});
  for (int64_t i = 0; i < t.numel(); ++i) r.setF(i, t.getF(i));
  return r;
}

std::vector<GradCheckResult> gradCheck(const Graph& g, const std::map<std::string, Tensor>& inputs,
                                       const std::vector<std::string>& wrt,
                                       const GradCheckOptions& opts) {
  if (g.outputs().empty()) throw IRError("gradcheck: the graph has no outputs (loss first)");
  std::map<std::string, Tensor> in64;
  for (const auto& [k, v] : inputs) in64.emplace(k, toF64(v));

  // Analytic: the same graph with its gradients appended, run once in float64.
  auto withGrads = g.clone();
  std::vector<Value*> targets;
  for (const auto& name : wrt) {
    Value* v = withGrads->findValue(name);
    if (!v) throw IRError(fmt::format("gradcheck: no value named %{}", name));
    targets.push_back(v);
  }
  Value* loss = withGrads->outputs()[0];
  std::vector<Value*> grads = appendGradients(*withGrads, loss, targets);
  std::vector<Value*> outs{loss};
  outs.insert(outs.end(), grads.begin(), grads.end());
  withGrads->setOutputs(outs);
  withGrads->removeDeadNodes();

  const GraphBackend backend = opts.backend ? opts.backend : interpreterF64Backend();
  std::vector<Tensor> analytic = backend(*withGrads)(in64);

  // Numeric: perturb sampled entries of each input and re-run the forward graph.
  auto forward = g.clone();
  forward->setOutputs({forward->outputs()[0]});
  forward->removeDeadNodes();
  GraphRunner runForward = backend(*forward);
  auto lossAt = [&](const std::map<std::string, Tensor>& in) { return runForward(in)[0].getF(0); };
  std::mt19937_64 rng(opts.seed);
  std::vector<GradCheckResult> results;
  for (size_t w = 0; w < wrt.size(); ++w) {
    auto it = in64.find(wrt[w]);
    if (it == in64.end())
      throw IRError(fmt::format("gradcheck: %{} must be a graph input given a value", wrt[w]));
    const Tensor& grad = analytic[w + 1];
    int64_t n = it->second.numel();
    std::vector<int64_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(std::min<int64_t>(n, opts.samples_per_tensor));
    GradCheckResult r{wrt[w]};
    for (int64_t i : idx) {
      auto perturbed = in64;
      Tensor& t = perturbed.at(wrt[w]);
      double x0 = t.getF(i);
      t.setF(i, x0 + opts.step);
      double up = lossAt(perturbed);
      t.setF(i, x0 - opts.step);
      double down = lossAt(perturbed);
      double numeric = (up - down) / (2 * opts.step);
      double a = grad.getF(i);
      double abs = std::fabs(a - numeric);
      double rel = abs / std::max({std::fabs(a), std::fabs(numeric), opts.abs_floor});
      if (std::isnan(rel)) rel = INFINITY;
      ++r.checked;
      r.max_abs_analytic = std::max(r.max_abs_analytic, std::fabs(a));
      r.max_abs_numeric = std::max(r.max_abs_numeric, std::fabs(numeric));
      if (std::isnan(a) || std::isnan(numeric)) r.max_abs_analytic = INFINITY;  // not vacuous
      r.max_abs_error = std::max(r.max_abs_error, abs);
      if (rel >= r.max_rel_error) {
        r.max_rel_error = rel;
        r.worst_analytic = a;
        r.worst_numeric = numeric;
      }
    }
    results.push_back(r);
  }
  return results;
}

std::string gradCheckProvedNothing(const std::vector<GradCheckResult>& results) {
  int64_t entries = 0;
  for (const auto& r : results) {
    if (r.max_abs_analytic != 0 || r.max_abs_numeric != 0) return {};
    entries += r.checked;
  }
  if (entries == 0)
    return fmt::format("gradcheck proved nothing: no entry was checked ({} tensors)",
                       results.size());
  return fmt::format("gradcheck proved nothing: every checked gradient and every finite "
                     "difference is 0 ({} entries of {} tensors); the loss does not depend on "
                     "the checked values on this batch",
                     entries, results.size());
}

}  // namespace tgc
