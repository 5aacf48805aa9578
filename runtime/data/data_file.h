// Reading data files: a whole file, its lines checked to be UTF-8, a fixed string hash.
// Shared by the corpus, text, classification and tensor readers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tgc::data {

// The bytes of a file. Errors (DataError) name it: "<path>: error: is a directory, not a
// <what> file", "cannot open the <what>", "cannot read the <what>".
std::string readDataFile(const std::string& path, std::string_view what);

// Lines without their "\n" or "\r\n", each checked to be UTF-8; a final newline does not
// start another line. Invalid UTF-8 is a DataError
// "<name>:<line>:<col>: error: invalid UTF-8 (byte 0xFF)".
std::vector<std::string_view> splitUtf8Lines(std::string_view text, std::string_view name);

// FNV-1a: a fixed, platform-independent string hash (validation splits).
inline uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

}  // namespace tgc::data
