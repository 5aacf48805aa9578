// Named tensors in the safetensors format, the ecosystem's weight and checkpoint format:
//
//   u64 little-endian N | N bytes of JSON header, space padded | data section
//   header: {"__metadata__": {"k": "v"}, "name": {"dtype": "F32", "shape": [2, 3],
//            "data_offsets": [begin, end]}, ...}   (offsets relative to the data section)
//
// Reading validates everything before touching the data (sizes, bounds, overlaps, gaps,
// duplicate keys), so a corrupt or hostile file is refused with a message, never a crash.
// Writing is canonical (tensors in name order, contiguous) and atomic.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "ir/diagnostic.h"
#include "ir/tensor.h"

namespace tgc {

// A file that is not valid safetensors, or one that cannot be read or written.
// what() is "<file>: error: invalid safetensors file: <reason>" or
// "<file>: error: cannot <open|read|write|...>: <reason>".
struct SafetensorsError : ParseError {
  using ParseError::ParseError;
};

struct TensorFile {
  std::map<std::string, Tensor> tensors;
  // Free-form string pairs ("__metadata__"); checkpoints keep step and config here.
  std::map<std::string, std::string> metadata;
};

// The header's dtype names: "F32", "F64", "BF16", "F16", "I32", "I64", "BOOL".
std::string_view safetensorsDTypeName(DType t);
std::optional<DType> parseSafetensorsDType(std::string_view s);

// The largest header a reader accepts (the reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

// In memory. `source` names the bytes in error messages.
std::string encodeSafetensors(const TensorFile& f);
TensorFile decodeSafetensors(std::string_view bytes, std::string_view source = "<memory>");

// Files. Writing goes to a temporary file in the same directory, is fsynced and then renamed
// over `path`, so `path` holds either its old content or the complete new file.
TensorFile readSafetensors(const std::string& path);
void writeSafetensors(const std::string& path, const TensorFile& f);

}  // namespace tgc
