#include "ir/printer.h"

#include <cctype>

namespace tgc {

bool isPlainName(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') return false;
  return true;
}

static std::string refName(const std::string& s) {
  if (isPlainName(s)) return "%" + s;
  return "%" + attrToString(Attr{s});  // quoted with escapes
}

std::string printValueRef(const Value& v) { return refName(v.name()); }

std::string printNode(const Node& n) {
  std::string s;
  for (size_t i = 0; i < n.numResults(); ++i) s += (i ? ", " : "") + printValueRef(*n.result(i));
  s += " = ";
  s += n.info().name;
  s += "(";
  for (size_t i = 0; i < n.operands().size(); ++i)
    s += (i ? ", " : "") + printValueRef(*n.operand(i));
  s += ")";
  if (!n.attrs().empty()) {
    s += " {";
    bool first = true;
    for (const auto& [k, v] : n.attrs()) {
      s += (first ? "" : ", ") + k + "=" + attrToString(v);
      first = false;
    }
    s += "}";
  }
  s += " : ";
  for (size_t i = 0; i < n.numResults(); ++i) s += (i ? ", " : "") + n.result(i)->type().str();
  return s;
}

std::string printGraph(const Graph& g) {
  std::string s = "graph @" + (isPlainName(g.name()) ? g.name() : attrToString(Attr{g.name()}));
  if (!g.dims().empty()) {
    s += " [";
    for (size_t i = 0; i < g.dims().size(); ++i)
      s += (i ? ", " : "") + g.dims()[i].first + "=" + std::to_string(g.dims()[i].second);
    s += "]";
  }
  s += " {\n";
  for (const auto& n : g.nodes()) s += "  " + printNode(*n) + "\n";
  s += "  return";
  for (size_t i = 0; i < g.outputs().size(); ++i)
    s += (i ? ", " : " ") + printValueRef(*g.outputs()[i]);
  s += "\n}\n";
  return s;
}

}  // namespace tgc
