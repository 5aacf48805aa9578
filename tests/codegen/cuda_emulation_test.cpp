// The emitted CUDA run without a GPU: every distinct kernel of a small training step of the
// tiny Transformer, printed as CUDA, is compiled as host C++ against a small emulation of
// the CUDA execution model (one std::thread per CUDA thread, blocks one after another,
// __syncthreads() a std::barrier, warp shuffles through a block-wide exchange) and run on
// random inputs; every buffer it writes must match the CPU backend's kernel (LLVM JIT) on
// the same inputs. This checks the mapping to the grid (spread loops, block reductions,
// syncs, one thread per element, grid-stride loops over a grid smaller than the range),
// not the GPU's own arithmetic. One more kernel exercises the helpers' corner cases
// (integer division, shifts, NaN, saturation, bf16/f16). Skipped, saying why, without a
// host C++ compiler.
#include <dlfcn.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>

#include "codegen/cuda/cuda_emitter.h"
#include "codegen/jit.h"
#include "codegen/llvm_emitter.h"
#include "frontend/frontend.h"
#include "passes/train_step.h"
#include "runtime/executable.h"

using namespace tgc;
namespace cuda = tgc::codegen::cuda;
namespace kir = tgc::codegen::kir;
namespace fs = std::filesystem;

namespace {

// The CUDA names the emitted code uses, for the host.
constexpr const char* kEmulation = R"EMU(
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
using std::signbit;
struct tgc_emu_dim3 { unsigned x = 0, y = 0, z = 0; };
thread_local tgc_emu_dim3 threadIdx, blockIdx;
tgc_emu_dim3 blockDim, gridDim;
std::barrier<>* tgc_emu_barrier = nullptr;
unsigned long long tgc_emu_exchange[1024];
inline void __syncthreads() { tgc_emu_barrier->arrive_and_wait(); }
template <class T> T __shfl_xor_sync(unsigned, T v, int offset) {
  std::memcpy(&tgc_emu_exchange[threadIdx.x], &v, sizeof(T));
  __syncthreads();
  T other;
  std::memcpy(&other, &tgc_emu_exchange[threadIdx.x ^ static_cast<unsigned>(offset)], sizeof(T));
  __syncthreads();
  return other;
}
template <class To, class From> To tgc_emu_bits(From f) { To t; std::memcpy(&t, &f, sizeof t); return t; }
inline float __int_as_float(int i) { return tgc_emu_bits<float>(i); }
inline float __uint_as_float(unsigned i) { return tgc_emu_bits<float>(i); }
inline unsigned __float_as_uint(float f) { return tgc_emu_bits<unsigned>(f); }
inline double __longlong_as_double(long long i) { return tgc_emu_bits<double>(i); }
template <class I, class F> I tgc_emu_rz(F x) {  // cvt.rzi: truncate, saturate, NaN -> 0
  if (x != x) return 0;
  if (x <= static_cast<F>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (x >= static_cast<F>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(x);
}
inline int __float2int_rz(float x) { return tgc_emu_rz<int>(x); }
inline long long __float2ll_rz(float x) { return tgc_emu_rz<long long>(x); }
inline int __double2int_rz(double x) { return tgc_emu_rz<int>(x); }
inline long long __double2ll_rz(double x) { return tgc_emu_rz<long long>(x); }
inline float tgc_f16_to_f32(unsigned short h) { return static_cast<float>(tgc_emu_bits<_Float16>(h)); }
inline unsigned short tgc_f32_to_f16(float f) { return tgc_emu_bits<unsigned short>(static_cast<_Float16>(f)); }
// One std::thread per thread of a block; the blocks run one after another (a barrier
// between them), so __shared__ statics serve each block in turn.
inline void tgc_emu_launch(unsigned grid, unsigned block, const std::function<void()>& body) {
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  std::barrier<> bar(block);
  tgc_emu_barrier = &bar;
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < block; ++t)
    threads.emplace_back([&, t] {
      threadIdx = {t, 0, 0};
      for (unsigned b = 0; b < grid; ++b) {
        blockIdx = {b, 0, 0};
        body();
        bar.arrive_and_wait();
      }
    });
  for (auto& th : threads) th.join();
}
)EMU";

const char* cType(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::bf16:
    case DType::f16: return "unsigned short";
    case DType::i32: return "int";
    case DType::i64: return "long long";
    case DType::boolean: return "unsigned char";
  }
  return "?";
}

std::unique_ptr<Graph> smallTrainStep() {
  ModelOptions o;
  o.preset = "tiny";
  o.sets = {{"src_vocab", "24"}, {"tgt_vocab", "24"}, {"p_drop", "0.1"}};
  o.dims = {{"B", 2}, {"S", 40}, {"T", 36}};
  CompiledModel m = compileModelFile(std::string(TGC_SOURCE_DIR) + "/models/transformer.tg", o);
  m.graph->setOutputs({m.graph->outputs()[m.loss_output]});
  buildTrainStep(*m.graph, OptimizerConfig{});
  return std::move(m.graph);
}

// The helpers' corner cases, one thread per element from floats in [-1, 1]: integer
// division and remainder by 0, -1 and negatives; shifts by negative and too-large amounts;
// NaN-propagating max/min; saturating float->int casts; bf16/f16 rounding; pow.
kir::Kernel semanticsKernel() {
  using namespace kir;
  Kernel k;
  k.name = "helper_semantics";
  const int64_t n = 4096;
  int x = k.addBuffer("x", DType::f32, n, Access::Read);
  int y = k.addBuffer("y", DType::f32, n, Access::Read);
  int q = k.addBuffer("q", DType::i32, n, Access::Write);
  int r = k.addBuffer("r", DType::i64, n, Access::Write);
  int sh = k.addBuffer("sh", DType::i64, n, Access::Write);
  int mx = k.addBuffer("mx", DType::f32, n, Access::Write);
  int sat = k.addBuffer("sat", DType::i32, n, Access::Write);
  int bf = k.addBuffer("bf", DType::bf16, n, Access::Write);
  int hf = k.addBuffer("hf", DType::f16, n, Access::Write);
  int pw = k.addBuffer("pw", DType::f32, n, Access::Write);
  k.parallelVar = k.addVar("p", DType::i64);
  k.parallelExtent = n;
  auto p = varRef(k, k.parallelVar);
  auto xv = load(k, x, p), yv = load(k, y, p);
  auto scaled = [&](ExprP v, double f, DType t) {
    return cast(binary(BinaryOp::Mul, v, constFloat(f)), t);
  };
  auto a32 = scaled(xv, 1000, DType::i32), b32 = scaled(yv, 3, DType::i32);
  auto a64 = scaled(xv, 1e6, DType::i64), b64 = scaled(yv, 2.5, DType::i64);
  k.body = {
      store(q, p, binary(BinaryOp::Div, a32, b32)),
      store(r, p, binary(BinaryOp::Rem, a64, b64)),
      store(sh, p, binary(BinaryOp::Xor, binary(BinaryOp::Shl, a64, scaled(yv, 80, DType::i64)),
                          binary(BinaryOp::Shr, a64, scaled(xv, 70, DType::i64)))),
      store(mx, p, binary(BinaryOp::Max, unary(UnaryOp::Log, yv),
                          binary(BinaryOp::Min, xv, unary(UnaryOp::Sqrt, xv)))),
      store(sat, p, scaled(xv, 1e10, DType::i32)),
      store(bf, p, cast(binary(BinaryOp::Mul, xv, constFloat(1234.5678)), DType::bf16)),
      store(hf, p, cast(binary(BinaryOp::Mul, yv, constFloat(70000)), DType::f16)),
      store(pw, p, binary(BinaryOp::Pow, unary(UnaryOp::Abs, xv),
                          binary(BinaryOp::Mul, yv, constFloat(3))))};
  return k;
}

// Random contents for a buffer: floats in [-1, 1], integers in [0, 4) (indices stay in
// range), bools 0/1; 16-bit floats as the bits of such floats.
std::vector<unsigned char> randomBytes(const kir::BufferDecl& d, std::mt19937_64& rng) {
  const size_t n = static_cast<size_t>(std::max<int64_t>(d.numel, 1));
  std::vector<unsigned char> bytes(n * dtypeSize(d.dtype));
  std::uniform_real_distribution<double> u(-1, 1);
  for (size_t i = 0; i < n; ++i) {
    unsigned char* at = bytes.data() + i * dtypeSize(d.dtype);
    auto put = [&](auto v) { std::memcpy(at, &v, sizeof v); };
    switch (d.dtype) {
      case DType::f32: put(static_cast<float>(u(rng))); break;
      case DType::f64: put(u(rng)); break;
      case DType::bf16: put(floatToBF16(static_cast<float>(u(rng)))); break;
      case DType::f16: put(floatToF16(static_cast<float>(u(rng)))); break;
      case DType::i32: put(static_cast<int32_t>(rng() % 4)); break;
      case DType::i64: put(static_cast<int64_t>(rng() % 4)); break;
      case DType::boolean: put(static_cast<uint8_t>(rng() % 2)); break;
    }
  }
  return bytes;
}

// Element i of two buffers agree: floats within 1e-4 relative (libm vs the CPU's
// polynomials, tree vs serial sums, FMA contraction) plus `slack`, NaN matching NaN; the
// rest exactly.
bool close(DType t, const unsigned char* a, const unsigned char* b, double slack,
           std::string& what) {
  auto cmp = [&](double x, double y) {
    what = fmt::format("{} vs {}", x, y);
    if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
    if (std::isinf(x) || std::isinf(y)) return x == y;
    return std::abs(x - y) <= 1e-4 * (1 + std::abs(y)) + slack;
  };
  switch (t) {
    case DType::f32: { float x, y; std::memcpy(&x, a, 4); std::memcpy(&y, b, 4); return cmp(x, y); }
    case DType::f64: { double x, y; std::memcpy(&x, a, 8); std::memcpy(&y, b, 8); return cmp(x, y); }
    case DType::bf16: { uint16_t x, y; std::memcpy(&x, a, 2); std::memcpy(&y, b, 2); return cmp(bf16ToFloat(x), bf16ToFloat(y)); }
    case DType::f16: { uint16_t x, y; std::memcpy(&x, a, 2); std::memcpy(&y, b, 2); return cmp(f16ToFloat(x), f16ToFloat(y)); }
    default:
      what = "bytes differ";
      return std::memcmp(a, b, dtypeSize(t)) == 0;
  }
}

// Random data makes some elements ill-conditioned (AdamW's update divides by
// sqrt(v) * c + eps with a random, possibly negative eps): a rounding difference of an ulp
// between the two compilers grows without bound there. The inputs' f32 and f64 elements
// scaled by 1 + 16 ulps give the CPU result's sensitivity to such differences.
std::vector<unsigned char> nudged(const kir::BufferDecl& d, std::vector<unsigned char> bytes) {
  auto scale = [&](auto zero, double by) {
    for (size_t at = 0; at + sizeof zero <= bytes.size(); at += sizeof zero) {
      decltype(zero) v;
      std::memcpy(&v, bytes.data() + at, sizeof v);
      v = static_cast<decltype(zero)>(v * by);
      std::memcpy(bytes.data() + at, &v, sizeof v);
    }
  };
  if (d.dtype == DType::f32) scale(0.0f, 1 + std::ldexp(1.0, -19));
  if (d.dtype == DType::f64) scale(0.0, 1 + std::ldexp(1.0, -48));
  return bytes;
}

// How far an f32/f64 element moved under the nudge; infinite when it became or stopped
// being NaN or infinite (the element sits on an edge: anything goes).
double moved(DType t, const unsigned char* a, const unsigned char* b) {
  double x = 0, y = 0;
  if (t == DType::f32) {
    float fx, fy;
    std::memcpy(&fx, a, 4);
    std::memcpy(&fy, b, 4);
    x = fx, y = fy;
  } else if (t == DType::f64) {
    std::memcpy(&x, a, 8);
    std::memcpy(&y, b, 8);
  }
  if (std::isfinite(x) && std::isfinite(y)) return std::abs(x - y);
  return std::isnan(x) && std::isnan(y) ? 0 : std::numeric_limits<double>::infinity();
}

// A copy of some bytes at a 64-byte aligned address.
struct AlignedBytes {
  explicit AlignedBytes(std::vector<unsigned char> b)
      : bytes(std::move(b)),
        memory(static_cast<unsigned char*>(std::aligned_alloc(64, (bytes.size() + 63) / 64 * 64)),
               &std::free) {
    std::memcpy(memory.get(), bytes.data(), bytes.size());
  }
  unsigned char* data() { return memory.get(); }
  std::vector<unsigned char> bytes;  // the initial contents (and the size)
  std::unique_ptr<unsigned char, decltype(&std::free)> memory;
};

TEST(CudaEmulation, TrainStepKernelsAndHelpersMatchTheCpuBackend) {
  const char* cxx = std::getenv("CXX");
  const std::string compiler = cxx && *cxx ? cxx : "c++";
  if (std::system(fmt::format("{} --version > /dev/null 2>&1", compiler).c_str()) != 0)
    GTEST_SKIP() << "no host C++ compiler (" << compiler << ") to run the emulation";

  const std::vector<kir::Kernel> all = runtime::lowerGraphKernels(*smallTrainStep());
  std::map<std::string, const kir::Kernel*> distinct;  // one per kernel text, names aside
  for (const auto& k : all) {
    kir::Kernel plain = k;
    plain.name = "k";
    for (auto& b : plain.buffers) b.name = "x";
    distinct.emplace(cuda::kernelFunction(plain), &k);
  }
  std::vector<const kir::Kernel*> kernels;
  for (const auto& [text, k] : distinct) kernels.push_back(k);
  const kir::Kernel semantics = semanticsKernel();
  kernels.push_back(&semantics);

  // One translation unit: the emulation, the helpers, the kernels, a launcher per kernel.
  std::string source = std::string(kEmulation) + cuda::cudaPreamble();
  std::vector<cuda::LaunchGeometry> launches(kernels.size());
  std::map<cuda::Mapping, int> mappings;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const kir::Kernel& k = *kernels[i];
    source += "\n" + cuda::kernelFunction(k, &launches[i]);
    ++mappings[launches[i].mapping];
    std::string args;
    for (size_t b = 0; b < k.buffers.size(); ++b)
      args += fmt::format("({}*)bufs[{}], ", cType(k.buffers[b].dtype), b);
    source += fmt::format(
        "extern \"C\" void launch_{0}(void* const* bufs, long long begin, long long end, "
        "unsigned grid, unsigned block) {{\n  tgc_emu_launch(grid, block, [&] {{ {0}({1}begin, "
        "end); }});\n}}\n",
        k.name, args);
  }
  const fs::path dir = fs::temp_directory_path() / fmt::format("tgc-cuda-emu-{}", getpid());
  fs::create_directories(dir);
  std::ofstream(dir / "kernels.cpp") << source;
  const std::string build = fmt::format(
      "{0} -std=c++20 -O1 -w -shared -fPIC -pthread -DTGC_CUDA_HOST_EMULATION {1}/kernels.cpp "
      "-o {1}/kernels.so > {1}/build.log 2>&1",
      compiler, dir.string());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(std::system(build.c_str()), 0) << "see " << dir / "build.log";
  const auto t1 = std::chrono::steady_clock::now();
  void* lib = dlopen((dir / "kernels.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();

  codegen::JitOptions jo;
  jo.useCache = false;
  codegen::Jit jit(jo);
  const std::vector<kir::KernelFn> cpu = codegen::compileKernels(jit, kernels);
  const auto t2 = std::chrono::steady_clock::now();

  std::mt19937_64 rng(42);
  for (size_t i = 0; i < kernels.size(); ++i) {
    const kir::Kernel& k = *kernels[i];
    using Launch = void (*)(void* const*, long long, long long, unsigned, unsigned);
    auto launch = reinterpret_cast<Launch>(dlsym(lib, ("launch_" + k.name).c_str()));
    ASSERT_NE(launch, nullptr) << k.name;
    // The CPU kernels assume buffers 64-byte aligned, as the arena places them.
    std::vector<AlignedBytes> gpu, ref, nudge;
    for (const auto& b : k.buffers) {
      gpu.emplace_back(randomBytes(b, rng));
      ref.emplace_back(gpu.back().bytes);
      nudge.emplace_back(nudged(b, gpu.back().bytes));
    }
    std::vector<void*> gp, rp, np;
    for (size_t b = 0; b < gpu.size(); ++b)
      gp.push_back(gpu[b].data()), rp.push_back(ref[b].data()), np.push_back(nudge[b].data());
    cpu[i](rp.data(), 0, k.parallelExtent);
    cpu[i](np.data(), 0, k.parallelExtent);
    // At most 3 blocks of at most 64 threads (two warps: the kernels work with any multiple
    // of 32 up to their launch bounds), so grid-stride loops go round more than once and
    // the emulation stays cheap.
    const auto grid = static_cast<unsigned>(std::min<int64_t>(3, launches[i].gridBlocks(k.parallelExtent)));
    const auto block = static_cast<unsigned>(std::min(64, launches[i].blockThreads));
    launch(gp.data(), 0, k.parallelExtent, grid, block);
    for (size_t b = 0; b < k.buffers.size(); ++b) {
      if (k.buffers[b].access == kir::Access::Read) continue;
      const size_t size = dtypeSize(k.buffers[b].dtype);
      for (size_t e = 0; e < gpu[b].bytes.size() / size; ++e) {
        std::string what;
        const double slack = moved(k.buffers[b].dtype, ref[b].data() + e * size, nudge[b].data() + e * size);
        if (!close(k.buffers[b].dtype, gpu[b].data() + e * size, ref[b].data() + e * size, slack, what)) {
          ADD_FAILURE() << k.name << ": buffer " << k.buffers[b].name << "[" << e << "]: emulated "
                        << what << " (CPU)\n" << cuda::kernelFunction(k);
          break;
        }
      }
    }
  }
  dlclose(lib);
  fs::remove_all(dir);
  const auto t3 = std::chrono::steady_clock::now();
  const auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  std::printf("%zu kernels (%zu distinct): %d one block per iteration, %d one thread per "
              "element, %d one thread per iteration; host compile %.1f s, LLVM %.1f s, runs "
              "%.1f s\n",
              all.size(), kernels.size(), mappings[cuda::Mapping::BlockPerIteration],
              mappings[cuda::Mapping::ThreadPerElement], mappings[cuda::Mapping::ThreadPerIteration],
              secs(t0, t1), secs(t1, t2), secs(t2, t3));
  EXPECT_GT(mappings[cuda::Mapping::BlockPerIteration], 0);
  EXPECT_GT(mappings[cuda::Mapping::ThreadPerElement], 0);
}

}  // namespace
