// The CUDA GEMM (runtime/cuda/cuda_gemm.h). Without a GPU: its source compiles through
// NVRTC to PTX for compute_90 and ptxas assembles every kernel for sm_90; descriptors are
// checked. With a GPU: every kernel (f32/f64 CUDA cores, bf16/f16 tensor cores, each
// transpose pair) against the CPU on sizes with remainders, batches with broadcasts,
// beta != 0 and k = 0.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "codegen/cuda/nvrtc.h"
#include "codegen/gemm.h"
#include "runtime/cuda/cuda_gemm.h"
#include "tests/runtime/cuda_test_util.h"

using namespace tgc;
using namespace tgc::runtime::cuda;
namespace fs = std::filesystem;

namespace {

// One test per kernel family (TGC_GEMM_FAMILY in gemm_kernels.cu), so each stays short.
class CudaGemmSource : public ::testing::TestWithParam<int> {};

TEST_P(CudaGemmSource, CompilesToPtxForSm90AndPassesPtxas) {
  TGC_REQUIRE_NVRTC();
  const std::string ptxas = tgc::testing::findPtxas();
  if (ptxas.empty()) GTEST_SKIP() << "ptxas not found (set TGC_PTXAS or CUDA_HOME)";
  const int family = GetParam();
  codegen::cuda::NvrtcOptions no;
  no.useCache = false;  // the compiler must really run
  no.extra = {fmt::format("-DTGC_GEMM_FAMILY={}", family)};
  const auto ptx = codegen::cuda::compilePtx(gemmSource(), "tgc_gemm", "compute_90", no);
  const std::string mine = family == 1 ? "tgc_gemm_simt_" : "tgc_gemm_mma_";
  for (const std::string& name : gemmKernelNames())
    EXPECT_EQ(ptx.image.find(".entry " + name + "(") != std::string::npos,
              name.starts_with(mine))
        << name;
  if (family == 2) {
    for (const char* t : {"bf16", "f16"}) {
      const std::string mma = fmt::format("mma.sync.aligned.m16n8k16.row.col.f32.{0}.{0}.f32", t);
      EXPECT_NE(ptx.image.find(mma), std::string::npos) << mma;
    }
  }
  const auto r = tgc::testing::runPtxas(ptxas, ptx.image, fmt::format("gemm{}", family));
  EXPECT_EQ(r.status, 0) << r.log;
  EXPECT_GT(r.cubinBytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Families, CudaGemmSource, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string(i.param == 1 ? "CudaCores" : "TensorCores");
                         });

TEST(CudaGemmDesc, KernelNamesFollowDtypeAndTransposes) {
  EXPECT_EQ(gemmKernelName(CudaGemmDesc::contiguous(DType::f32, 2, 3, 4)), "tgc_gemm_simt_f32_nn");
  EXPECT_EQ(gemmKernelName(CudaGemmDesc::contiguous(DType::f64, 2, 3, 4, true)),
            "tgc_gemm_simt_f64_tn");
  EXPECT_EQ(gemmKernelName(CudaGemmDesc::contiguous(DType::bf16, 2, 3, 4, false, true)),
            "tgc_gemm_mma_bf16_nt");
  EXPECT_EQ(gemmKernelName(CudaGemmDesc::contiguous(DType::f16, 2, 3, 4, true, true)),
            "tgc_gemm_mma_f16_tt");
  EXPECT_EQ(gemmKernelNames().size(), 16u);  // each is an .entry of the PTX (test above)
}

TEST(CudaGemmDesc, ValidateNamesTheBadField) {
  auto expectBad = [](const CudaGemmDesc& d, const std::string& what) {
    try {
      d.validate();
      ADD_FAILURE() << "accepted: " << what;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  CudaGemmDesc d = CudaGemmDesc::contiguous(DType::i32, 2, 3, 4);
  expectBad(d, "dtype i32");
  d = CudaGemmDesc::contiguous(DType::f32, 2, 3, 4);
  d.lda = 3;
  expectBad(d, "lda=3");
  d = CudaGemmDesc::contiguous(DType::f32, 2, 3, 4);
  d.batch = {2, 2, 2, 2, 2};
  d.strideA = d.strideB = d.strideC = {0, 0, 0, 0, 0};
  expectBad(d, "5 batch dimensions");
  d = CudaGemmDesc::contiguous(DType::f32, 2, 3, 4);
  d.batch = {3};
  d.strideA = {8};
  d.strideB = {12};
  d.strideC = {0};
  expectBad(d, "C cannot broadcast");
  CudaGemmDesc::contiguous(DType::bf16, 0, 0, 0).validate();
}

// ---- on the GPU ------------------------------------------------------------------------------

struct Shape3 {
  int64_t m, n, k;
};

// Random values exactly representable in every dtype under test (multiples of 1/8 in
// [-2, 2]), so bf16/f16 inputs hold the same numbers as the f64 reference's.
std::vector<double> randomValues(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> v(static_cast<size_t>(count));
  for (double& x : v) x = static_cast<double>(static_cast<int64_t>(rng() % 33) - 16) / 8.0;
  return v;
}

std::vector<unsigned char> encode(const std::vector<double>& v, DType d) {
  std::vector<unsigned char> out(v.size() * dtypeSize(d));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (d) {
      case DType::f32: {
        const float f = static_cast<float>(v[i]);
        std::memcpy(&out[i * 4], &f, 4);
        break;
      }
      case DType::f64: std::memcpy(&out[i * 8], &v[i], 8); break;
      case DType::bf16: {
        const uint16_t h = floatToBF16(static_cast<float>(v[i]));
        std::memcpy(&out[i * 2], &h, 2);
        break;
      }
      case DType::f16: {
        const uint16_t h = floatToF16(static_cast<float>(v[i]));
        std::memcpy(&out[i * 2], &h, 2);
        break;
      }
      default: ADD_FAILURE() << "dtype"; break;
    }
  }
  return out;
}

double decodeAt(const std::vector<unsigned char>& bytes, size_t i, DType d) {
  switch (d) {
    case DType::f32: {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      return f;
    }
    case DType::f64: {
      double x;
      std::memcpy(&x, &bytes[i * 8], 8);
      return x;
    }
    case DType::bf16: {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      return bf16ToFloat(h);
    }
    case DType::f16: {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      return f16ToFloat(h);
    }
    default: return 0;
  }
}

// Runs `d` on the GPU from random A, B, C and checks every element of C against a float64
// reference computed here (op(A) @ op(B) with alpha, beta).
void checkGemm(CudaGemm& gemm, Stream& s, const std::shared_ptr<Device>& dev,
               const CudaGemmDesc& d, uint64_t seed) {
  SCOPED_TRACE(fmt::format("{} m={} n={} k={} batch={} beta={}", gemmKernelName(d), d.m, d.n,
                           d.k, d.batchCount(), d.beta));
  // Element extents: the furthest element each operand's batch can reach, plus one matrix.
  auto extent = [&](const std::vector<int64_t>& strides, int64_t rows, int64_t ld) {
    int64_t e = rows * ld;
    for (size_t i = 0; i < d.batch.size(); ++i) e += (d.batch[i] - 1) * strides[i];
    return e;
  };
  const int64_t na = extent(d.strideA, d.transA ? d.k : d.m, d.lda);
  const int64_t nb = extent(d.strideB, d.transB ? d.n : d.k, d.ldb);
  const int64_t nc = extent(d.strideC, d.m, d.ldc);
  const auto av = randomValues(na, seed), bv = randomValues(nb, seed + 1),
             cv = randomValues(nc, seed + 2);
  const auto ab = encode(av, d.dtype), bb = encode(bv, d.dtype), cb = encode(cv, d.dtype);
  DeviceBuffer da(dev, static_cast<int64_t>(ab.size()), "A"),
      db(dev, static_cast<int64_t>(bb.size()), "B"), dc(dev, static_cast<int64_t>(cb.size()), "C");
  s.upload(da.ptr(), ab.data(), static_cast<int64_t>(ab.size()));
  s.upload(db.ptr(), bb.data(), static_cast<int64_t>(bb.size()));
  s.upload(dc.ptr(), cb.data(), static_cast<int64_t>(cb.size()));
  gemm.run(d, da.ptr(), db.ptr(), dc.ptr(), s);
  std::vector<unsigned char> got(cb.size());
  s.download(got.data(), dc.ptr(), static_cast<int64_t>(got.size()));
  s.synchronize();

  const bool half = d.dtype == DType::bf16 || d.dtype == DType::f16;
  const double ulp = d.dtype == DType::bf16 ? 0x1p-8 : d.dtype == DType::f16 ? 0x1p-11
                     : d.dtype == DType::f32 ? 0x1p-23 : 0x1p-52;
  int failures = 0;
  for (int64_t z = 0; z < d.batchCount(); ++z) {
    int64_t oa = 0, ob = 0, oc = 0, rest = z;
    for (size_t i = d.batch.size(); i-- > 0;) {
      const int64_t idx = rest % d.batch[i];
      rest /= d.batch[i];
      oa += idx * d.strideA[i];
      ob += idx * d.strideB[i];
      oc += idx * d.strideC[i];
    }
    for (int64_t r = 0; r < d.m; ++r)
      for (int64_t c = 0; c < d.n; ++c) {
        double sum = 0, mag = 0;
        for (int64_t k = 0; k < d.k; ++k) {
          const double a = av[oa + (d.transA ? k * d.lda + r : r * d.lda + k)];
          const double b = bv[ob + (d.transB ? c * d.ldb + k : k * d.ldb + c)];
          sum += a * b;
          mag += std::fabs(a * b);
        }
        const size_t ci = static_cast<size_t>(oc + r * d.ldc + c);
        const double want = d.alpha * sum + d.beta * cv[ci];
        // fp32 accumulation for half inputs, then one rounding to the output type.
        const double tol = (half ? 0x1p-23 * (mag + 1) * static_cast<double>(d.k) : 0) +
                           4 * ulp * (std::fabs(d.alpha) * mag + std::fabs(d.beta * cv[ci]) + 1e-30) *
                               (half ? 1.0 : std::sqrt(static_cast<double>(d.k) + 1));
        const double g = decodeAt(got, ci, d.dtype);
        if (!(std::fabs(g - want) <= tol) && ++failures <= 5)
          ADD_FAILURE() << fmt::format("C[{}][{}][{}] = {} but the reference is {} (tol {})", z,
                                       r, c, g, want, tol);
      }
  }
  // Elements of C outside the product (ldc > n) are untouched.
  for (int64_t z = 0; z < d.batchCount() && d.ldc > d.n; ++z)
    for (int64_t r = 0; r < d.m; ++r)
      for (int64_t c = d.n; c < d.ldc && r * d.ldc + c < nc; ++c) {
        const size_t ci = static_cast<size_t>(r * d.ldc + c);
        EXPECT_EQ(decodeAt(got, ci, d.dtype), cv[ci]) << "padding element " << ci << " written";
      }
}

class CudaGemmOnDevice : public ::testing::TestWithParam<DType> {};

TEST_P(CudaGemmOnDevice, MatchesTheReferenceOnEveryShapeAndLayout) {
  TGC_REQUIRE_CUDA_DEVICE();
  TGC_REQUIRE_NVRTC();
  auto dev = Device::open();
  CudaGemm gemm(dev);
  Stream s(dev);
  const DType dt = GetParam();
  const std::vector<Shape3> shapes = {{1, 1, 1},     {7, 5, 3},     {64, 64, 16},
                                      {128, 128, 32}, {129, 130, 33}, {200, 70, 300},
                                      {33, 257, 1000}, {3, 3, 0}};
  uint64_t seed = 1;
  for (const Shape3& sh : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        checkGemm(gemm, s, dev, CudaGemmDesc::contiguous(dt, sh.m, sh.n, sh.k, ta, tb), seed++);
  // Padded leading dimensions, alpha and beta.
  CudaGemmDesc d = CudaGemmDesc::contiguous(dt, 45, 37, 29, false, true);
  d.lda += 3;
  d.ldb += 8;
  d.ldc += 5;
  d.alpha = 0.5;
  d.beta = -2;
  checkGemm(gemm, s, dev, d, seed++);
  // Batched: [2, 3] items, A broadcast over the inner dim, B over the outer.
  d = CudaGemmDesc::contiguous(dt, 19, 130, 40, true, false);
  d.batch = {2, 3};
  d.strideA = {19 * 40, 0};
  d.strideB = {0, 40 * 130};
  d.strideC = {3 * 19 * 130, 19 * 130};
  checkGemm(gemm, s, dev, d, seed++);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaGemmOnDevice,
                         ::testing::Values(DType::f32, DType::f64, DType::bf16, DType::f16),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(dtypeName(i.param));
                         });

// f32 on the GPU against the CPU's packed GEMM (codegen/gemm.h) at a Transformer shape.
TEST(CudaGemmOnDeviceVsCpu, F32MatchesTheCpuGemm) {
  TGC_REQUIRE_CUDA_DEVICE();
  TGC_REQUIRE_NVRTC();
  auto dev = Device::open();
  CudaGemm gemm(dev);
  Stream s(dev);
  const int64_t m = 300, n = 512, k = 512;
  std::vector<float> a(m * k), b(k * n), cpu(m * n), gpu(m * n);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  codegen::gemm(codegen::GemmDesc::contiguous(DType::f32, m, n, k), a.data(), b.data(),
                cpu.data());
  DeviceBuffer da(dev, m * k * 4, "A"), db(dev, k * n * 4, "B"), dc(dev, m * n * 4, "C");
  s.upload(da.ptr(), a.data(), m * k * 4);
  s.upload(db.ptr(), b.data(), k * n * 4);
  gemm.run(CudaGemmDesc::contiguous(DType::f32, m, n, k), da.ptr(), db.ptr(), dc.ptr(), s);
  s.download(gpu.data(), dc.ptr(), m * n * 4);
  s.synchronize();
  for (int64_t i = 0; i < m * n; ++i) ASSERT_NEAR(gpu[i], cpu[i], 1e-4) << "element " << i;
}

}  // namespace
