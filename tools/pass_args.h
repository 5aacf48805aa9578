// The pass manager's instrumentation flags, the same on every command that runs a pipeline
// (tgc opt, compile, run, train): --print-after-all, --print-after, --print-changed,
// --dump-dir, --stop-after, --time-passes.
#pragma once

#include <CLI/CLI.hpp>

#include "passes/pass_manager.h"

namespace tgc::cli {

void addPassManagerArgs(CLI::App* cmd, PassManagerOptions& pm);

}  // namespace tgc::cli
