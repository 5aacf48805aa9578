// Errors that point into a source file: "file:line:col: error: message", the line, a caret.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace tgc {

struct SourceLoc {
  int line = 1;  // 1-based
  int col = 1;   // 1-based, in bytes
};

// Formats one diagnostic with the source line and a caret under the column.
std::string formatDiagnostic(std::string_view file, std::string_view source, SourceLoc loc,
                             std::string_view severity, std::string_view message);

// An input file was malformed; what() is the full formatted diagnostic (possibly several).
struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace tgc
