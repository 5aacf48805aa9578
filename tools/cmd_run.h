// What the files of `tgc run` share: its options, and the inputs a run reads from a
// safetensors file or generates from a seed (cmd_run_inputs.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace tgc::cli {

struct RunOptions {
  std::string file;
  std::string inputs;
  std::string outputs;
  uint64_t seed = 0;
  CLI::Option* seed_opt = nullptr;  // given or not
  std::string int_range = "0,10";
  std::string dist = "uniform";
  bool print = false;
  bool f64 = false;
  std::string backend = "interp";
  int repeat = 1;
  CLI::Option* repeat_opt = nullptr;
  std::string timing_json;
  bool no_cache = false;
  bool profile = false;
  int profile_top = 25;  // --profile-top N: how many launches the profile lists
};

// Every input of g: from the --inputs file, checked against its declared type, and those
// missing from it generated from --random-inputs SEED (kFooter in cmd_run.cpp says how).
// Throws std::runtime_error for mistyped inputs, or missing ones without a seed.
std::map<std::string, Tensor> gatherInputs(const Graph& g, const RunOptions& o);

// --int-range LO,HI as {LO, HI}; throws std::runtime_error unless LO < HI are integers.
std::pair<int64_t, int64_t> parseIntRange(const std::string& s);

}  // namespace tgc::cli
