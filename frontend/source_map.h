// Where the nodes of a lowered graph came from: the model-language expression that made each
// one, and the function and method calls that led there. Warnings about a graph
// (passes/lint.h) cite these places as errors do: "file:line:col: warning: ...", the line,
// a caret.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace tgc {

struct SourcePos {
  int file = -1;  // index into the map's files; -1: nowhere
  int line = 0;
  int col = 0;
  bool valid() const { return file >= 0; }
};

struct NodeOrigin {
  SourcePos at;                  // the expression
  std::vector<SourcePos> calls;  // the call sites that led there, outermost first
};

class SourceMap {
 public:
  int addFile(std::string path, std::string text);
  void setOrigin(const Node* n, NodeOrigin o) { origins_[n] = std::move(o); }
  // Null for a node the model text did not make (an input the compiler adds).
  const NodeOrigin* origin(const Node* n) const;
  const std::string& path(const SourcePos& p) const { return files_.at(static_cast<size_t>(p.file)).path; }

  std::string where(const SourcePos& p) const;  // "file:line:col", or "<unknown>"
  // "file:line:col: severity: message", the source line and a caret.
  std::string render(const SourcePos& p, std::string_view severity, std::string_view message) const;

 private:
  struct File {
    std::string path, text;
  };
  std::vector<File> files_;
  std::unordered_map<const Node*, NodeOrigin> origins_;
};

// A warning about the model (docs/language.md, "Warnings"): `name` turns it off with
// --no-warn=NAME. A note is a remark that --Werror does not turn into an error.
struct ModelWarning {
  std::string name;
  SourcePos at;
  std::string message;  // the one-line reason
  std::string fix;      // the one-line fix
  std::vector<SourcePos> calls;  // call sites that led to `at`, outermost first
  bool note = false;
};

// The rendered text of one warning: the diagnostic, "fix: ..." and a note per call site.
std::string renderWarning(const SourceMap& sources, const ModelWarning& w);

}  // namespace tgc
