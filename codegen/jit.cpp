#include "codegen/jit.h"

#include <llvm/ADT/SmallString.h>
#include <llvm/ADT/StringMap.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/ObjectCache.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ObjectTransformLayer.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Object/SymbolSize.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SHA256.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <fmt/format.h>
#include <unistd.h>

#ifndef TGC_VERSION
#define TGC_VERSION "unknown"
#endif

namespace tgc::codegen {

namespace fs = std::filesystem;

namespace {

// Named metadata carrying a module's cache key from addModule to the object cache.
constexpr const char* kCacheKeyMD = "tgc.cache_key";

void initLLVMOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

std::string errorText(llvm::Error err) { return llvm::toString(std::move(err)); }

template <class T>
T unwrap(llvm::Expected<T> v, std::string_view what) {
  if (!v) throw JitError(fmt::format("{}: {}", what, errorText(v.takeError())));
  return std::move(*v);
}

void check(llvm::Error err, std::string_view what) {
  if (err) throw JitError(fmt::format("{}: {}", what, errorText(std::move(err))));
}

std::vector<std::string> splitFeatures(const std::string& features) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < features.size()) {
    size_t comma = features.find(',', start);
    if (comma == std::string::npos) comma = features.size();
    if (comma > start) out.push_back(features.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::string moduleCacheKey(const llvm::Module& m) {
  if (auto* md = m.getNamedMetadata(kCacheKeyMD); md && md->getNumOperands() == 1)
    if (auto* node = md->getOperand(0); node->getNumOperands() == 1)
      if (auto* s = llvm::dyn_cast<llvm::MDString>(node->getOperand(0))) return s->getString().str();
  return {};
}

}  // namespace

// ---- TargetSpec -------------------------------------------------------------------------

TargetSpec TargetSpec::host() {
  TargetSpec spec;
  spec.triple = llvm::sys::getProcessTriple();
  spec.cpu = llvm::sys::getHostCPUName().str();
  // Sorted, so that the cache key does not depend on hash-map order.
  std::vector<std::string> feats;
  for (const auto& f : llvm::sys::getHostCPUFeatures())
    feats.push_back((f.getValue() ? "+" : "-") + f.getKey().str());
  std::sort(feats.begin(), feats.end(),
            [](const std::string& a, const std::string& b) { return a.substr(1) < b.substr(1); });
  for (const auto& f : feats) spec.features += (spec.features.empty() ? "" : ",") + f;
  return spec;
}

bool TargetSpec::hasFeature(std::string_view name) const {
  for (const auto& f : splitFeatures(features))
    if (f.size() == name.size() + 1 && f[0] == '+' && std::string_view(f).substr(1) == name)
      return true;
  return false;
}

int TargetSpec::vectorBits() const {
  if (hasFeature("avx512f")) return 512;
  if (hasFeature("avx")) return 256;
  return 128;
}

int TargetSpec::vectorRegisters() const { return hasFeature("avx512f") ? 32 : 16; }

// ---- options and cache directory --------------------------------------------------------

std::string defaultCacheDir() {
  if (const char* d = std::getenv("TGC_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/tgc";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/tgc";
  return (fs::temp_directory_path() / "tgc-cache").string();
}

JitOptions JitOptions::fromEnv() {
  JitOptions o;
  if (const char* v = std::getenv("TGC_NO_CACHE"); v && *v && std::string_view(v) != "0")
    o.useCache = false;
  return o;
}

// The object cache on disk: <dir>/<key>.o, written atomically (temporary file + rename),
// so concurrent processes never read half an object. Failures to write are ignored: the
// cache is an optimization, never a reason to fail a compile.
class Jit::DiskCache : public llvm::ObjectCache {
 public:
  explicit DiskCache(std::string dir) : dir_(std::move(dir)) {}

  void notifyObjectCompiled(const llvm::Module* m, llvm::MemoryBufferRef obj) override {
    std::string key = moduleCacheKey(*m);
    if (key.empty()) return;
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) return;
    static std::atomic<unsigned> counter{0};
    std::string tmp = fmt::format("{}/{}.o.tmp.{}.{}", dir_, key, getpid(), counter++);
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(obj.getBufferStart(), static_cast<std::streamsize>(obj.getBufferSize()));
      if (!out) {
        fs::remove(tmp, ec);
        return;
      }
    }
    fs::rename(tmp, path(key), ec);
    if (ec) fs::remove(tmp, ec);
  }

  std::unique_ptr<llvm::MemoryBuffer> getObject(const llvm::Module* m) override {
    std::string key = moduleCacheKey(*m);
    return key.empty() ? nullptr : load(key);
  }

  // The cached object for a key, or null when absent or not a readable object file.
  std::unique_ptr<llvm::MemoryBuffer> load(const std::string& key) {
    auto buf = llvm::MemoryBuffer::getFile(path(key), /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
    if (!buf) return nullptr;
    auto obj = llvm::object::ObjectFile::createObjectFile((*buf)->getMemBufferRef());
    if (!obj) {
      llvm::consumeError(obj.takeError());
      return nullptr;
    }
    return std::move(*buf);
  }

 private:
  std::string path(const std::string& key) const { return dir_ + "/" + key + ".o"; }
  std::string dir_;
};

// perf's map of JIT code: "<start> <size> <name>" lines in /tmp/perf-<pid>.map. Objects
// are scanned for their functions (offsets and sizes) before they are linked; once a
// global function of them has an address, every function of its section is placed
// relative to it (the linker moves a section as a whole).
class Jit::PerfMap {
 public:
  void scan(const llvm::MemoryBuffer& buffer) {
    auto obj = llvm::object::ObjectFile::createObjectFile(buffer.getMemBufferRef());
    if (!obj) {
      llvm::consumeError(obj.takeError());
      return;
    }
    std::lock_guard lock(mutex_);
    for (const auto& [sym, size] : llvm::object::computeSymbolSizes(**obj)) {
      auto type = sym.getType();
      auto name = sym.getName();
      auto value = sym.getValue();
      auto section = sym.getSection();
      if (!type || !name || !value || !section) {
        llvm::consumeError(type.takeError());
        llvm::consumeError(name.takeError());
        llvm::consumeError(value.takeError());
        llvm::consumeError(section.takeError());
        continue;
      }
      if (*type != llvm::object::SymbolRef::ST_Function || size == 0 || *section == (*obj)->section_end())
        continue;
      pending_.push_back({name->str(), *value, size, (*section)->getIndex()});
    }
  }

  void flush(const std::string& anchor, uint64_t address) {
    std::lock_guard lock(mutex_);
    const Symbol* a = nullptr;
    for (const Symbol& s : pending_)
      if (s.name == anchor) a = &s;
    if (a) {
      static std::mutex fileMutex;  // one file for every Jit of the process
      std::lock_guard fileLock(fileMutex);
      std::ofstream out(fmt::format("/tmp/perf-{}.map", getpid()), std::ios::app);
      for (const Symbol& s : pending_)
        if (s.section == a->section)
          out << fmt::format("{:x} {:x} {}\n", address - a->value + s.value, s.size, s.name);
    }
    pending_.clear();
  }

 private:
  struct Symbol {
    std::string name;
    uint64_t value, size, section;
  };
  std::mutex mutex_;
  std::vector<Symbol> pending_;
};

// ---- Jit --------------------------------------------------------------------------------

Jit::Jit(JitOptions options) : options_(std::move(options)) {
  initLLVMOnce();
  if (options_.useCache) {
    cacheDir_ = options_.cacheDir.empty() ? defaultCacheDir() : options_.cacheDir;
    cache_ = std::make_unique<DiskCache>(cacheDir_);
  }
  tm_ = makeTargetMachine();

  llvm::orc::JITTargetMachineBuilder jtmb{llvm::Triple(options_.target.triple)};
  jtmb.setCPU(options_.target.cpu);
  jtmb.addFeatures(splitFeatures(options_.target.features));
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  DiskCache* cache = cache_.get();
  jit_ = unwrap(
      llvm::orc::LLJITBuilder()
          .setJITTargetMachineBuilder(std::move(jtmb))
          .setCompileFunctionCreator(
              [cache](llvm::orc::JITTargetMachineBuilder b)
                  -> llvm::Expected<std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
                auto tm = b.createTargetMachine();
                if (!tm) return tm.takeError();
                return std::make_unique<llvm::orc::TMOwningSimpleCompiler>(std::move(*tm), cache);
              })
          .create(),
      "cannot create the LLVM JIT");
  if (const char* v = std::getenv("TGC_PERF_MAP"); v && std::string_view(v) == "1") {
    perfMap_ = std::make_unique<PerfMap>();
    jit_->getObjTransformLayer().setTransform(
        [map = perfMap_.get()](std::unique_ptr<llvm::MemoryBuffer> obj) -> llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> {
          map->scan(*obj);
          return obj;
        });
  }
}

Jit::~Jit() = default;

namespace {

std::unique_ptr<llvm::TargetMachine> targetMachineFor(const TargetSpec& spec) {
  initLLVMOnce();
  std::string err;
  const auto* target = llvm::TargetRegistry::lookupTarget(spec.triple, err);
  if (!target) throw JitError(fmt::format("no LLVM target for {}: {}", spec.triple, err));
  llvm::TargetOptions opts;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      spec.triple, spec.cpu, spec.features, opts, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (!tm) throw JitError("cannot create an LLVM target machine for " + spec.triple);
  return tm;
}

void prepareFor(llvm::Module& m, const TargetSpec& spec, const llvm::TargetMachine& tm) {
  m.setTargetTriple(spec.triple);
  m.setDataLayout(tm.createDataLayout());
  // Per-function attributes: what the inliner, the vectorizer and the code generator read.
  for (auto& f : m) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", spec.cpu);
    f.addFnAttr("target-features", spec.features);
  }
}

void optimizeWith(llvm::Module& m, const TargetSpec& spec, llvm::TargetMachine& tm) {
  prepareFor(m, spec, tm);
  std::string verifyErrors;
  llvm::raw_string_ostream vos(verifyErrors);
  if (llvm::verifyModule(m, &vos))
    throw JitError(fmt::format("invalid LLVM module '{}': {}", m.getModuleIdentifier(), verifyErrors));

  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = true;
  llvm::PassBuilder pb(&tm, pto);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(m, mam);
}

std::string assemblyWith(llvm::Module& m, const TargetSpec& spec) {
  auto tm = targetMachineFor(spec);  // code generation changes the machine's state: a fresh one
  prepareFor(m, spec, *tm);
  auto clone = llvm::CloneModule(m);  // code generation rewrites the module it runs on
  llvm::SmallString<0> text;
  llvm::raw_svector_ostream os(text);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    throw JitError("the LLVM target cannot emit assembly");
  pm.run(*clone);
  return std::string(text.str());
}

}  // namespace

void optimizeModule(llvm::Module& m, const TargetSpec& target) {
  auto tm = targetMachineFor(target);
  optimizeWith(m, target, *tm);
}

std::string moduleAssembly(llvm::Module& m, const TargetSpec& target) { return assemblyWith(m, target); }

std::unique_ptr<llvm::TargetMachine> Jit::makeTargetMachine() const { return targetMachineFor(options_.target); }

void Jit::prepare(llvm::Module& m) const { prepareFor(m, options_.target, *tm_); }

void Jit::optimize(llvm::Module& m) const { optimizeWith(m, options_.target, *tm_); }

std::string Jit::assembly(llvm::Module& m) const { return assemblyWith(m, options_.target); }

std::string Jit::cacheKey(const llvm::Module& m) const {
  std::string ir;
  llvm::raw_string_ostream os(ir);
  m.print(os, nullptr);
  os.flush();
  llvm::SHA256 sha;
  for (std::string_view part : {std::string_view("tgc " TGC_VERSION " llvm " LLVM_VERSION_STRING),
                                std::string_view(options_.target.triple),
                                std::string_view(options_.target.cpu),
                                std::string_view(options_.target.features), std::string_view(ir)}) {
    sha.update(part);
    sha.update(llvm::StringRef("\0", 1));  // separator: no two splits hash alike
  }
  auto digest = sha.final();
  std::string hex;
  for (uint8_t b : digest) hex += fmt::format("{:02x}", b);
  return hex;
}

void Jit::addModule(std::unique_ptr<llvm::Module> module, std::unique_ptr<llvm::LLVMContext> ctx) {
  if (!module || !ctx) throw JitError("addModule: null module or context");
  std::lock_guard lock(mutex_);
  prepare(*module);
  const std::string key = cacheKey(*module);
  const std::string what = fmt::format("cannot compile LLVM module '{}'", module->getModuleIdentifier());

  // A symbol to look up, which makes ORC compile and link the module now, not lazily.
  std::string anchor;
  for (const auto& f : *module)
    if (!f.isDeclaration() && !f.hasLocalLinkage()) {
      anchor = f.getName().str();
      break;
    }

  bool hit = false;
  if (cache_) {
    if (auto obj = cache_->load(key)) {
      check(jit_->addObjectFile(std::move(obj)), what);
      hit = true;
    }
  }
  if (!hit) {
    optimize(*module);
    if (cache_) {
      auto& c = *ctx;
      module->getOrInsertNamedMetadata(kCacheKeyMD)
          ->addOperand(llvm::MDNode::get(c, llvm::MDString::get(c, key)));
    }
    check(jit_->addIRModule(llvm::orc::ThreadSafeModule(std::move(module), std::move(ctx))), what);
  }
  if (!anchor.empty()) {
    auto addr = unwrap(jit_->lookup(anchor), what);
    if (perfMap_) perfMap_->flush(anchor, addr.getValue());
  }

  ++stats_.compiles;
  if (hit) ++stats_.cacheHits;
  stats_.lastHitCache = hit;
}

void* Jit::lookup(std::string_view name) {
  auto addr = jit_->lookup(llvm::StringRef(name.data(), name.size()));
  if (!addr) throw JitError(fmt::format("JIT symbol '{}' not found: {}", name, errorText(addr.takeError())));
  return addr->toPtr<void*>();
}

JitStats Jit::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace tgc::codegen
