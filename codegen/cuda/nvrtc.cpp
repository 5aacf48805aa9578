#include "codegen/cuda/nvrtc.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <llvm/ADT/StringRef.h>
#include <llvm/Support/SHA256.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string_view>

#include "codegen/jit.h"

namespace tgc::codegen::cuda {

namespace fs = std::filesystem;

namespace {

// NVRTC's own types, ABI-compatible with nvrtc.h (declared here so tgc builds without it).
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;
constexpr nvrtcResult kSuccess = 0;

// The entry points tgc uses, looked up once.
struct Api {
  const char* (*getErrorString)(nvrtcResult) = nullptr;
  nvrtcResult (*version)(int*, int*) = nullptr;
  nvrtcResult (*createProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                               const char* const*) = nullptr;
  nvrtcResult (*destroyProgram)(nvrtcProgram*) = nullptr;
  nvrtcResult (*compileProgram)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*getPTXSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*getPTX)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*getCUBINSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*getCUBIN)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*getProgramLogSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*getProgramLog)(nvrtcProgram, char*) = nullptr;
  std::string versionText;  // "13.0"
  std::string error;        // non-empty: why the library is unusable
};

std::vector<std::string> candidatePaths() {
  // TGC_NVRTC names the one library to open (tests use it to see the missing-library path).
  if (const char* v = std::getenv("TGC_NVRTC"); v && *v) return {v};
  std::vector<std::string> names{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  std::vector<std::string> out = names;
  std::vector<std::string> roots;
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(env); v && *v) roots.emplace_back(v);
  roots.emplace_back("/usr/local/cuda");
  for (const auto& root : roots)
    for (const auto& n : names) out.push_back(root + "/lib64/" + n);
  return out;
}

template <class F>
bool bind(void* lib, const char* symbol, F& fn, std::string& error) {
  fn = reinterpret_cast<F>(dlsym(lib, symbol));
  if (!fn && error.empty()) error = fmt::format("libnvrtc lacks {}", symbol);
  return fn != nullptr;
}

Api openApi() {
  Api api;
  void* lib = nullptr;
  std::string tried;
  for (const auto& path : candidatePaths()) {
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    tried += (tried.empty() ? "" : ", ") + path;
  }
  if (!lib) {
    api.error = fmt::format(
        "the CUDA toolkit's NVRTC library was not found (tried {}); install the CUDA toolkit "
        "or set CUDA_HOME",
        tried);
    return api;
  }
  std::string& e = api.error;
  bind(lib, "nvrtcGetErrorString", api.getErrorString, e);
  bind(lib, "nvrtcVersion", api.version, e);
  bind(lib, "nvrtcCreateProgram", api.createProgram, e);
  bind(lib, "nvrtcDestroyProgram", api.destroyProgram, e);
  bind(lib, "nvrtcCompileProgram", api.compileProgram, e);
  bind(lib, "nvrtcGetPTXSize", api.getPTXSize, e);
  bind(lib, "nvrtcGetPTX", api.getPTX, e);
  bind(lib, "nvrtcGetCUBINSize", api.getCUBINSize, e);
  bind(lib, "nvrtcGetCUBIN", api.getCUBIN, e);
  bind(lib, "nvrtcGetProgramLogSize", api.getProgramLogSize, e);
  bind(lib, "nvrtcGetProgramLog", api.getProgramLog, e);
  if (!e.empty()) return api;
  int major = 0, minor = 0;
  if (api.version(&major, &minor) != kSuccess) {
    e = "nvrtcVersion failed";
    return api;
  }
  api.versionText = fmt::format("{}.{}", major, minor);
  return api;
}

// Opened once per process (the library stays loaded).
const Api& api() {
  static const Api a = openApi();
  return a;
}

const Api& usableApi() {
  const Api& a = api();
  if (!a.error.empty()) throw NvrtcUnavailable("NVRTC unavailable: " + a.error);
  return a;
}

std::string sha256Hex(const std::string& text) {
  llvm::SHA256 h;
  h.update(llvm::StringRef(text));
  std::string out;
  for (uint8_t byte : h.final()) out += fmt::format("{:02x}", byte);
  return out;
}

std::string cacheDirOf(const NvrtcOptions& o) {
  return (o.cacheDir.empty() ? defaultCacheDir() : o.cacheDir) + "/cuda";
}

bool readFile(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return static_cast<bool>(in) || in.eof();
}

// Written to a temporary file and renamed, so concurrent processes never read half a
// file; failures are ignored (the cache only saves time).
void writeFileAtomically(const std::string& dir, const std::string& path, const std::string& data) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return;
  static std::atomic<unsigned> counter{0};
  std::string tmp = fmt::format("{}.tmp.{}.{}", path, getpid(), counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) {
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
}

// A file name NVRTC shows in diagnostics: the program's name made safe.
std::string programFileName(const std::string& name) {
  std::string out;
  for (char ch : name)
    out += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.') ? ch : '_';
  return (out.empty() ? "kernel" : out) + ".cu";
}

NvrtcResult compile(Product product, const std::string& source, const std::string& name,
                    const std::string& arch, const NvrtcOptions& o) {
  const Api& a = usableApi();
  // The interpreter's accuracy: IEEE division and square root, denormals kept; FMA
  // contraction as the CPU emitter's `contract` flag allows.
  std::vector<std::string> options{"--gpu-architecture=" + arch, "-std=c++17", "--fmad=true",
                                   "--prec-div=true", "--prec-sqrt=true", "--ftz=false"};
  options.insert(options.end(), o.extra.begin(), o.extra.end());

  const char* ext = product == Product::Ptx ? "ptx" : "cubin";
  std::string keyText = fmt::format("{}\n{}\nnvrtc {}\n", ext, arch, a.versionText);
  for (const auto& opt : options) keyText += opt + "\n";
  keyText += source;
  const std::string dir = cacheDirOf(o);
  const std::string path = fmt::format("{}/{}.{}", dir, sha256Hex(keyText), ext);
  NvrtcResult result;
  if (o.useCache && readFile(path, result.image) && !result.image.empty()) {
    result.cacheHit = true;
    return result;
  }

  const std::string file = programFileName(name);
  nvrtcProgram prog = nullptr;
  if (nvrtcResult r = a.createProgram(&prog, source.c_str(), file.c_str(), 0, nullptr, nullptr);
      r != kSuccess)
    throw NvrtcError(fmt::format("{}: nvrtcCreateProgram: {}", file, a.getErrorString(r)));
  // Destroys the program on every path out.
  struct Guard {
    const Api& a;
    nvrtcProgram& p;
    ~Guard() { a.destroyProgram(&p); }
  } guard{a, prog};

  std::vector<const char*> argv;
  for (const auto& opt : options) argv.push_back(opt.c_str());
  const nvrtcResult status = a.compileProgram(prog, static_cast<int>(argv.size()), argv.data());
  size_t logSize = 0;
  if (a.getProgramLogSize(prog, &logSize) == kSuccess && logSize > 1) {
    result.log.resize(logSize);
    a.getProgramLog(prog, result.log.data());
    result.log.resize(logSize - 1);  // the trailing NUL
  }
  if (status != kSuccess) {
    std::string optionText;
    for (const auto& opt : options) optionText += " " + opt;
    throw NvrtcError(fmt::format("NVRTC {} failed to compile {} ({}; options:{}):\n{}\n{}",
                                 a.versionText, file, a.getErrorString(status), optionText,
                                 result.log, numberedSource(source)));
  }

  size_t size = 0;
  auto getSize = product == Product::Ptx ? a.getPTXSize : a.getCUBINSize;
  auto get = product == Product::Ptx ? a.getPTX : a.getCUBIN;
  if (nvrtcResult r = getSize(prog, &size); r != kSuccess)
    throw NvrtcError(fmt::format("{}: getting the {}: {}", file, ext, a.getErrorString(r)));
  if (size == 0)
    throw NvrtcError(fmt::format("{}: NVRTC produced no {} (is {} a {} architecture?)", file, ext,
                                 arch, product == Product::Ptx ? "virtual" : "real"));
  result.image.resize(size);
  if (nvrtcResult r = get(prog, result.image.data()); r != kSuccess)
    throw NvrtcError(fmt::format("{}: getting the {}: {}", file, ext, a.getErrorString(r)));
  if (product == Product::Ptx && !result.image.empty() && result.image.back() == '\0')
    result.image.pop_back();
  if (o.useCache) writeFileAtomically(dir, path, result.image);
  return result;
}

}  // namespace

std::string nvrtcUnavailableReason() { return api().error; }

std::string nvrtcVersion() { return usableApi().versionText; }

NvrtcOptions NvrtcOptions::fromEnv() {
  NvrtcOptions o;
  if (const char* v = std::getenv("TGC_NO_CACHE"); v && *v && std::string_view(v) != "0")
    o.useCache = false;
  return o;
}

NvrtcResult compilePtx(const std::string& source, const std::string& name, const std::string& arch,
                       const NvrtcOptions& options) {
  return compile(Product::Ptx, source, name, arch, options);
}

NvrtcResult compileCubin(const std::string& source, const std::string& name,
                         const std::string& arch, const NvrtcOptions& options) {
  return compile(Product::Cubin, source, name, arch, options);
}

std::string numberedSource(const std::string& source) {
  std::istringstream in(source);
  std::string line, out;
  for (int n = 1; std::getline(in, line); ++n) out += fmt::format("{:5} | {}\n", n, line);
  return out;
}

}  // namespace tgc::codegen::cuda
