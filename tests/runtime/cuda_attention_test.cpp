// Fused attention on the GPU (runtime/cuda/cuda_attention.h). Without a GPU: the kernels
// compile through NVRTC to PTX for compute_90 and ptxas assembles them for sm_90 with no
// warning and no spill (their register counts are printed), and they run in a host
// emulation of the CUDA execution model against the interpreter. With a GPU:
// fused_attention and fused_attention_grad against the reference interpreter at T = 1, 7,
// 64, 257, 1024, with causal and broadcast masks, fully masked rows, dropout on and off,
// f32 and f64; and forward/backward TFLOP/s at head dim 64, L = 512...4096 (printed).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "codegen/cuda/nvrtc.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "runtime/cuda/cuda_attention.h"
#include "runtime/cuda/cuda_executable.h"
#include "tests/runtime/cuda_test_util.h"
#include "tests/runtime/exec_test_util.h"

using namespace tgc;
using namespace tgc::runtime::cuda;

namespace {

// ptxas -v's output for `ptx` (assembled for sm_90) and its exit status.
std::pair<int, std::string> ptxasVerbose(const std::string& ptxas, const std::string& ptx) {
  const std::string dir = ::testing::TempDir();
  const std::string in = dir + "tgc_attention.ptx", log = dir + "tgc_attention.log";
  if (FILE* f = std::fopen(in.c_str(), "w")) {
    std::fwrite(ptx.data(), 1, ptx.size(), f);
    std::fclose(f);
  }
  const int status = std::system(
      (ptxas + " -arch=sm_90 -v --warn-on-spills -o /dev/null " + in + " > " + log + " 2>&1")
          .c_str());
  std::string out;
  if (FILE* f = std::fopen(log.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    std::fclose(f);
  }
  return {status, out};
}

TEST(CudaAttentionSource, CompilesToPtxAndPassesPtxasWithoutSpills) {
  TGC_REQUIRE_NVRTC();
  const std::string ptxas = tgc::testing::findPtxas();
  if (ptxas.empty()) GTEST_SKIP() << "ptxas not found (set TGC_PTXAS or CUDA_HOME)";
  codegen::cuda::NvrtcOptions no;
  no.useCache = false;
  const auto ptx = codegen::cuda::compilePtx(attentionSource(), "tgc_attention", "compute_90", no);
  EXPECT_EQ(ptx.log.find("warning"), std::string::npos) << ptx.log;
  for (const std::string& name : attentionKernelNames())
    EXPECT_NE(ptx.image.find(".entry " + name + "("), std::string::npos) << name;
  const auto [status, log] = ptxasVerbose(ptxas, ptx.image);
  ASSERT_EQ(status, 0) << log;
  EXPECT_EQ(log.find("warning"), std::string::npos) << log;
  // Per kernel: "Compiling entry function 'NAME'", then its spills and registers.
  const std::regex entry(
      R"(Compiling entry function '(\w+)'[\s\S]*?(\d+) bytes spill stores, (\d+) bytes spill loads[\s\S]*?Used (\d+) registers)");
  int seen = 0;
  for (std::sregex_iterator it(log.begin(), log.end(), entry), end; it != end; ++it) {
    const auto& m = *it;
    ++seen;
    EXPECT_EQ(m[2].str(), "0") << m[1] << " spills";
    EXPECT_EQ(m[3].str(), "0") << m[1] << " spills";
    std::printf("  %s: %s registers, no spills\n", m[1].str().c_str(), m[4].str().c_str());
  }
  EXPECT_EQ(seen, 4) << log;
}

// allClose, with -inf (lse of a fully masked row) required at the same elements.
::testing::AssertionResult closeWithInfs(const Tensor& got, const Tensor& want, double tol) {
  if (got.numel() != want.numel()) return ::testing::AssertionFailure() << "sizes differ";
  Tensor a = got, b = want;
  for (int64_t e = 0; e < a.numel(); ++e) {
    const bool ia = std::isinf(a.getF(e)), ib = std::isinf(b.getF(e));
    if (ia != ib || (ia && a.getF(e) != b.getF(e)))
      return ::testing::AssertionFailure()
             << "element " << e << ": " << a.getF(e) << " vs " << b.getF(e);
    if (ia) a.setF(e, 0), b.setF(e, 0);
  }
  return tgc::testing::allClose(a, b, tol, tol);
}

// One configuration of the device tests.
struct Case {
  int64_t batch, heads, t, d, dv;
  bool causal, mask, dropout;
  bool bthd = false;  // layout bthd: q, k, v, out, dout and the gradients [B,T,H,D]
  bool bias = false;  // a per-head bias [1,H,T,T] with bias_grad: dbias the fourth gradient
};

// fused_attention and its gradient on q [B,H,T,D], k, v [B,H,T,DV] (mask bool[B,1,T,T]), or
// in layout bthd on q [B,T,H,D], k, v [B,T,H,DV].
std::string attentionGraph(const Case& c, const std::string& dt) {
  const auto [d1, d2] = c.bthd ? std::pair{c.t, c.heads} : std::pair{c.heads, c.t};
  const std::string qs = fmt::format("{}[{},{},{},{}]", dt, c.batch, d1, d2, c.d);
  const std::string vs = fmt::format("{}[{},{},{},{}]", dt, c.batch, d1, d2, c.dv);
  const std::string ls = fmt::format("{}[{},{},{}]", dt, c.batch, c.heads, c.t);
  std::string extra, attrs = c.bthd ? "layout=\"bthd\", scale=0.3" : "scale=0.3";
  if (c.causal) attrs += ", causal=true";
  if (c.mask) {
    extra += ", %m";
    attrs += ", has_mask=true";
  }
  if (c.bias) {
    extra += ", %bias";
    attrs += ", has_bias=true";
  }
  if (c.dropout) {
    extra += ", %seed, %offset";
    attrs += ", p_drop=0.2";
  }
  const std::string bs = fmt::format("{}[1,{},{},{}]", dt, c.heads, c.t, c.t);
  std::string g = "graph @attn {\n";
  g += fmt::format("  %q = input() : {}\n  %k = input() : {}\n  %v = input() : {}\n", qs, qs, vs);
  g += fmt::format("  %dout = input() : {}\n", vs);
  if (c.mask) g += fmt::format("  %m = input() : bool[{},1,{},{}]\n", c.batch, c.t, c.t);
  if (c.bias) g += fmt::format("  %bias = input() : {}\n", bs);
  if (c.dropout) g += "  %seed = input() : i64[]\n  %offset = input() : i64[]\n";
  g += fmt::format("  %o, %lse = fused_attention(%q, %k, %v{}) {{{}}} : {}, {}\n", extra, attrs,
                   vs, ls);
  if (c.bias) {
    g += fmt::format(
        "  %dq, %dk, %dv, %dbias = fused_attention_grad(%q, %k, %v, %o, %lse, %dout{}) "
        "{{{}, bias_grad=true}} : {}, {}, {}, {}\n",
        extra, attrs, qs, qs, vs, bs);
    g += "  return %o, %lse, %dq, %dk, %dv, %dbias\n}\n";
    return g;
  }
  g += fmt::format(
      "  %dq, %dk, %dv = fused_attention_grad(%q, %k, %v, %o, %lse, %dout{}) {{{}}} : {}, {}, "
      "{}\n",
      extra, attrs, qs, qs, vs);
  g += "  return %o, %lse, %dq, %dk, %dv\n}\n";
  return g;
}

void checkAgainstInterpreter(const Case& c, const std::string& dt) {
  SCOPED_TRACE(fmt::format("{} B={} H={} T={} D={} DV={} causal={} mask={} dropout={} bthd={} bias={}",
                           dt, c.batch, c.heads, c.t, c.d, c.dv, c.causal, c.mask, c.dropout,
                           c.bthd, c.bias));
  auto g = parseGraph(attentionGraph(c, dt), "attn.tir");
  auto in = tgc::testing::randomInputs(*g, 5);
  if (c.mask) {  // random, with query 0 of batch item 0 fully masked (lse -inf, zeros)
    Tensor& m = in.at("m");
    for (int64_t e = 0; e < m.numel(); ++e) m.setI(e, (e * 7919 % 13) < 10 ? 1 : 0);
    for (int64_t j = 0; j < c.t; ++j) m.setI(j, 0);
  }
  if (c.dropout) {
    in.at("seed").setI(0, 0x1234567890abcdefLL);
    in.at("offset").setI(0, 977);
  }
  auto want = Interpreter().run(*g, in);
  auto got = CudaExecutable::compile(*g)->run(in);
  ASSERT_EQ(got.size(), want.size());
  const double tol = dt == "f32" ? 2e-4 : 1e-10;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(closeWithInfs(got[i], want[i], tol)) << g->outputs()[i]->name();
}

TEST(CudaAttentionOnDevice, ForwardAndBackwardMatchTheInterpreter) {
  TGC_REQUIRE_CUDA_DEVICE();
  TGC_REQUIRE_NVRTC();
  const Case cases[] = {
      {2, 2, 1, 16, 16, false, false, false},  {2, 2, 7, 40, 24, false, true, false},
      {2, 2, 7, 40, 24, true, false, true},    {1, 3, 64, 64, 64, true, true, false},
      {1, 3, 64, 64, 64, false, false, true},  {2, 1, 257, 128, 128, false, true, true},
      {2, 1, 257, 33, 65, true, false, false}, {1, 2, 1024, 64, 64, true, false, false},
      {1, 1, 1024, 64, 64, false, true, true},
      // Layout bthd.
      {2, 3, 7, 40, 24, true, true, true, true},  {2, 4, 64, 64, 64, true, true, true, true},
      {1, 2, 257, 64, 64, false, true, false, true},
      // A per-head bias and its gradient.
      {2, 2, 65, 64, 64, true, true, true, false, true}, {2, 4, 64, 64, 64, false, false, false, true, true},
  };
  for (const std::string dt : {"f32", "f64"})
    for (const Case& c : cases) checkAgainstInterpreter(c, dt);
}

// The CUDA names the kernels use, for the host: one std::thread per CUDA thread (256 per
// block), blocks one after another, __syncthreads() a block barrier, warp shuffles through
// an exchange with a barrier per warp (warps may take different branches), atomicAdd an
// atomic_ref. It checks the kernels' indexing, tiling, masking, online softmax and
// dropout stream, not the GPU's arithmetic.
constexpr const char* kEmulation = R"EMU(
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
using std::min;
struct tgc_emu_dim3 { unsigned x = 0, y = 0, z = 0; };
thread_local tgc_emu_dim3 threadIdx, blockIdx;
std::barrier<>* tgc_emu_block = nullptr;
std::barrier<>* tgc_emu_warp[8];
unsigned long long tgc_emu_exchange[256];
alignas(16) unsigned char tgc_emu_smem[1 << 18];
#define TGC_ATTN_SHARED unsigned char* smem = tgc_emu_smem
inline void __syncthreads() { tgc_emu_block->arrive_and_wait(); }
template <class T> T tgc_emu_shfl(T v, unsigned src) {
  const unsigned w = threadIdx.x / 32;
  std::memcpy(&tgc_emu_exchange[threadIdx.x], &v, sizeof(T));
  tgc_emu_warp[w]->arrive_and_wait();
  T o;
  std::memcpy(&o, &tgc_emu_exchange[w * 32 + src], sizeof(T));
  tgc_emu_warp[w]->arrive_and_wait();
  return o;
}
template <class T> T __shfl_xor_sync(unsigned, T v, int o) {
  return tgc_emu_shfl(v, (threadIdx.x % 32) ^ static_cast<unsigned>(o));
}
template <class T> T __shfl_sync(unsigned, T v, int lane) {
  return tgc_emu_shfl(v, static_cast<unsigned>(lane));
}
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
template <class T> T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
inline void tgc_emu_launch(unsigned grid, const std::function<void()>& body) {
  std::barrier<> block(256);
  tgc_emu_block = &block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  for (int w = 0; w < 8; ++w) {
    warps.push_back(std::make_unique<std::barrier<>>(32));
    tgc_emu_warp[w] = warps.back().get();
  }
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 256; ++t)
    threads.emplace_back([&, t] {
      threadIdx = {t, 0, 0};
      for (unsigned b = 0; b < grid; ++b) {
        blockIdx = {b, 0, 0};
        body();
        block.arrive_and_wait();
      }
    });
  for (auto& th : threads) th.join();
}
)EMU";

// The kernels built as a host library against kEmulation; null (and `why`) on failure.
void* buildEmulation(std::string& why) {
  namespace fs = std::filesystem;
  const char* cxx = std::getenv("CXX");
  const std::string compiler = cxx && *cxx ? cxx : "c++";
  if (std::system(fmt::format("{} --version > /dev/null 2>&1", compiler).c_str()) != 0) {
    why = "no host C++ compiler (" + compiler + ") to run the emulation";
    return nullptr;
  }
  std::string source = std::string(kEmulation) + attentionSource();
  for (const std::string& name : attentionKernelNames())
    source += fmt::format(
        "extern \"C\" void emu_{0}(const void* params, unsigned grid) {{\n  AttnParams p;\n"
        "  std::memcpy(&p, params, sizeof p);\n  tgc_emu_launch(grid, [&] {{ {0}(p); }});\n}}\n",
        name);
  const fs::path dir = fs::temp_directory_path() / fmt::format("tgc-attn-emu-{}", getpid());
  fs::create_directories(dir);
  std::ofstream(dir / "attn.cpp") << source;
  const std::string build = fmt::format(
      "{0} -std=c++20 -O1 -w -shared -fPIC -pthread {1}/attn.cpp -o {1}/attn.so > "
      "{1}/build.log 2>&1",
      compiler, dir.string());
  if (std::system(build.c_str()) != 0) {
    std::ifstream log(dir / "build.log");
    why = "the emulation does not build: " +
          std::string(std::istreambuf_iterator<char>(log), {}).substr(0, 4000);
    return nullptr;
  }
  void* lib = dlopen((dir / "attn.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) why = dlerror();
  fs::remove_all(dir);
  return lib;
}

// Runs the node's kernel in the emulation on host tensors (operands, then results).
void emulate(void* lib, const Node& n, const std::vector<const Tensor*>& operands,
             std::vector<Tensor>& results) {
  const AttentionLaunch l = attentionLaunchFor(n);
  std::vector<CUdeviceptr> in, out;
  for (const Tensor* t : operands) in.push_back(reinterpret_cast<CUdeviceptr>(t->data()));
  for (Tensor& t : results) out.push_back(reinterpret_cast<CUdeviceptr>(t.data()));
  AttnParams p = l.withPointers(in.data(), out.data());
  p.maskBase = reinterpret_cast<CUdeviceptr>(l.maskBase.data());
  p.biasBase = reinterpret_cast<CUdeviceptr>(l.biasBase.data());
  using Launch = void (*)(const void*, unsigned);
  auto fn = reinterpret_cast<Launch>(dlsym(lib, ("emu_" + l.kernel).c_str()));
  ASSERT_NE(fn, nullptr) << l.kernel;
  fn(&p, l.blocks);  // results arrive zeroed (the backward adds into dq and dbias)
}

TEST(CudaAttentionEmulated, ForwardAndBackwardMatchTheInterpreter) {
  std::string why;
  void* lib = buildEmulation(why);
  if (!lib) GTEST_SKIP() << why;
  const std::pair<Case, std::string> cases[] = {
      {{1, 2, 7, 8, 8, false, false, false}, "f32"},
      {{2, 1, 40, 40, 24, true, true, true}, "f32"},
      {{1, 1, 33, 16, 33, false, true, true}, "f64"},
      {{1, 1, 5, 8, 8, true, false, false}, "f64"},
      // Layout bthd: heads interleaved in the rows (a stride off by a head or a row fails).
      {{2, 3, 7, 8, 8, true, true, true, true}, "f32"},
      {{1, 3, 40, 16, 24, false, true, false, true}, "f64"},
      // A per-head bias shared by the batch items, and its gradient (atomic adds).
      {{2, 2, 40, 8, 8, true, true, true, false, true}, "f32"},
      {{2, 3, 7, 8, 8, false, false, false, true, true}, "f64"},
  };
  for (const auto& [c, dt] : cases) {
    SCOPED_TRACE(fmt::format("{} B={} H={} T={} D={} DV={} causal={} mask={} dropout={} bthd={} bias={}",
                             dt, c.batch, c.heads, c.t, c.d, c.dv, c.causal, c.mask, c.dropout,
                             c.bthd, c.bias));
    auto g = parseGraph(attentionGraph(c, dt), "attn.tir");
    auto in = tgc::testing::randomInputs(*g, 5);
    if (c.mask) {
      Tensor& m = in.at("m");
      for (int64_t e = 0; e < m.numel(); ++e) m.setI(e, (e * 7919 % 13) < 10 ? 1 : 0);
      for (int64_t j = 0; j < c.t; ++j) m.setI(j, 0);
    }
    if (c.dropout) {
      in.at("seed").setI(0, 0x1234567890abcdefLL);
      in.at("offset").setI(0, 977);
    }
    const auto want = Interpreter().run(*g, in);
    const Node& fwd = *g->outputs()[0]->def();
    const Node& bwd = *g->outputs()[2]->def();
    std::map<const Value*, Tensor> got;
    auto operandsOf = [&](const Node& n) {
      std::vector<const Tensor*> ops;
      for (const Value* v : n.operands())
        ops.push_back(got.count(v) ? &got.at(v) : &in.at(v->name()));
      return ops;
    };
    auto run = [&](const Node& n) {
      std::vector<Tensor> res;
      for (size_t i = 0; i < n.numResults(); ++i) res.emplace_back(n.result(i)->type());
      emulate(lib, n, operandsOf(n), res);
      for (size_t i = 0; i < res.size(); ++i) got.emplace(n.result(i), std::move(res[i]));
    };
    run(fwd);
    run(bwd);
    const double tol = dt == "f32" ? 2e-5 : 1e-12;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(closeWithInfs(got.at(g->outputs()[i]), want[i], tol)) << g->outputs()[i]->name();
  }
  dlclose(lib);
}

// Forward and backward TFLOP/s at head dim 64, 16 heads, L = 512...4096, f32 (printed; the
// FLOPs count the matrix products: 4 L^2 d per head forward, 2.5x that backward). Zero q
// and k make every score 0, so lse must come back as log(L) exactly enough.
TEST(CudaAttentionOnDevice, ThroughputAtHeadDim64) {
  TGC_REQUIRE_CUDA_DEVICE();
  TGC_REQUIRE_NVRTC();
  auto dev = Device::open();
  CudaAttention attention(dev);
  Stream stream(dev);
  for (const int64_t len : {512, 1024, 2048, 4096}) {
    const Case c{2, 8, len, 64, 64, false, false, false};
    auto g = parseGraph(attentionGraph(c, "f32"), "attn.tir");
    const Node& fwdNode = *g->outputs()[0]->def();
    const Node& bwdNode = *g->outputs()[2]->def();
    const int64_t rows = c.batch * c.heads * len, bytes = rows * c.d * 4;
    std::vector<std::unique_ptr<DeviceBuffer>> bufs;
    auto buffer = [&](int64_t n) {
      bufs.push_back(std::make_unique<DeviceBuffer>(dev, n, "attention bench"));
      stream.fill(bufs.back()->ptr(), 0, n);
      return bufs.back()->ptr();
    };
    const CUdeviceptr q = buffer(bytes), k = buffer(bytes), v = buffer(bytes), dout = buffer(bytes),
                      o = buffer(bytes), lse = buffer(rows * 4), dq = buffer(bytes),
                      dk = buffer(bytes), dv = buffer(bytes);
    const CUdeviceptr fin[] = {q, k, v}, fout[] = {o, lse};
    const CUdeviceptr bin[] = {q, k, v, o, lse, dout}, bout[] = {dq, dk, dv};
    const auto fwd = attention.bind(fwdNode), bwd = attention.bind(bwdNode);
    fwd(fin, fout, stream);  // warm-up
    bwd(bin, bout, stream);
    constexpr int kReps = 5;
    Event e0(dev), e1(dev), e2(dev);
    e0.record(stream);
    for (int r = 0; r < kReps; ++r) fwd(fin, fout, stream);
    e1.record(stream);
    for (int r = 0; r < kReps; ++r) bwd(bin, bout, stream);
    e2.record(stream);
    e2.synchronize();
    const double flops = 4.0 * static_cast<double>(c.batch * c.heads) * len * len * c.d;
    const double fwdMs = Event::elapsedMs(e0, e1) / kReps, bwdMs = Event::elapsedMs(e1, e2) / kReps;
    std::printf("  L=%lld d=64 heads=16 f32: forward %.3f ms %.1f TFLOP/s, backward %.3f ms %.1f "
                "TFLOP/s, both %.1f TFLOP/s\n",
                static_cast<long long>(len), fwdMs, flops / fwdMs * 1e-9, bwdMs,
                2.5 * flops / bwdMs * 1e-9, 3.5 * flops / (fwdMs + bwdMs) * 1e-9);
    std::vector<float> lseHost(static_cast<size_t>(rows));
    stream.download(lseHost.data(), lse, rows * 4);
    stream.synchronize();
    EXPECT_NEAR(lseHost[0], std::log(static_cast<double>(len)), 1e-5);
    EXPECT_NEAR(lseHost[static_cast<size_t>(rows - 1)], std::log(static_cast<double>(len)), 1e-5);
  }
}

TEST(CudaAttention, HeadDimAbove128IsRefusedNamingTheNode) {
  auto g = parseGraph(R"(graph @attn {
  %q = input() : f32[2,4,129]
  %k = input() : f32[2,4,129]
  %v = input() : f32[2,4,8]
  %o, %lse = fused_attention(%q, %k, %v) {scale=0.35} : f32[2,4,8], f32[2,4]
  return %o
}
)",
                      "attn.tir");
  const Node* n = g->outputs()[0]->def();
  try {
    attentionKernelFor(*n);
    FAIL() << "head dim 129 accepted";
  } catch (const IRError& e) {
    EXPECT_NE(std::string(e.what()).find("head dims up to 128"), std::string::npos) << e.what();
  }
}

}  // namespace
