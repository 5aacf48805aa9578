// Recursive-descent parser for the model language. Errors are reported to Diags and the
// parser recovers at the next statement or item, so one run shows several problems.
#pragma once

#include <string_view>

#include "frontend/ast.h"
#include "frontend/diag.h"

namespace tgc::fe {

// Deepest nesting of blocks and expressions accepted (deeper input is an error, not a crash).
inline constexpr int kMaxNesting = 200;

FileAst parseFile(std::string_view text, int file, Diags& diags);

}  // namespace tgc::fe
