// The model language front end: reads a .tg file (and its imports) and lowers one of its
// graphs to Graph IR. See docs/language.md for the language.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "frontend/source_map.h"
#include "ir/graph.h"
#include "ir/tensor.h"

namespace tgc {

struct ModelOptions {
  std::string graph{};   // empty: "train" if the file has one, else the first graph
  std::string preset{};  // empty: the config defaults
  std::vector<std::pair<std::string, std::string>> sets{};  // --set key=value
  std::vector<std::pair<std::string, int64_t>> dims{};      // --dim N=value
  // Searched for imports after the importing file's own folder, before the default library
  // folders (defaultLibraryPaths()).
  std::vector<std::string> lib_paths{};
  // Reads a file; nullopt when it does not exist. Defaults to the file system. Tests and the
  // fuzzer supply in-memory files.
  std::function<std::optional<std::string>(const std::string&)> read_file{};
  // Lower a `training` graph for evaluation: dropout is the identity (no masks, no scaling),
  // as in an inference graph. Everything else stays: the graph keeps its inputs seed and
  // step, its loss output and its parameters, so a trainer can run the same signature for
  // validation. The compile-time bool `training` is still true.
  bool inference = false;
};

// One entry of a `bind` declaration: `input tokens = tokens`, `config vocab = vocab`,
// `dim T = length`, or (tensors task) `dim F = x.shape[2]`.
struct BindingEntry {
  std::string name;  // the graph input, config entry or dim that is fed
  std::string from;  // the task's field, value or dim; for FIELD.shape[i]: FIELD
  int axis = -1;     // FIELD.shape[i]: i; else -1
  std::string loc;   // "file:line:col" of the entry, for run-time errors
};

// `bind TASK to GRAPH { ... }`: which fields of a task (frontend/tasks.h) feed which inputs
// of a graph, which task values set config entries, which task dims set named dims.
struct DataBinding {
  std::string task;   // translation | lm | classification | tensors
  std::string graph;  // the graph it feeds
  std::string loc;    // "file:line:col" of `bind`
  std::vector<BindingEntry> inputs, configs, dims;  // each in source order
};

// How a parameter gets its initial values (`param w: f32[4, 4] = normal(0.02)`).
struct ParamInit {
  std::string name;  // the scoped name: encoder.layers.3.self_attn.w_q.weight
  std::string kind;  // xavier_uniform, xavier_normal, normal, uniform, zeros, ones, constant
  double arg = 0;    // gain (xavier), std (normal), bound (uniform), value (constant)
  TensorType type;
};

using ConfigValue = std::variant<int64_t, double, bool, std::string, DType>;
std::string configValueToString(const ConfigValue& v);

struct CompiledModel {
  std::unique_ptr<Graph> graph;
  std::vector<ParamInit> params;          // one per input with role "param", in graph order
  std::vector<std::string> output_names;  // the names given by `output name = ...`
  int loss_output = -1;                   // index of the output named "loss", or -1
  bool training = false;                  // a training graph: inputs seed and step, dropout on
  std::vector<std::pair<std::string, ConfigValue>> config;  // resolved, in declaration order
  std::vector<std::string> graph_names;   // every graph of the program, in order
  // Every `bind` of the program, in source order (the main file's first, then the imported
  // files'). Each names an existing task and graph; the bindings of the compiled graph have
  // also been checked against it (see docs/language.md, "Data bindings").
  std::vector<DataBinding> bindings;
  // The model's files and where each node of `graph` was made (for warnings and reports).
  std::shared_ptr<const SourceMap> sources;
  // What the front end found while lowering: values computed and never used, dropout where
  // it is the identity (docs/language.md, "Warnings"). passes/lint.h finds the rest.
  std::vector<ModelWarning> warnings;
};

// Compiles one graph of a model file. Throws ParseError whose message holds every
// diagnostic ("file:line:col: error: ..." with the line and a caret).
CompiledModel compileModelFile(const std::string& path, const ModelOptions& opts = {});
// The same for source text held in memory; `filename` is used in diagnostics and to
// resolve relative imports.
CompiledModel compileModelSource(const std::string& text, const std::string& filename,
                                 const ModelOptions& opts = {});

// The library folders searched after the importing file's folder: $TGC_LIB_PATH (colon
// separated) if set, then <source tree>/models/lib.
std::vector<std::string> defaultLibraryPaths();

// Initial values of parameters, deterministic in (seed, parameter name): the same seed gives
// the same tensors whatever the parameter order. Xavier: bound = gain*sqrt(6/(fan_in+fan_out))
// (uniform), std = gain*sqrt(2/(fan_in+fan_out)) (normal), with fan_in = shape[-2] and
// fan_out = shape[-1] times the product of the leading dims.
Tensor initParam(const ParamInit& p, uint64_t seed);
std::map<std::string, Tensor> initParams(const std::vector<ParamInit>& params, uint64_t seed);

}  // namespace tgc
