// A static pass over the syntax tree, before anything is evaluated: every name must be
// declared somewhere in scope (a local, a module member, a global or a builtin) and
// assignments must target declared names. It finds typos in code that a given graph never
// reaches, and reports them all at once.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "frontend/ast.h"
#include "frontend/diag.h"

namespace tgc::fe {

void checkNames(const std::vector<const FileAst*>& files, const std::set<std::string>& globals,
                const std::vector<std::string>& builtins, Diags& diags);

}  // namespace tgc::fe
