#include "runtime/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

namespace tgc {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; tgc copies it as is");

namespace {

using json = nlohmann::json;

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::f32, "F32"}, {DType::f64, "F64"}, {DType::bf16, "BF16"},   {DType::f16, "F16"},
    {DType::i32, "I32"}, {DType::i64, "I64"}, {DType::boolean, "BOOL"}};

[[noreturn]] void invalid(std::string_view source, std::string_view reason) {
  throw SafetensorsError(fmt::format("{}: error: invalid safetensors file: {}", source, reason));
}

[[noreturn]] void ioFailure(std::string_view source, std::string_view what, int err) {
  throw SafetensorsError(fmt::format("{}: error: cannot {}: {}", source, what, std::strerror(err)));
}

// One tensor's header entry, checked against the data section's size.
struct Entry {
  std::string name;
  TensorType type;
  uint64_t begin = 0, end = 0;
};

struct Header {
  std::vector<Entry> entries;  // in header order
  std::map<std::string, std::string> metadata;
};

uint64_t readLE64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Checks the 8-byte prefix against the file's size; returns the header length.
uint64_t checkHeaderLength(const unsigned char* prefix, uint64_t file_size,
                           std::string_view source) {
  uint64_t n = readLE64(prefix);
  if (n > kMaxSafetensorsHeader)
    invalid(source, fmt::format("header length {} is larger than the limit of {} bytes", n,
                                kMaxSafetensorsHeader));
  if (n > file_size - 8)
    invalid(source, fmt::format("header length {} runs past the end of the file ({} bytes "
                                "follow the length)",
                                n, file_size - 8));
  return n;
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; the rest is the useful part.
std::string jsonReason(const std::exception& e) {
  std::string_view w = e.what();
  if (!w.empty() && w.front() == '[') {
    size_t close = w.find("] ");
    if (close != std::string_view::npos) w.remove_prefix(close + 2);
  }
  // The parser quotes the bytes it stopped at; in a damaged file they may be anything, and
  // an error message should not carry control bytes or broken UTF-8 to the terminal.
  std::string out;
  for (unsigned char ch : w)
    out += ch >= 0x20 && ch < 0x7F ? std::string(1, static_cast<char>(ch))
                                   : fmt::format("\\x{:02x}", ch);
  return out;
}

// A JSON integer that fits in T and is >= 0, or nullopt.
template <class T>
std::optional<T> nonNegativeInt(const json& j) {
  if (j.is_number_unsigned()) {
    uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<T>::max())) return std::nullopt;
    return static_cast<T>(v);
  }
  if (j.is_number_integer()) {
    int64_t v = j.get<int64_t>();
    if (v < 0) return std::nullopt;
    return static_cast<T>(v);
  }
  return std::nullopt;
}

Entry parseEntry(const std::string& name, const json& j, uint64_t data_size,
                 std::string_view source) {
  auto bad = [&](std::string_view reason) {
    invalid(source, fmt::format("tensor '{}': {}", name, reason));
  };
  if (!j.is_object()) bad(fmt::format("entry is {}, expected an object", j.type_name()));
  for (const auto& [k, v] : j.items())
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      bad(fmt::format("unknown field '{}' (expected dtype, shape, data_offsets)", k));
  for (const char* k : {"dtype", "shape", "data_offsets"})
    if (!j.contains(k)) bad(fmt::format("missing field '{}'", k));

  Entry e;
  e.name = name;
  const json& dt = j["dtype"];
  if (!dt.is_string()) bad(fmt::format("dtype is {}, expected a string", dt.type_name()));
  auto dtype = parseSafetensorsDType(dt.get<std::string>());
  if (!dtype)
    bad(fmt::format("unsupported dtype '{}' (tgc reads F32, F64, BF16, F16, I32, I64, BOOL)",
                    dt.get<std::string>()));
  e.type.dtype = *dtype;

  const json& sh = j["shape"];
  if (!sh.is_array()) bad(fmt::format("shape is {}, expected an array", sh.type_name()));
  for (const json& d : sh) {
    auto v = nonNegativeInt<int64_t>(d);
    if (!v) bad(fmt::format("shape {} has an entry that is not a non-negative integer", sh.dump()));
    e.type.shape.push_back(*v);
  }
  // Element and byte counts, refusing overflow (a zero dimension makes the tensor empty).
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t numel = 1;
  if (std::find(e.type.shape.begin(), e.type.shape.end(), 0) != e.type.shape.end()) {
    numel = 0;
  } else {
    for (int64_t d : e.type.shape) {
      if (numel > kMax / d) bad(fmt::format("shape {} has too many elements", sh.dump()));
      numel *= d;
    }
  }
  const int64_t elem = static_cast<int64_t>(dtypeSize(e.type.dtype));
  if (numel > kMax / elem) bad(fmt::format("shape {} has too many bytes", sh.dump()));
  const uint64_t nbytes = static_cast<uint64_t>(numel * elem);

  const json& off = j["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    bad(fmt::format("data_offsets {} is not a pair [begin, end]", off.dump()));
  auto b = nonNegativeInt<uint64_t>(off[0]), en = nonNegativeInt<uint64_t>(off[1]);
  if (!b || !en) bad(fmt::format("data_offsets {} are not non-negative integers", off.dump()));
  if (*b > *en) bad(fmt::format("data_offsets {} end before they begin", off.dump()));
  e.begin = *b;
  e.end = *en;
  if (e.end - e.begin != nbytes)
    bad(fmt::format("data_offsets {} span {} bytes but {} {} needs {}", off.dump(), e.end - e.begin,
                    dt.get<std::string>(), sh.dump(), nbytes));
  if (e.end > data_size)
    bad(fmt::format("data_offsets {} run past the end of the data section ({} bytes)", off.dump(),
                    data_size));
  return e;
}

// Parses and checks the JSON header against a data section of `data_size` bytes.
Header parseHeader(std::string_view text, uint64_t data_size, std::string_view source) {
  // nlohmann keeps the last of duplicate keys silently; a callback sees every key, per object.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  bool duplicate_is_top = false;
  auto callback = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (ev == json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (ev == json::parse_event_t::key && !open_objects.empty() && duplicate.empty()) {
      if (!open_objects.back().insert(parsed.get<std::string>()).second) {
        duplicate = parsed.get<std::string>();
        duplicate_is_top = open_objects.size() == 1;
      }
    }
    return true;
  };
  json h;
  try {
    h = json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    invalid(source, "header is not valid JSON: " + jsonReason(e));
  }
  if (!h.is_object())
    invalid(source, fmt::format("header is JSON {}, not an object", h.type_name()));
  if (!duplicate.empty())
    invalid(source, duplicate_is_top ? fmt::format("duplicate tensor name '{}'", duplicate)
                                     : fmt::format("duplicate key '{}' in the header", duplicate));

  Header out;
  for (const auto& [name, j] : h.items()) {
    if (name == "__metadata__") {
      if (!j.is_object())
        invalid(source,
                fmt::format("__metadata__ is {}, expected an object of strings", j.type_name()));
      for (const auto& [k, v] : j.items()) {
        if (!v.is_string())
          invalid(source, fmt::format("__metadata__ value for '{}' is {}, expected a string", k,
                                      v.type_name()));
        out.metadata.emplace(k, v.get<std::string>());
      }
      continue;
    }
    out.entries.push_back(parseEntry(name, j, data_size, source));
  }

  // The format requires the tensors to tile the data section exactly, with no overlap or gap.
  std::vector<const Entry*> by_offset;
  for (const Entry& e : out.entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t cursor = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : by_offset) {
    if (e->begin < cursor)
      invalid(source, fmt::format("tensor '{}' at bytes [{}, {}) overlaps tensor '{}' at [{}, {})",
                                  e->name, e->begin, e->end, prev->name, prev->begin, prev->end));
    if (e->begin > cursor)
      invalid(source, fmt::format("bytes [{}, {}) of the data section belong to no tensor", cursor,
                                  e->begin));
    cursor = e->end;
    prev = e;
  }
  if (cursor != data_size)
    invalid(source, fmt::format("bytes [{}, {}) at the end of the data section belong to no tensor",
                                cursor, data_size));
  return out;
}

// The 8-byte length and the space-padded JSON header for `f`, tensors laid out in name order.
std::string encodeHeader(const TensorFile& f, std::string_view source) {
  auto checkUtf8 = [&](const std::string& s, std::string_view what) {
    try {
      (void)json(s).dump();
    } catch (const json::exception&) {
      throw SafetensorsError(
          fmt::format("{}: error: cannot write: {} is not valid UTF-8", source, what));
    }
  };
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!f.metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : f.metadata) {
      checkUtf8(k, fmt::format("metadata key '{}'", k));
      checkUtf8(v, fmt::format("metadata value for '{}'", k));
      m[k] = v;
    }
    h["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : f.tensors) {
    if (name == "__metadata__")
      throw SafetensorsError(fmt::format(
          "{}: error: cannot write: '__metadata__' is reserved, not a tensor name", source));
    checkUtf8(name, fmt::format("tensor name '{}'", name));
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = safetensorsDTypeName(t.dtype());
    e["shape"] = t.shape();
    e["data_offsets"] = {offset, offset + t.nbytes()};
    offset += t.nbytes();
    h[name] = std::move(e);
  }
  std::string text = h.dump();
  // Padding the header keeps the data section 8-byte aligned (the length prefix is 8 bytes).
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + text;
}

Tensor makeTensor(const Entry& e, const unsigned char* data) {
  Tensor t(e.type);
  if (t.nbytes() > 0) std::memcpy(t.data(), data + e.begin, t.nbytes());
  return t;
}

// Reads exactly n bytes at offset; false on a short read (the file shrank) with errno 0.
bool preadAll(int fd, void* buf, size_t n, uint64_t offset) {
  auto* p = static_cast<unsigned char*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = 0;
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

bool writeAll(int fd, const void* buf, size_t n) {
  auto* p = static_cast<const unsigned char*>(buf);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string parentDir(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

std::string_view safetensorsDTypeName(DType t) {
  for (const auto& d : kDTypeNames)
    if (d.dtype == t) return d.name;
  return "?";
}

std::optional<DType> parseSafetensorsDType(std::string_view s) {
  for (const auto& d : kDTypeNames)
    if (d.name == s) return d.dtype;
  return std::nullopt;
}

std::string encodeSafetensors(const TensorFile& f) {
  std::string out = encodeHeader(f, "<memory>");
  for (const auto& [name, t] : f.tensors)
    out.append(static_cast<const char*>(t.data()), t.nbytes());
  return out;
}

TensorFile decodeSafetensors(std::string_view bytes, std::string_view source) {
  if (bytes.size() < 8)
    invalid(source, fmt::format("the file is {} bytes, shorter than the 8-byte header length",
                                bytes.size()));
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  uint64_t n = checkHeaderLength(p, bytes.size(), source);
  Header h = parseHeader(bytes.substr(8, n), bytes.size() - 8 - n, source);
  TensorFile f;
  f.metadata = std::move(h.metadata);
  for (const Entry& e : h.entries) f.tensors.emplace(e.name, makeTensor(e, p + 8 + n));
  return f;
}

TensorFile readSafetensors(const std::string& path) {
  Fd in;
  in.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in.fd < 0) ioFailure(path, "open", errno);
  struct stat st {};
  if (::fstat(in.fd, &st) != 0) ioFailure(path, "stat", errno);
  if (!S_ISREG(st.st_mode))
    throw SafetensorsError(fmt::format("{}: error: cannot read: not a regular file", path));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto readOrFail = [&](void* buf, size_t n, uint64_t offset) {
    if (!preadAll(in.fd, buf, n, offset)) {
      if (errno != 0) ioFailure(path, "read", errno);
      invalid(path, "the file ended early while reading it");
    }
  };
  if (size < 8)
    invalid(path, fmt::format("the file is {} bytes, shorter than the 8-byte header length", size));
  unsigned char prefix[8];
  readOrFail(prefix, 8, 0);
  uint64_t n = checkHeaderLength(prefix, size, path);
  std::string text(n, '\0');
  readOrFail(text.data(), n, 8);
  Header h = parseHeader(text, size - 8 - n, path);

  // Each tensor is read straight into its own storage: a large checkpoint is not held twice.
  TensorFile f;
  f.metadata = std::move(h.metadata);
  for (const Entry& e : h.entries) {
    Tensor t(e.type);
    if (t.nbytes() > 0) readOrFail(t.data(), t.nbytes(), 8 + n + e.begin);
    f.tensors.emplace(e.name, std::move(t));
  }
  return f;
}

void writeSafetensors(const std::string& path, const TensorFile& f) {
  const std::string header = encodeHeader(f, path);

  // A unique temporary beside the target, so the final rename stays in one file system.
  static std::atomic<unsigned> counter{0};
  std::string tmp;
  Fd out;
  for (int attempt = 0; out.fd < 0; ++attempt) {
    tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), counter++);
    out.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (out.fd < 0 && (errno != EEXIST || attempt > 100)) ioFailure(path, "create " + tmp, errno);
  }
  // Until the rename succeeds, any failure removes the temporary file.
  struct Cleanup {
    const std::string& name;
    bool armed = true;
    ~Cleanup() {
      if (armed) ::unlink(name.c_str());
    }
  } cleanup{tmp};

  if (!writeAll(out.fd, header.data(), header.size())) ioFailure(path, "write " + tmp, errno);
  for (const auto& [name, t] : f.tensors)
    if (!writeAll(out.fd, t.data(), t.nbytes())) ioFailure(path, "write " + tmp, errno);
  if (::fsync(out.fd) != 0) ioFailure(path, "sync " + tmp, errno);
  int fd = out.fd;
  out.fd = -1;
  if (::close(fd) != 0) ioFailure(path, "close " + tmp, errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) ioFailure(path, "rename " + tmp + " to it", errno);
  cleanup.armed = false;

  // Make the rename itself durable. Some file systems cannot sync a directory; that is not
  // an error for the file just written.
  Fd dir;
  dir.fd = ::open(parentDir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir.fd >= 0) (void)::fsync(dir.fd);
}

}  // namespace tgc
