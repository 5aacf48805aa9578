// Graph IR as JSON (nlohmann/json), for tools. toJson -> fromJson -> toJson is identical.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>

#include "ir/graph.h"

namespace tgc {

nlohmann::json graphToJson(const Graph& g);
// Throws ParseError ("<file>: json: <path>: message") on malformed or inconsistent input;
// the graph is verified before it is returned.
std::unique_ptr<Graph> graphFromJson(const nlohmann::json& j, std::string_view filename = "<json>");
// Parses JSON text first (syntax errors give line:col).
std::unique_ptr<Graph> graphFromJsonText(std::string_view text, std::string_view filename = "<json>");

}  // namespace tgc
