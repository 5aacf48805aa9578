#include "frontend/source_map.h"

#include <fmt/format.h>

#include "ir/diagnostic.h"

namespace tgc {

int SourceMap::addFile(std::string path, std::string text) {
  files_.push_back(File{std::move(path), std::move(text)});
  return static_cast<int>(files_.size() - 1);
}

const NodeOrigin* SourceMap::origin(const Node* n) const {
  auto it = origins_.find(n);
  return it == origins_.end() ? nullptr : &it->second;
}

std::string SourceMap::where(const SourcePos& p) const {
  if (!p.valid() || static_cast<size_t>(p.file) >= files_.size()) return "<unknown>";
  return fmt::format("{}:{}:{}", files_[static_cast<size_t>(p.file)].path, p.line, p.col);
}

std::string SourceMap::render(const SourcePos& p, std::string_view severity,
                              std::string_view message) const {
  if (!p.valid() || static_cast<size_t>(p.file) >= files_.size())
    return fmt::format("<unknown>: {}: {}", severity, message);
  const File& f = files_[static_cast<size_t>(p.file)];
  return formatDiagnostic(f.path, f.text, SourceLoc{p.line, p.col}, severity, message);
}

std::string renderWarning(const SourceMap& sources, const ModelWarning& w) {
  std::string s = sources.render(w.at, w.note ? "note" : "warning",
                                 fmt::format("{} [-W{}]", w.message, w.name));
  if (!w.fix.empty()) s += fmt::format("\n  fix: {}", w.fix);
  // The innermost call first, as a compiler's "in a call from" chain.
  for (auto it = w.calls.rbegin(); it != w.calls.rend(); ++it)
    s += "\n" + sources.render(*it, "note", "in a call from here");
  return s;
}

}  // namespace tgc
