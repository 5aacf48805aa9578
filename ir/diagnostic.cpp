#include "ir/diagnostic.h"

#include <fmt/format.h>

namespace tgc {

std::string formatDiagnostic(std::string_view file, std::string_view source, SourceLoc loc,
                             std::string_view severity, std::string_view message) {
  std::string out = fmt::format("{}:{}:{}: {}: {}", file, loc.line, loc.col, severity, message);
  // Find the line's text.
  size_t start = 0;
  for (int l = 1; l < loc.line && start != std::string_view::npos; ++l) {
    start = source.find('\n', start);
    if (start != std::string_view::npos) ++start;
  }
  if (start == std::string_view::npos || start > source.size()) return out;
  size_t end = source.find('\n', start);
  std::string_view line = source.substr(start, end == std::string_view::npos ? end : end - start);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::string caret;
  for (int i = 1; i < loc.col && static_cast<size_t>(i - 1) < line.size(); ++i)
    caret += line[i - 1] == '\t' ? '\t' : ' ';
  out += fmt::format("\n{}\n{}^", line, caret);
  return out;
}

}  // namespace tgc
