// Helpers for the front end tests: compile text held in memory, collect diagnostics.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "frontend/frontend.h"
#include "ir/diagnostic.h"
#include "ir/printer.h"

namespace tgc::testing {

// Options whose imports come from `files` (by path) instead of the disk.
inline ModelOptions memoryFiles(std::map<std::string, std::string> files, ModelOptions o = {}) {
  o.read_file = [files = std::move(files)](const std::string& p) -> std::optional<std::string> {
    auto it = files.find(p);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
  return o;
}

inline CompiledModel compileText(const std::string& src, ModelOptions o = {}) {
  return compileModelSource(src, "test.tg", o);
}

// The diagnostics of a program that must fail ("" and a test failure when it compiles).
inline std::string errorsOf(const std::string& src, ModelOptions o = {}) {
  try {
    compileModelSource(src, "test.tg", o);
  } catch (const ParseError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a compile error for:\n" << src;
  return "";
}

inline bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

inline size_t countOf(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

inline const Node* findNode(const Graph& g, const std::string& valueName) {
  const Value* v = g.findValue(valueName);
  return v ? v->def() : nullptr;
}

inline size_t countOps(const Graph& g, OpKind k) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += node->op() == k;
  return n;
}

}  // namespace tgc::testing
