// Graphviz output: one dot node per IR node, labelled with the op, its attributes and each
// result's name and type; edges run from operand producers to users, labelled by type.
// Inputs are blue inverted houses, constants grey, nodes whose results the graph returns
// green with a double border, so a picture shows where data enters and leaves.
#include "ir/graphviz.h"

#include <fmt/format.h>

#include <unordered_map>

#include "ir/printer.h"

namespace tgc {
namespace {

// Text for inside a dot "..." string: quotes and backslashes escaped, control bytes shown
// as visible \xNN (with the backslash escaped, so dot prints it literally).
std::string escape(std::string_view s) {
  std::string r;
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      r += '\\';
      r += c;
    } else if (u < 0x20 || u == 0x7F) {
      r += fmt::format("\\\\x{:02x}", u);
    } else {
      r += c;
    }
  }
  return r;
}

// Long attribute lists (a constant's values) are cut so the box stays readable.
std::string attrLine(const Node& n) {
  std::string s;
  for (const auto& [k, v] : n.attrs())
    s += fmt::format("{}{}={}", s.empty() ? "" : ", ", k, attrToString(v));
  if (s.size() > 60) {
    size_t cut = 57;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8
    s = s.substr(0, cut) + "...";
  }
  return s;
}

}  // namespace

std::string graphToDot(const Graph& g) {
  std::unordered_map<const Value*, size_t> producer;
  std::unordered_map<const Value*, std::vector<size_t>> outputIndex;
  for (size_t i = 0; i < g.outputs().size(); ++i) outputIndex[g.outputs()[i]].push_back(i);

  std::string s = fmt::format("digraph \"{}\" {{\n", escape(g.name()));
  s += "  rankdir=TB;\n";
  s += "  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"monospace\"];\n";
  s += "  edge [fontname=\"monospace\", fontsize=10];\n";
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = *g.nodes()[i];
    std::string label = escape(n.info().name);
    if (std::string attrs = attrLine(n); !attrs.empty()) label += "\\n" + escape(attrs);
    bool isOutput = false;
    for (size_t r = 0; r < n.numResults(); ++r) {
      const Value* v = n.result(r);
      producer[v] = i;
      label += "\\n" + escape(printValueRef(*v)) + " : " + escape(v->type().str());
      if (auto it = outputIndex.find(v); it != outputIndex.end()) {
        isOutput = true;
        for (size_t k : it->second) label += fmt::format("\\n-> output {}", k);
      }
    }
    std::string style;
    if (n.op() == OpKind::Input)
      style += ", shape=invhouse, fillcolor=lightblue";
    else if (n.op() == OpKind::Constant)
      style += ", fillcolor=lightgrey";
    else if (isOutput)
      style += ", fillcolor=palegreen";
    if (isOutput) style += ", peripheries=2";
    s += fmt::format("  n{} [label=\"{}\"{}];\n", i, label, style);
  }
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = *g.nodes()[i];
    for (const Value* o : n.operands()) {
      auto it = producer.find(o);
      if (it == producer.end()) continue;  // not in this graph (the verifier reports it)
      std::string label = escape(o->type().str());
      if (o->def()->numResults() > 1) label = escape(printValueRef(*o)) + ": " + label;
      s += fmt::format("  n{} -> n{} [label=\"{}\"];\n", it->second, i, label);
    }
  }
  s += "}\n";
  return s;
}

}  // namespace tgc
