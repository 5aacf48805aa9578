// `tgc run --checkpoint DIR --graph NAME`: a graph of a checkpoint's model, compiled from the
// model file with the checkpoint's preset and --set entries (the vocabulary sizes among
// them) and the run's --dim, and the checkpoint's parameters for its "param" inputs.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "frontend/frontend.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/spec.h"
#include "tools/cmd_run.h"
#include "tools/model_args.h"

namespace tgc::cli {

CheckpointGraph checkpointGraph(const RunOptions& o) {
  std::string used;
  train::Checkpoint c = train::loadLatestCheckpoint(o.checkpoint, &used);
  const train::ModelSpec spec = train::ModelSpec::fromJson(c.model);
  ModelArgs dimArgs;
  dimArgs.dims = o.dims;
  const auto dims = toModelOptions(dimArgs).dims;  // checks NAME=VALUE
  if (o.graph.empty()) {
    const CompiledModel any = compileModelFile(spec.path, spec.options(""));
    std::string names;
    for (const std::string& n : any.graph_names) names += (names.empty() ? "" : ", ") + n;
    throw std::runtime_error(fmt::format(
        "--checkpoint needs --graph NAME: one of the graphs of {}: {}", spec.path, names));
  }
  CompiledModel m = compileModelFile(spec.path, spec.options(o.graph, dims));

  // Every parameter the graph reads, from the checkpoint (moving averages where kept).
  const std::map<std::string, Tensor> trained = c.parameters();
  CheckpointGraph out;
  std::vector<std::string> missing, mistyped;
  for (Node* in : m.graph->inputs()) {
    if (in->attrString("role") != "param") continue;
    const Value& v = *in->result();
    auto it = trained.find(v.name());
    if (it == trained.end()) {
      missing.push_back(fmt::format("%{} ({})", v.name(), v.type().str()));
      continue;
    }
    const Tensor& t = it->second;
    const bool ok = t.type() == v.type() || (o.f64 && isFloat(t.dtype()) &&
                                             isFloat(v.type().dtype) && t.shape() == v.type().shape);
    if (!ok)
      mistyped.push_back(fmt::format("%{}: graph @{} declares {}, the checkpoint holds {}",
                                     v.name(), m.graph->name(), v.type().str(), t.type().str()));
    else
      out.params.emplace(v.name(), t);
  }
  if (!missing.empty())
    throw std::runtime_error(fmt::format(
        "{}: the checkpoint has no parameter{} {} that graph @{} of {} reads", used,
        missing.size() == 1 ? "" : "s", fmt::join(missing, ", "), m.graph->name(), spec.path));
  if (!mistyped.empty())
    throw std::runtime_error(fmt::format("{}: parameters of another shape: {}", used,
                                         fmt::join(mistyped, "; ")));
  out.graph = std::move(m.graph);
  out.source = used;
  return out;
}

}  // namespace tgc::cli
