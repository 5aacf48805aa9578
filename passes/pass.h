// A pass is a function over a Graph that reports whether it changed anything. Passes are
// found by name in one registry, so pipelines can be written as text ("cse,dce").
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "passes/optimizer_config.h"

namespace tgc {

// Settings and shared state a pass may read. One context lives for a whole pipeline.
struct PassContext {
  // constant-fold materializes a constant only when it is a splat or has at most this many
  // elements, so folding never balloons a graph; operands it evaluates are capped at 16x.
  int64_t fold_limit = 4096;
  // What the adamw pass builds: schedule, moments, clipping (passes/train_step.h).
  OptimizerConfig optimizer{};
};

// Returns true when the graph changed. A pass may throw IRError for a graph it cannot
// handle; the pass manager reports it with the pass's name.
using PassFn = std::function<bool(Graph&, PassContext&)>;

struct PassInfo {
  std::string name;         // "constant-fold"
  std::string description;  // one line, shown by `tgc opt --list-passes`
  PassFn run;
};

// Every registered pass, sorted by name: the built-in table (registry.cpp) plus any added
// with registerPass.
std::vector<const PassInfo*> allPasses();
// nullptr when no pass has that name.
const PassInfo* findPass(std::string_view name);
// Adds a pass at run time (plugins, tests); replaces a pass of the same name.
void registerPass(PassInfo info);
// "canonicalize, constant-fold, cse, dce": for error messages.
std::string knownPassNames();

}  // namespace tgc
