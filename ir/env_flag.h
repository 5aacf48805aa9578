// The TGC_* switches read from the environment, one reading for every module: unset or
// empty is "not given", "0" is off, anything else is on.
#pragma once

#include <cstdlib>
#include <optional>
#include <string_view>

namespace tgc {

inline std::optional<bool> envSwitch(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string_view(v) != "0";
}

// On when given and not "0".
inline bool envFlag(const char* name) { return envSwitch(name).value_or(false); }

}  // namespace tgc
