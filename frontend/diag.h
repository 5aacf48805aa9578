// Source files and the diagnostics collected while reading and lowering them.
#pragma once

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "frontend/ast.h"

namespace tgc::fe {

struct SourceFile {
  std::string path;  // as shown in diagnostics
  std::string text;
};

// Collects errors (each "file:line:col: error: ..." with the line and a caret) so that one
// run reports several independent problems. Identical errors (same place and message, e.g.
// from a layer body lowered six times) are reported once.
class Diags {
 public:
  static constexpr size_t kMaxErrors = 40;

  int addFile(std::string path, std::string text);
  const SourceFile& file(int id) const { return files_.at(static_cast<size_t>(id)); }
  size_t numFiles() const { return files_.size(); }

  void error(Loc loc, const std::string& message);
  // An error about no particular place: "file: error: message".
  void plainError(const std::string& file, const std::string& message);
  // A note for the most recent error (ignored if that error was suppressed).
  void note(Loc loc, const std::string& message);

  size_t errorCount() const { return errors_; }
  bool full() const { return errors_ >= kMaxErrors; }
  // Every diagnostic, in order, joined by newlines.
  std::string render() const;

 private:
  std::string format(Loc loc, const char* severity, const std::string& message) const;
  std::vector<SourceFile> files_;
  std::vector<std::string> out_;
  std::set<std::tuple<int, int, int, std::string>> seen_;
  size_t errors_ = 0;
  bool last_kept_ = false;
};

// Edit distance, for "did you mean" suggestions.
size_t editDistance(const std::string& a, const std::string& b);
// The closest candidate within a small distance, or "".
std::string closestName(const std::string& name, const std::vector<std::string>& candidates);
// " (did you mean 'x'?)" or "".
std::string didYouMean(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace tgc::fe
