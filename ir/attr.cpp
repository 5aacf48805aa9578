#include "ir/attr.h"

#include <fmt/format.h>

#include <cmath>

namespace tgc {

AttrKind attrKind(const Attr& a) { return static_cast<AttrKind>(a.index()); }

std::string_view attrKindName(AttrKind k) {
  switch (k) {
    case AttrKind::Bool: return "bool";
    case AttrKind::Int: return "int";
    case AttrKind::Float: return "float";
    case AttrKind::String: return "string";
    case AttrKind::Ints: return "ints";
    case AttrKind::Floats: return "floats";
    case AttrKind::DTypeKind: return "dtype";
  }
  return "?";
}

std::string formatDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);  // shortest round-trip representation
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

static std::string quote(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (c == '\n') { r += "\\n"; continue; }
    r += c;
  }
  return r + "\"";
}

std::string attrToString(const Attr& a) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
        else if constexpr (std::is_same_v<T, int64_t>) return std::to_string(v);
        else if constexpr (std::is_same_v<T, double>) return formatDouble(v);
        else if constexpr (std::is_same_v<T, std::string>) return quote(v);
        else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          std::string r = "[";
          for (size_t i = 0; i < v.size(); ++i) r += (i ? "," : "") + std::to_string(v[i]);
          return r + "]";
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          std::string r = "[";
          for (size_t i = 0; i < v.size(); ++i) r += (i ? "," : "") + formatDouble(v[i]);
          return r + "]";
        } else {
          return std::string(dtypeName(v));
        }
      },
      a);
}

}  // namespace tgc
