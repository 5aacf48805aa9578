#include "frontend/diag.h"

#include <fmt/format.h>

#include <algorithm>

#include "ir/diagnostic.h"

namespace tgc::fe {

int Diags::addFile(std::string path, std::string text) {
  files_.push_back(SourceFile{std::move(path), std::move(text)});
  return static_cast<int>(files_.size() - 1);
}

std::string Diags::format(Loc loc, const char* severity, const std::string& message) const {
  if (loc.file < 0 || static_cast<size_t>(loc.file) >= files_.size())
    return fmt::format("<unknown>: {}: {}", severity, message);
  const SourceFile& f = files_[static_cast<size_t>(loc.file)];
  return formatDiagnostic(f.path, f.text, SourceLoc{loc.line, loc.col}, severity, message);
}

void Diags::error(Loc loc, const std::string& message) {
  last_kept_ = false;
  if (!seen_.insert({loc.file, loc.line, loc.col, message}).second) return;
  if (errors_ >= kMaxErrors) return;
  ++errors_;
  out_.push_back(format(loc, "error", message));
  if (errors_ == kMaxErrors) {
    out_.push_back(fmt::format("tgc: too many errors ({}), stopping", kMaxErrors));
    return;
  }
  last_kept_ = true;
}

void Diags::plainError(const std::string& file, const std::string& message) {
  last_kept_ = false;
  if (!seen_.insert({-1, 0, 0, file + message}).second || errors_ >= kMaxErrors) return;
  ++errors_;
  out_.push_back(fmt::format("{}: error: {}", file, message));
}

void Diags::note(Loc loc, const std::string& message) {
  if (last_kept_) out_.push_back(format(loc, "note", message));
}

std::string Diags::render() const {
  std::string s;
  for (size_t i = 0; i < out_.size(); ++i) s += (i ? "\n" : "") + out_[i];
  return s;
}

size_t editDistance(const std::string& a, const std::string& b) {
  // Optimal string alignment: insertions, deletions, substitutions and swaps of neighbours
  // ("frist" is one edit from "first").
  std::vector<size_t> prev2(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    prev2 = prev;
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closestName(const std::string& name, const std::vector<std::string>& candidates) {
  // Allow about one typo per three characters, at least one.
  size_t limit = std::max<size_t>(1, name.size() / 3);
  std::string best;
  size_t bestDist = limit + 1;
  for (const auto& c : candidates) {
    if (c == name) continue;
    size_t d = editDistance(name, c);
    if (d < bestDist || (d == bestDist && !best.empty() && c < best)) {
      best = c;
      bestDist = d;
    }
  }
  // Replacing every character is no suggestion ('C' for 'B').
  return bestDist <= limit && bestDist < name.size() ? best : "";
}

std::string didYouMean(const std::string& name, const std::vector<std::string>& candidates) {
  std::string c = closestName(name, candidates);
  return c.empty() ? "" : fmt::format(" (did you mean '{}'?)", c);
}

}  // namespace tgc::fe
