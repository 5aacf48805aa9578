// The options every command that reads a model file shares: --graph, --preset, --set, --dim, --lib.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "frontend/frontend.h"
#include "ir/dtype.h"

namespace tgc::cli {

struct ModelArgs {
  std::string model;
  std::string graph;
  std::string preset;
  std::vector<std::string> sets;
  std::vector<std::string> dims;
  std::vector<std::string> libs;
};

// Adds MODEL (positional, required) and the model options to `cmd`.
void addModelArgs(CLI::App* cmd, ModelArgs& a);
// Adds --precision fp32|bf16 (matmul compute precision, passes/mixed_precision.cpp) to `cmd`,
// stored in `dtype` as f32 or bf16.
CLI::Option* addPrecisionOption(CLI::App* cmd, DType& dtype);
// Checks NAME=VALUE forms and integers; throws std::invalid_argument with the flag named.
ModelOptions toModelOptions(const ModelArgs& a);

}  // namespace tgc::cli
