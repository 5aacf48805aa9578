// Reads the IR text format (see printer.h) back into a Graph.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "ir/diagnostic.h"
#include "ir/graph.h"

namespace tgc {

// Parses one graph. `filename` is used in diagnostics. Throws ParseError whose message is
// "file:line:col: error: ..." with the line and a caret; never crashes on any input.
// The result is verified (verifyGraph) before it is returned.
std::unique_ptr<Graph> parseGraph(std::string_view text, std::string_view filename = "<input>");
// Reads a file and parses it; a missing file is a ParseError naming it.
std::unique_ptr<Graph> parseGraphFile(const std::string& path);

}  // namespace tgc
