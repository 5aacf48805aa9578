#include "runtime/data/data_file.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/data/error.h"
#include "runtime/data/text.h"

namespace tgc::data {

std::string readDataFile(const std::string& path, std::string_view what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw DataError(fmt::format("{}: error: is a directory, not a {} file", path, what));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(fmt::format("{}: error: cannot open the {}", path, what));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw DataError(fmt::format("{}: error: cannot read the {}", path, what));
  return ss.str();
}

std::vector<std::string_view> splitUtf8Lines(std::string_view text, std::string_view name) {
  std::vector<std::string_view> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t bad = findInvalidUtf8(line);
    if (bad != std::string_view::npos)
      throw DataError(fmt::format("{}:{}:{}: error: invalid UTF-8 (byte 0x{:02X})", name,
                                  lines.size() + 1, bad + 1,
                                  static_cast<unsigned char>(line[bad])));
    lines.push_back(line);
    begin = end + 1;
  }
  return lines;
}

}  // namespace tgc::data
