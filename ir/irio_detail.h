// Helpers shared by the IR readers (text parser, JSON): size limits, name rules, UTF-8
// checks and "did you mean" suggestions. Internal to tgc_irio; header-only.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/attr.h"
#include "ir/diagnostic.h"
#include "ir/dtype.h"
#include "ir/op_table.h"

namespace tgc::irio {

// Readers refuse tensors with more elements than this (or any one dim larger), so no
// later arithmetic on sizes can overflow int64 and no one allocates from a hostile file.
inline constexpr int64_t kMaxElements = int64_t{1} << 40;

// Why `s` is too large to accept, or nullopt. The product of the nonzero dims is bounded
// (not just the element count), since numElements multiplies left to right. Negative dims
// are left to the caller.
inline std::optional<std::string> shapeTooLarge(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d > kMaxElements) return fmt::format("dimension {} is larger than 2^40", d);
    if (d <= 0) continue;
    if (n > kMaxElements / d) return std::string("its dimensions multiply to more than 2^40");
    n *= d;
  }
  return std::nullopt;
}

// Attributes named "shape" (reshape, broadcast) are shapes too; shape rules multiply them.
inline std::optional<std::string> attrTooLarge(const std::string& name, const Attr& a) {
  if (name != "shape" || !std::holds_alternative<std::vector<int64_t>>(a)) return std::nullopt;
  const auto& shape = std::get<std::vector<int64_t>>(a);
  if (auto why = shapeTooLarge(shape))
    return fmt::format("shape {} is too large ({})", shapeStr(shape), *why);
  return std::nullopt;
}

// formatDiagnostic, but safe for what(): a NUL byte in the quoted source line would cut the
// message short, so NULs are shown as spaces.
inline std::string errorAt(std::string_view file, std::string_view text, SourceLoc loc,
                           std::string_view msg) {
  if (text.find('\0') == std::string_view::npos)
    return formatDiagnostic(file, text, loc, "error", msg);
  std::string clean(text);
  std::replace(clean.begin(), clean.end(), '\0', ' ');
  return formatDiagnostic(file, clean, loc, "error", msg);
}

// "'neg' takes 1 operand, got 2", or nullopt when `n` operands are fine for the op.
inline std::optional<std::string> arityError(const OpInfo& info, int n) {
  if (n >= info.min_operands && (info.max_operands < 0 || n <= info.max_operands))
    return std::nullopt;
  auto plural = [](int k) { return k == 1 ? "" : "s"; };
  std::string want =
      info.min_operands == info.max_operands
          ? fmt::format("{} operand{}", info.min_operands, plural(info.min_operands))
      : info.max_operands < 0
          ? fmt::format("at least {} operand{}", info.min_operands, plural(info.min_operands))
          : fmt::format("{} to {} operands", info.min_operands, info.max_operands);
  return fmt::format("'{}' takes {}, got {}", info.name, want, n);
}

// Dim names are identifiers: [A-Za-z_][A-Za-z0-9_.]* (the printer writes them bare).
inline bool isIdentStart(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
inline bool isIdentChar(char c) { return isIdentStart(c) || (c >= '0' && c <= '9') || c == '.'; }
inline bool isIdentifier(std::string_view s) {
  if (s.empty() || !isIdentStart(s[0])) return false;
  return std::all_of(s.begin() + 1, s.end(), isIdentChar);
}

// Strict UTF-8 (no overlong forms, no surrogates, <= U+10FFFF), as JSON output needs.
inline bool isValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto b = static_cast<unsigned char>(s[i]);
    int len;
    uint32_t cp;
    if (b < 0x80) {
      ++i;
      continue;
    }
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
      cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      cp = b & 0x0F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      cp = b & 0x07;
    } else
      return false;
    if (i + len > s.size()) return false;
    for (int k = 1; k < len; ++k) {
      auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

// A name for a message: long names are cut, control bytes shown as \xNN.
inline std::string shownName(std::string_view s) {
  std::string r;
  for (size_t i = 0; i < s.size() && i < 60; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F)
      r += fmt::format("\\x{:02x}", c);
    else
      r += static_cast<char>(c);
  }
  if (s.size() > 60) r += "...";
  return r;
}

// Levenshtein distance, or `limit + 1` as soon as it must exceed `limit`.
inline size_t editDistance(std::string_view a, std::string_view b, size_t limit) {
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > limit) return limit + 1;
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    size_t rowMin = cur[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
      rowMin = std::min(rowMin, cur[j]);
    }
    if (rowMin > limit) return limit + 1;
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// The closest candidate within a few edits (ties: the first given), or nullopt.
// Long names are not compared: a suggestion is for typos, and this keeps errors cheap.
template <typename Range>
std::optional<std::string> closestName(std::string_view name, const Range& candidates) {
  if (name.size() > 64) return std::nullopt;
  size_t limit = name.size() <= 3 ? 1 : name.size() <= 8 ? 2 : 3;
  std::optional<std::string> best;
  size_t bestDist = limit + 1;
  for (const auto& c : candidates) {
    std::string_view cv(c);
    if (cv.size() > 64 || cv == name) continue;
    size_t d = editDistance(name, cv, limit);
    if (d < bestDist && d < name.size()) {  // rewriting the whole name is no typo
      bestDist = d;
      best = std::string(cv);
    }
  }
  return best;
}

}  // namespace tgc::irio
