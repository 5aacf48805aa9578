// Data bindings (`bind TASK to GRAPH { ... }`): resolving them and checking them against the
// graph they feed. The task table is frontend/tasks.h; the rules are in docs/language.md,
// "Data bindings: `bind`".
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "frontend/ast.h"
#include "frontend/diag.h"
#include "frontend/frontend.h"
#include "ir/graph.h"

namespace tgc::fe {

// Every binding of `files` (in that order) as the API describes it. Reports bindings of
// unknown tasks or graphs, and a task bound twice; `graphs` lists the program's graphs.
std::vector<DataBinding> resolveBindings(const std::vector<const FileAst*>& files,
                                         const std::vector<std::string>& graphs, Diags& diags);

// What the checks need to know about the program and the lowered graph.
struct BindTarget {
  const GraphDecl* decl = nullptr;  // the compiled graph's declaration
  const Graph* graph = nullptr;     // its lowering (input types)
  std::set<std::string> dims;       // the program's declared dims
  const std::vector<std::pair<std::string, ConfigValue>>* config = nullptr;
};

// Checks every binding of `files` whose graph is the target's against it.
void checkBindings(const std::vector<const FileAst*>& files, const BindTarget& target,
                   Diags& diags);

}  // namespace tgc::fe
