// Op attributes: small typed constants attached to a node ({axis=-1, keepdims=true}).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "ir/dtype.h"

namespace tgc {

enum class AttrKind : uint8_t { Bool, Int, Float, String, Ints, Floats, DTypeKind };

using Attr = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>,
                          std::vector<double>, DType>;

// Sorted by name, so printing and structural comparison are deterministic.
using AttrMap = std::map<std::string, Attr>;

AttrKind attrKind(const Attr& a);
std::string_view attrKindName(AttrKind k);

// Text form used by the IR printer: true, -1, 1.5, "tanh", [2,3], [0.5,1.0], f32.
// Floats print the shortest string that reads back to the same double, always with a
// '.', 'e', "inf" or "nan" so they never look like integers.
std::string attrToString(const Attr& a);
std::string formatDouble(double v);

}  // namespace tgc
