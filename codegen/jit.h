// A small wrapper over LLVM's ORC LLJIT for the host CPU.
//
// Modules built with IRBuilder go in; they are optimized with the new pass manager at O3
// for the host CPU and its features (AVX-512, AVX2, ... as detected), compiled to machine
// code and linked into the process; function pointers come out.
//
// Compiled objects are cached on disk, keyed by a hash of (module IR text before
// optimization, target triple, CPU name, CPU features, tgc and LLVM versions), in
// $TGC_CACHE_DIR, else $XDG_CACHE_HOME/tgc, else ~/.cache/tgc. A hit skips both the
// optimization pipeline and code generation. stats() says whether the last compile hit.
//
// With TGC_PERF_MAP=1 in the environment, every compiled function (kernels' internal
// bodies included) is listed in /tmp/perf-<pid>.map, so `perf report` names them.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace llvm {
class LLVMContext;
class Module;
class TargetMachine;
namespace orc {
class LLJIT;
}
}  // namespace llvm

namespace tgc::codegen {

// LLVM failed to set up the target, compile a module or find a symbol.
struct JitError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The machine code is generated for: by default the host.
struct TargetSpec {
  std::string triple;    // "x86_64-pc-linux-gnu"
  std::string cpu;       // "znver3", "skylake-avx512"
  std::string features;  // "+avx2,+fma,-avx512f,..." (LLVM -mattr syntax)

  static TargetSpec host();
  // Vector register width in bits the code should use: 512 with AVX-512F, 256 with AVX
  // (or AVX2), 128 otherwise.
  int vectorBits() const;
  // Number of architectural vector registers (32 with AVX-512, else 16 on x86-64).
  int vectorRegisters() const;
  bool hasFeature(std::string_view name) const;  // "avx2" is true for "+avx2"
};

struct JitOptions {
  TargetSpec target = TargetSpec::host();
  bool useCache = true;
  std::string cacheDir;  // empty: $TGC_CACHE_DIR, $XDG_CACHE_HOME/tgc or ~/.cache/tgc

  // The defaults, with TGC_NO_CACHE=1 in the environment turning the cache off.
  static JitOptions fromEnv();
};

struct JitStats {
  int64_t compiles = 0;     // modules added
  int64_t cacheHits = 0;    // of which were loaded from the object cache
  bool lastHitCache = false;
};

class Jit {
 public:
  explicit Jit(JitOptions options = JitOptions::fromEnv());  // throws JitError
  ~Jit();
  Jit(const Jit&) = delete;
  Jit& operator=(const Jit&) = delete;

  // Optimizes and compiles the module (or loads it from the cache) right away, so that
  // errors surface here and stats() is up to date on return. The module must come with
  // the context it was built in; both are owned by the JIT from now on. Symbol names
  // must be unique across all modules added to one Jit.
  void addModule(std::unique_ptr<llvm::Module> module, std::unique_ptr<llvm::LLVMContext> ctx);

  // The address of a function defined by an added module; throws JitError if missing.
  void* lookup(std::string_view name);
  template <class Fn>
  Fn* lookupAs(std::string_view name) {
    return reinterpret_cast<Fn*>(lookup(name));
  }

  // Sets the module's triple and data layout for this target and runs the O3 pipeline on
  // it in place (what addModule does before code generation): for --emit=llvm.
  void optimize(llvm::Module& module) const;
  // The assembly text of a module (run optimize() first to see what addModule runs).
  std::string assembly(llvm::Module& module) const;

  // The cache key addModule would use for this module (hex SHA-256).
  std::string cacheKey(const llvm::Module& module) const;

  const TargetSpec& target() const { return options_.target; }
  const std::string& cacheDir() const { return cacheDir_; }
  bool cacheEnabled() const { return options_.useCache; }
  JitStats stats() const;

 private:
  class DiskCache;
  class PerfMap;

  std::unique_ptr<llvm::TargetMachine> makeTargetMachine() const;
  void prepare(llvm::Module& module) const;

  JitOptions options_;
  std::string cacheDir_;
  std::unique_ptr<DiskCache> cache_;
  std::unique_ptr<PerfMap> perfMap_;  // null unless TGC_PERF_MAP=1
  std::unique_ptr<llvm::TargetMachine> tm_;  // for optimize() and assembly()
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  mutable std::mutex mutex_;
  JitStats stats_;
};

// What Jit::optimize and Jit::assembly do, without a JIT: for dumps (--emit=llvm|asm).
void optimizeModule(llvm::Module& module, const TargetSpec& target);
std::string moduleAssembly(llvm::Module& module, const TargetSpec& target);

// The directory the cache uses when JitOptions::cacheDir is empty.
std::string defaultCacheDir();

}  // namespace tgc::codegen
