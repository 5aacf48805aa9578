// The CUDA emitter (codegen/cuda/cuda_emitter.cpp): golden texts of small kernels, one per
// mapping decision (elementwise spread over a block, a block reduction, a loop that cannot
// be spread, one thread per iteration), the launch geometry, and NVRTC: the goldens compile
// to PTX and pass ptxas, errors carry the log and numbered source, the disk cache hits.
// The NVRTC tests skip, saying why, without libnvrtc.
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "codegen/cuda/cuda_analysis.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/kernel_ir.h"

namespace tgc::codegen::cuda {
namespace {

using namespace tgc::codegen::kir;
namespace fs = std::filesystem;

// A kernel `name` over p in [0, extent) with buffer kIn (`in`, read) and buffer kOut (`out`,
// written; `outAccess` for one it also reads), `inSize` and `outSize` elements of `dtype`.
struct MapSpec {
  const char* name;
  int64_t extent;
  DType dtype;
  const char* in;
  int64_t inSize;
  const char* out;
  int64_t outSize;
  Access outAccess = Access::Write;
};
constexpr int kIn = 0, kOut = 1;

Kernel mapKernel(const MapSpec& s) {
  Kernel k;
  k.name = s.name;
  k.addBuffer(s.in, s.dtype, s.inSize, Access::Read);
  k.addBuffer(s.out, s.dtype, s.outSize, s.outAccess);
  k.parallelVar = k.addVar("p", DType::i64);
  k.parallelExtent = s.extent;
  return k;
}

// y[p, r, i] = exp(x[p, r, i]) * 2 over [4, 3, 64]: elementwise, one thread per element.
Kernel rowExp() {
  Kernel k = mapKernel({.name = "enc_0_exp", .extent = 4, .dtype = DType::f32,
                        .in = "enc.0.x", .inSize = 768, .out = "enc.0.exp", .outSize = 768});
  const int x = kIn, y = kOut;
  int r = k.addVar("r", DType::i64);
  int i = k.addVar("i", DType::i64);
  auto idx = add(add(mul(varRef(k, k.parallelVar), 192), mul(varRef(k, r), 64)), varRef(k, i));
  k.body = {loop(r, 3,
                 {loop(i, 64,
                       {store(y, idx, binary(BinaryOp::Mul, unary(UnaryOp::Exp, load(k, x, idx)),
                                             constFloat(2)))},
                       LoopKind::Vector)})};
  return k;
}

// s[p] = max over i of x[p, i] (NaN-propagating), rows of 300: a block reduction.
Kernel rowMax() {
  Kernel k = mapKernel({.name = "dec_1_softmax_max", .extent = 2, .dtype = DType::f32,
                        .in = "x", .inSize = 600, .out = "s", .outSize = 2});
  const int x = kIn, s = kOut;
  int acc = k.addVar("acc", DType::f32);
  int i = k.addVar("i", DType::i64);
  auto p = varRef(k, k.parallelVar);
  k.body = {assign(acc, constFloat(-std::numeric_limits<double>::infinity())),
            loop(i, 300,
                 {assign(acc, binary(BinaryOp::Max, varRef(k, acc),
                                     load(k, x, add(mul(p, 300), varRef(k, i)))))},
                 LoopKind::Vector),
            store(s, p, varRef(k, acc))};
  return k;
}

// A running sum written at every step (a scan): its local is neither a reduction nor
// private, so the loop is not spread and the kernel maps one thread per iteration.
Kernel prefixSum() {
  Kernel k = mapKernel({.name = "scan", .extent = 1, .dtype = DType::f64,
                        .in = "x", .inSize = 64, .out = "y", .outSize = 64});
  const int x = kIn, y = kOut;
  int run = k.addVar("run", DType::f64);
  int i = k.addVar("i", DType::i64);
  auto vi = varRef(k, i);
  k.body = {assign(run, constFloat(0, DType::f64)),
            loop(i, 64,
                 {assign(run, binary(BinaryOp::Add, varRef(k, run), load(k, x, vi))),
                  store(y, vi, varRef(k, run))},
                 LoopKind::Vector)};
  return k;
}

// Integer and cast semantics, one thread per iteration (no vector loop):
// q[p] = i32(h[p]) / d[p], ok[p] = bool(h[p]), b[p] = bf16(f32(q[p])).
Kernel scalarOps() {
  Kernel k;
  k.name = "scalar_ops";
  int h = k.addBuffer("h", DType::f32, 1000, Access::Read);
  int d = k.addBuffer("d", DType::i32, 1000, Access::Read);
  int q = k.addBuffer("q", DType::i32, 1000, Access::Write);
  int ok = k.addBuffer("ok", DType::boolean, 1000, Access::Write);
  int b = k.addBuffer("b", DType::bf16, 1000, Access::Write);
  k.parallelVar = k.addVar("p", DType::i64);
  k.parallelExtent = 1000;
  auto p = varRef(k, k.parallelVar);
  auto quotient = binary(BinaryOp::Div, cast(load(k, h, p), DType::i32), load(k, d, p));
  k.body = {store(q, p, quotient), store(ok, p, cast(load(k, h, p), DType::boolean)),
            store(b, p, cast(cast(quotient, DType::f32), DType::bf16))};
  return k;
}

TEST(CudaEmitter, ElementwiseIsOneThreadPerElement) {
  LaunchGeometry g;
  EXPECT_EQ(kernelFunction(rowExp(), &g),
            R"(// kernel enc_0_exp: parallel [0, 4), one thread per element (192 per iteration), 256 threads per block
extern "C" __global__ void __launch_bounds__(256) enc_0_exp(
    const float* __restrict__ b0_enc_0_x,  // enc.0.x f32[768]
    float* __restrict__ b1_enc_0_exp,  // enc.0.exp f32[768]
    long long begin, long long end) {
  const long long n_ = (end - begin) * 192LL;
  for (long long f_ = (long long)blockIdx.x * blockDim.x + threadIdx.x; f_ < n_; f_ += (long long)gridDim.x * blockDim.x) {
    const long long p = begin + f_ / 192LL;
    const long long r = f_ / 64LL % 3LL;
    const long long i = f_ % 64LL;
    b1_enc_0_exp[(((p * 192LL) + (r * 64LL)) + i)] = (expf(b0_enc_0_x[(((p * 192LL) + (r * 64LL)) + i)]) * 2.0f);
  }
}
)");
  EXPECT_EQ(g.mapping, Mapping::ThreadPerElement);
  EXPECT_EQ(g.blockThreads, 256);
  EXPECT_EQ(g.elementsPerIteration, 192);
  EXPECT_EQ(g.gridBlocks(4), 3);  // 768 threads
}

// y = -x over 10 elements in blocks of 4 (the last one 2 long), as lowering cuts a row:
// `if (p == 2) loop of 2 else loop of 4` flattens over 4 per block, the short one guarded.
TEST(CudaEmitter, ShorterLastBlockFlattensWithAGuard) {
  Kernel k = mapKernel({.name = "neg_blocks", .extent = 3, .dtype = DType::f32,
                        .in = "x", .inSize = 10, .out = "y", .outSize = 10});
  const int x = kIn, y = kOut;
  auto p = varRef(k, k.parallelVar);
  auto block = [&](int64_t n) {
    int j = k.addVar("j", DType::i64);
    auto idx = add(mul(p, 4), varRef(k, j));
    return loop(j, n, {store(y, idx, unary(UnaryOp::Neg, load(k, x, idx)))}, LoopKind::Vector);
  };
  StmtP last = block(2);
  StmtP full = block(4);
  k.body = {ifThen(binary(BinaryOp::Eq, p, constInt(2)), {last}, {full})};
  LaunchGeometry g;
  EXPECT_EQ(kernelFunction(k, &g),
            R"(// kernel neg_blocks: parallel [0, 3), one thread per element (4 per iteration), 256 threads per block
extern "C" __global__ void __launch_bounds__(256) neg_blocks(
    const float* __restrict__ b0_x,  // x f32[10]
    float* __restrict__ b1_y,  // y f32[10]
    long long begin, long long end) {
  const long long n_ = (end - begin) * 4LL;
  for (long long f_ = (long long)blockIdx.x * blockDim.x + threadIdx.x; f_ < n_; f_ += (long long)gridDim.x * blockDim.x) {
    const long long p = begin + f_ / 4LL;
    if ((p == 2LL)) {
      const long long j = f_ % 4LL;
      if (j < 2) {
        b1_y[((p * 4LL) + j)] = (-b0_x[((p * 4LL) + j)]);
      }
    } else {
      const long long j_2 = f_ % 4LL;
      b1_y[((p * 4LL) + j_2)] = (-b0_x[((p * 4LL) + j_2)]);
    }
  }
}
)");
  EXPECT_EQ(g.gridBlocks(3), 1);
}

TEST(CudaEmitter, ReductionIsABlockReduction) {
  LaunchGeometry g;
  EXPECT_EQ(kernelFunction(rowMax(), &g),
            R"(// kernel dec_1_softmax_max: parallel [0, 2), one block per iteration, 256 threads per block
extern "C" __global__ void __launch_bounds__(256) dec_1_softmax_max(
    const float* __restrict__ b0_x,  // x f32[600]
    float* __restrict__ b1_s,  // s f32[2]
    long long begin, long long end) {
  float acc = 0;
  for (long long p = begin + blockIdx.x; p < end; p += gridDim.x) {
    acc = __int_as_float(0xff800000);
    float acc_part = __int_as_float(0xff800000);
    for (long long i = threadIdx.x; i < 300; i += blockDim.x) {
      acc_part = tgc_max(acc_part, b0_x[((p * 300LL) + i)]);
    }
    acc = tgc_op_max()(acc, tgc_block_reduce(acc_part, tgc_op_max()));
    if (threadIdx.x == 0) {
      b1_s[p] = acc;
    }
  }
}
)");
  EXPECT_EQ(g.blockThreads, 256);  // 300 threads' worth, capped
}

TEST(CudaEmitter, UnspreadableLoopRunsSeriallyPerIteration) {
  LaunchGeometry g;
  EXPECT_EQ(kernelFunction(prefixSum(), &g),
            R"(// kernel scan: parallel [0, 1), one thread per iteration, 128 threads per block
extern "C" __global__ void __launch_bounds__(128) scan(
    const double* __restrict__ b0_x,  // x f64[64]
    double* __restrict__ b1_y,  // y f64[64]
    long long begin, long long end) {
  double run = 0;
  for (long long p = begin + (long long)blockIdx.x * blockDim.x + threadIdx.x; p < end; p += (long long)gridDim.x * blockDim.x) {
    run = 0.0;
    for (long long i = 0; i < 64; ++i) {
      run = (run + b0_x[i]);
      b1_y[i] = run;
    }
  }
}
)");
  EXPECT_EQ(g.mapping, Mapping::ThreadPerIteration);
  EXPECT_EQ(g.gridBlocks(1), 1);
}

TEST(CudaEmitter, IntegerAndCastSemantics) {
  LaunchGeometry g;
  EXPECT_EQ(kernelFunction(scalarOps(), &g),
            R"(// kernel scalar_ops: parallel [0, 1000), one thread per iteration, 128 threads per block
extern "C" __global__ void __launch_bounds__(128) scalar_ops(
    const float* __restrict__ b0_h,  // h f32[1000]
    const int* __restrict__ b1_d,  // d i32[1000]
    int* __restrict__ b2_q,  // q i32[1000]
    unsigned char* __restrict__ b3_ok,  // ok bool[1000]
    unsigned short* __restrict__ b4_b,  // b bf16[1000]
    long long begin, long long end) {
  for (long long p = begin + (long long)blockIdx.x * blockDim.x + threadIdx.x; p < end; p += (long long)gridDim.x * blockDim.x) {
    b2_q[p] = tgc_div(__float2int_rz(b0_h[p]), b1_d[p]);
    b3_ok[p] = (unsigned char)(b0_h[p] != 0.0f);
    b4_b[p] = tgc_f32_to_bf16((float)tgc_div(__float2int_rz(b0_h[p]), b1_d[p]));
  }
}
)");
  EXPECT_EQ(g.gridBlocks(1000), 8);
  EXPECT_EQ(g.gridBlocks(0), 1);
  EXPECT_EQ(g.gridBlocks(int64_t{1} << 40), kMaxGridBlocks);
}

// A buffer the kernel both stores and loads: __syncthreads() around the spread loop that
// writes it, since other threads read what it writes.
TEST(CudaEmitter, SyncAroundLoopsWritingWhatOthersRead) {
  Kernel k = mapKernel({.name = "normalize", .extent = 1, .dtype = DType::f32, .in = "x",
                        .inSize = 128, .out = "y", .outSize = 128,
                        .outAccess = Access::ReadWrite});
  const int x = kIn, y = kOut;
  int s = k.addVar("s", DType::f32);
  int i = k.addVar("i", DType::i64);
  int j = k.addVar("j", DType::i64);
  k.body = {loop(i, 128, {store(y, varRef(k, i), unary(UnaryOp::Exp, load(k, x, varRef(k, i))))},
                 LoopKind::Vector),
            assign(s, constFloat(0)),
            loop(j, 128, {assign(s, binary(BinaryOp::Add, varRef(k, s), load(k, y, add(constInt(127), mul(varRef(k, j), -1)))))},
                 LoopKind::Vector)};
  const std::string text = kernelFunction(k);
  const size_t loop1 = text.find("for (long long i = threadIdx.x");
  const size_t sync = text.find("__syncthreads();", loop1);
  const size_t loop2 = text.find("for (long long j = threadIdx.x");
  ASSERT_NE(loop1, std::string::npos) << text;
  ASSERT_NE(loop2, std::string::npos) << text;
  EXPECT_LT(sync, loop2) << text;  // the reversed reads of y wait for every thread's writes
  EXPECT_NE(text.find("s = tgc_op_add()(s, tgc_block_reduce(s_part, tgc_op_add()));"), std::string::npos)
      << text;
}

TEST(CudaEmitter, ReductionIdentities) {
  EXPECT_EQ(reductionIdentity(BinaryOp::Add, DType::f32), "-0.0f");
  EXPECT_EQ(reductionIdentity(BinaryOp::Max, DType::i64), "(-9223372036854775807LL - 1)");
  EXPECT_EQ(reductionIdentity(BinaryOp::Min, DType::f64),
            "__longlong_as_double(0x7ff0000000000000LL)");
}

TEST(CudaEmitter, WholeTranslationUnit) {
  CudaKernel ck = emitCudaKernel(rowMax());
  EXPECT_EQ(ck.name, "dec_1_softmax_max");
  EXPECT_EQ(ck.parallelExtent, 2);
  EXPECT_EQ(ck.source.find(cudaPreamble()), 0u);
  EXPECT_NE(ck.source.find("extern \"C\" __global__"), std::string::npos);
}

// ---- NVRTC ----------------------------------------------------------------------------

std::string ptxasPath() {
  for (std::string c : {std::string(std::getenv("TGC_PTXAS") ? std::getenv("TGC_PTXAS") : ""),
                        std::string("/usr/local/cuda/bin/ptxas")})
    if (!c.empty() && access(c.c_str(), X_OK) == 0) return c;
  return "";
}

class CudaNvrtc : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = nvrtcUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
    dir_ = fs::temp_directory_path() / fmt::format("tgc-nvrtc-test-{}", getpid());
    options_.cacheDir = dir_.string();
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  fs::path dir_;
  NvrtcOptions options_;
};

TEST_F(CudaNvrtc, GoldenKernelsCompileAndAssemble) {
  std::string source = cudaPreamble();
  for (const Kernel& k : {rowExp(), rowMax(), prefixSum(), scalarOps()}) source += kernelFunction(k);
  options_.useCache = false;
  const NvrtcResult r = compilePtx(source, "goldens", "compute_90", options_);
  for (const char* name : {"enc_0_exp", "dec_1_softmax_max", "scan", "scalar_ops"})
    EXPECT_NE(r.image.find(fmt::format(".entry {}(", name)), std::string::npos) << name;
  EXPECT_EQ(r.log.find("warning"), std::string::npos) << r.log;
  const std::string ptxas = ptxasPath();
  if (ptxas.empty()) GTEST_SKIP() << "ptxas not found (set TGC_PTXAS)";
  fs::create_directories(dir_);
  std::ofstream(dir_ / "goldens.ptx") << r.image;
  const std::string cmd =
      fmt::format("{} -arch=sm_90 -o /dev/null {} 2>&1", ptxas, (dir_ / "goldens.ptx").string());
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

TEST_F(CudaNvrtc, CubinForARealArchitecture) {
  const NvrtcResult r = compileCubin(emitCudaKernel(rowExp()).source, "row_exp", "sm_90", options_);
  ASSERT_GE(r.image.size(), 4u);
  EXPECT_EQ(r.image.substr(0, 4), "\x7f" "ELF");
}

TEST_F(CudaNvrtc, ErrorsCarryTheLogAndNumberedSource) {
  try {
    compilePtx("extern \"C\" __global__ void k() {\n  undefined_thing();\n}\n", "broken",
               "compute_90", options_);
    FAIL() << "no NvrtcError";
  } catch (const NvrtcError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("broken.cu"), std::string::npos) << what;
    EXPECT_NE(what.find("undefined_thing"), std::string::npos) << what;
    EXPECT_NE(what.find("    2 |   undefined_thing();"), std::string::npos) << what;
  }
}

TEST_F(CudaNvrtc, SecondCompileHitsTheDiskCache) {
  const std::string source = emitCudaKernel(rowMax()).source;
  const NvrtcResult first = compilePtx(source, "row_max", "compute_90", options_);
  const NvrtcResult second = compilePtx(source, "row_max", "compute_90", options_);
  EXPECT_FALSE(first.cacheHit);
  EXPECT_TRUE(second.cacheHit);
  EXPECT_EQ(first.image, second.image);
  // Another architecture is another entry.
  EXPECT_FALSE(compilePtx(source, "row_max", "compute_80", options_).cacheHit);
  EXPECT_FALSE(nvrtcVersion().empty());
}

}  // namespace
}  // namespace tgc::codegen::cuda
