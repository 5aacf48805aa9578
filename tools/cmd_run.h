// What the files of `tgc run` share: its options, the inputs a run reads from a safetensors
// file or generates from a seed (cmd_run_inputs.cpp), and the graph and parameters of a
// checkpoint's model (cmd_run_checkpoint.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "passes/pass_manager.h"

namespace tgc::cli {

struct RunOptions {
  std::string file;        // a Graph IR file, or:
  std::string checkpoint;  // --checkpoint DIR, with --graph NAME and --dim N=V
  std::string graph;
  std::vector<std::string> dims;
  std::string inputs;
  std::string outputs;
  uint64_t seed = 0;
  CLI::Option* seed_opt = nullptr;  // given or not
  std::string int_range = "0,10";
  std::string dist = "uniform";
  bool print = false;
  bool f64 = false;
  std::string quantize;    // --quantize int8: the quantize pass before compiling
  std::string passes;      // empty: the backend's own pipeline (runPipelineText)
  bool print_pipeline = false;
  PassManagerOptions pm;
  std::string backend = "interp";
  int repeat = 1;
  CLI::Option* repeat_opt = nullptr;
  std::string timing_json;
  bool no_cache = false;
  bool profile = false;
  int profile_top = 25;  // --profile-top N: how many launches the profile lists
};

// Every input of g: those in `fixed` from there (a checkpoint's parameters), the others from
// the --inputs file, checked against their declared type, and those missing from it generated
// from --random-inputs SEED (kFooter in cmd_run.cpp says how). Throws std::runtime_error for
// mistyped inputs, or missing ones without a seed.
std::map<std::string, Tensor> gatherInputs(const Graph& g, const RunOptions& o,
                                           std::map<std::string, Tensor> fixed = {});

// --checkpoint DIR --graph NAME: the graph compiled from the checkpoint's model file with its
// preset and --set entries and the --dim entries, and the checkpoint's tensor (its moving
// average where kept) for every input with role "param". Throws naming the checkpoint file
// and every parameter it lacks or holds with another type.
struct CheckpointGraph {
  std::unique_ptr<Graph> graph;
  std::map<std::string, Tensor> params;
  std::string source;  // the checkpoint file read
};
CheckpointGraph checkpointGraph(const RunOptions& o);

// --int-range LO,HI as {LO, HI}; throws std::runtime_error unless LO < HI are integers.
std::pair<int64_t, int64_t> parseIntRange(const std::string& s);

}  // namespace tgc::cli
