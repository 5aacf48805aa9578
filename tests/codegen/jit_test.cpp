#include "codegen/jit.h"

#include <gtest/gtest.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

namespace tgc::codegen {
namespace {

namespace fs = std::filesystem;

struct Built {
  std::unique_ptr<llvm::LLVMContext> ctx = std::make_unique<llvm::LLVMContext>();
  std::unique_ptr<llvm::Module> module;
};

// i64 name(i64 x) { return x * mul + add; }
Built affineModule(const std::string& name, int64_t mul, int64_t add) {
  Built b;
  b.module = std::make_unique<llvm::Module>("test_" + name, *b.ctx);
  llvm::IRBuilder<> ir(*b.ctx);
  auto* i64 = ir.getInt64Ty();
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(i64, {i64}, false),
                                    llvm::Function::ExternalLinkage, name, *b.module);
  ir.SetInsertPoint(llvm::BasicBlock::Create(*b.ctx, "entry", fn));
  ir.CreateRet(ir.CreateAdd(ir.CreateMul(fn->getArg(0), ir.getInt64(mul)), ir.getInt64(add)));
  return b;
}

// A fresh empty directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "tgc-jit-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  int files() const {
    int n = 0;
    for (auto& e : fs::directory_iterator(path_)) n += e.is_regular_file();
    return n;
  }

 private:
  std::string path_;
};

JitOptions cachedIn(const std::string& dir) {
  JitOptions o;
  o.cacheDir = dir;
  return o;
}

JitOptions uncached() {
  JitOptions o;
  o.useCache = false;
  return o;
}

TEST(Jit, CompilesAndCallsAFunction) {
  Jit jit(uncached());
  auto b = affineModule("affine", 3, 4);
  jit.addModule(std::move(b.module), std::move(b.ctx));
  auto* fn = jit.lookupAs<int64_t(int64_t)>("affine");
  EXPECT_EQ(fn(5), 19);
  EXPECT_EQ(fn(-2), -2);
  EXPECT_EQ(jit.stats().compiles, 1);
  EXPECT_FALSE(jit.stats().lastHitCache);
}

TEST(Jit, HostTargetIsDetected) {
  TargetSpec t = TargetSpec::host();
  EXPECT_FALSE(t.triple.empty());
  EXPECT_FALSE(t.cpu.empty());
  EXPECT_NE(t.features.find('+'), std::string::npos);
  EXPECT_TRUE(t.vectorBits() == 128 || t.vectorBits() == 256 || t.vectorBits() == 512);
  EXPECT_EQ(t.hasFeature("avx512f"), t.vectorBits() == 512);
  TargetSpec fake{"x86_64-unknown-linux-gnu", "x", "+avx2,-avx512f,+fma"};
  EXPECT_TRUE(fake.hasFeature("avx2"));
  EXPECT_FALSE(fake.hasFeature("avx512f"));
  EXPECT_FALSE(fake.hasFeature("avx"));
  EXPECT_EQ(fake.vectorBits(), 128);
}

TEST(Jit, ObjectCacheHitsOnTheSameModuleAndMissesAfterAChange) {
  TempDir dir;
  {
    Jit jit(cachedIn(dir.path()));
    auto b = affineModule("affine", 3, 4);
    jit.addModule(std::move(b.module), std::move(b.ctx));
    EXPECT_FALSE(jit.stats().lastHitCache);
    EXPECT_EQ(jit.lookupAs<int64_t(int64_t)>("affine")(1), 7);
  }
  EXPECT_EQ(dir.files(), 1);
  {
    // A new JIT (as in a second run of the compiler) finds the object on disk.
    Jit jit(cachedIn(dir.path()));
    auto b = affineModule("affine", 3, 4);
    jit.addModule(std::move(b.module), std::move(b.ctx));
    EXPECT_TRUE(jit.stats().lastHitCache);
    EXPECT_EQ(jit.stats().cacheHits, 1);
    EXPECT_EQ(jit.lookupAs<int64_t(int64_t)>("affine")(1), 7);

    // A changed constant is a different module: a miss, and the new code runs.
    auto c = affineModule("affine2", 3, 5);
    jit.addModule(std::move(c.module), std::move(c.ctx));
    EXPECT_FALSE(jit.stats().lastHitCache);
    EXPECT_EQ(jit.stats().cacheHits, 1);
    EXPECT_EQ(jit.stats().compiles, 2);
    EXPECT_EQ(jit.lookupAs<int64_t(int64_t)>("affine2")(1), 8);
  }
  EXPECT_EQ(dir.files(), 2);
}

TEST(Jit, CacheKeyCoversTheTarget) {
  auto b = affineModule("affine", 3, 4);
  Jit host(uncached());
  JitOptions other = uncached();
  other.target.features += ",+some-other-feature";
  Jit jit2(other);
  EXPECT_NE(host.cacheKey(*b.module), jit2.cacheKey(*b.module));
  EXPECT_EQ(host.cacheKey(*b.module), host.cacheKey(*b.module));
  EXPECT_EQ(host.cacheKey(*b.module).size(), 64u);
}

TEST(Jit, DisabledCacheWritesNothing) {
  TempDir dir;
  JitOptions o = cachedIn(dir.path());
  o.useCache = false;
  for (int run = 0; run < 2; ++run) {
    Jit jit(o);
    EXPECT_FALSE(jit.cacheEnabled());
    auto b = affineModule("affine", 2, 0);
    jit.addModule(std::move(b.module), std::move(b.ctx));
    EXPECT_FALSE(jit.stats().lastHitCache);
    EXPECT_EQ(jit.lookupAs<int64_t(int64_t)>("affine")(21), 42);
  }
  EXPECT_EQ(dir.files(), 0);
}

TEST(Jit, TgcNoCacheTurnsTheCacheOff) {
  setenv("TGC_NO_CACHE", "1", 1);
  EXPECT_FALSE(JitOptions::fromEnv().useCache);
  setenv("TGC_NO_CACHE", "0", 1);
  EXPECT_TRUE(JitOptions::fromEnv().useCache);
  unsetenv("TGC_NO_CACHE");
  EXPECT_TRUE(JitOptions::fromEnv().useCache);
}

TEST(Jit, CorruptCacheEntryIsRecompiled) {
  TempDir dir;
  Jit probe(cachedIn(dir.path()));
  auto b = affineModule("affine", 5, 1);
  std::string key = probe.cacheKey(*b.module);
  {
    std::FILE* f = std::fopen((dir.path() + "/" + key + ".o").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("not an object file", f);
    std::fclose(f);
  }
  Jit jit(cachedIn(dir.path()));
  auto c = affineModule("affine", 5, 1);
  jit.addModule(std::move(c.module), std::move(c.ctx));
  EXPECT_FALSE(jit.stats().lastHitCache);
  EXPECT_EQ(jit.lookupAs<int64_t(int64_t)>("affine")(2), 11);
}

TEST(Jit, MissingSymbolIsAnError) {
  Jit jit(uncached());
  auto b = affineModule("affine", 1, 1);
  jit.addModule(std::move(b.module), std::move(b.ctx));
  try {
    jit.lookup("no_such_function");
    FAIL() << "expected JitError";
  } catch (const JitError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_function"), std::string::npos) << e.what();
  }
}

TEST(Jit, InvalidModuleIsAnError) {
  Jit jit(uncached());
  Built b;
  b.module = std::make_unique<llvm::Module>("broken", *b.ctx);
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(llvm::Type::getVoidTy(*b.ctx), false),
                                    llvm::Function::ExternalLinkage, "broken", *b.module);
  llvm::BasicBlock::Create(*b.ctx, "entry", fn);  // no terminator
  try {
    jit.addModule(std::move(b.module), std::move(b.ctx));
    FAIL() << "expected JitError";
  } catch (const JitError& e) {
    EXPECT_NE(std::string(e.what()).find("invalid LLVM module 'broken'"), std::string::npos) << e.what();
  }
}

// Calls into the process (libc) resolve: generated code can use memset, expf, ...
TEST(Jit, ResolvesProcessSymbols) {
  Jit jit(uncached());
  Built b;
  b.module = std::make_unique<llvm::Module>("calls_libc", *b.ctx);
  llvm::IRBuilder<> ir(*b.ctx);
  auto* i64 = ir.getInt64Ty();
  auto* ptr = ir.getPtrTy();
  auto strlenFn = b.module->getOrInsertFunction("strlen", llvm::FunctionType::get(i64, {ptr}, false));
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(i64, {ptr}, false),
                                    llvm::Function::ExternalLinkage, "len_plus_one", *b.module);
  ir.SetInsertPoint(llvm::BasicBlock::Create(*b.ctx, "entry", fn));
  ir.CreateRet(ir.CreateAdd(ir.CreateCall(strlenFn, {fn->getArg(0)}), ir.getInt64(1)));
  jit.addModule(std::move(b.module), std::move(b.ctx));
  EXPECT_EQ(jit.lookupAs<int64_t(const char*)>("len_plus_one")("hello"), 6);
}

TEST(Jit, OptimizeAndAssemblyDumps) {
  Jit jit(uncached());
  auto b = affineModule("affine", 4, 0);
  jit.optimize(*b.module);
  std::string ir;
  llvm::raw_string_ostream os(ir);
  b.module->print(os, nullptr);
  // x * 4 + 0 is strength-reduced at O3.
  EXPECT_NE(ir.find("shl"), std::string::npos) << ir;
  EXPECT_NE(ir.find("target-cpu"), std::string::npos);
  std::string asmText = jit.assembly(*b.module);
  EXPECT_NE(asmText.find("affine:"), std::string::npos) << asmText;
  EXPECT_NE(asmText.find("ret"), std::string::npos) << asmText;
}

}  // namespace
}  // namespace tgc::codegen
