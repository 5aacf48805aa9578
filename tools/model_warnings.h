// Warnings about a model file (docs/language.md, "Warnings"): what the front end found while
// lowering, and passes/lint.h on the lowered graph, printed to stderr with file:line:col, the
// source line, a one-line fix and the calls that led there. --Werror makes them errors and
// --no-warn=NAME turns one off; `tgc compile`, `train` and `gradcheck` take both.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "frontend/frontend.h"

namespace tgc::cli {

struct WarningArgs {
  bool werror = false;
  std::vector<std::string> off;  // names given to --no-warn
};

void addWarningArgs(CLI::App* cmd, WarningArgs& a);

// Every warning of `m` that is not turned off, notes included, in the order found.
std::vector<ModelWarning> modelWarnings(const CompiledModel& m, const WarningArgs& a);

// Prints them to stderr; with --Werror and at least one warning (not a note), throws
// std::runtime_error after printing.
void reportWarnings(const CompiledModel& m, const WarningArgs& a);

}  // namespace tgc::cli
