// cuda_gemm_bench: tgc's CUDA GEMM (runtime/cuda/cuda_gemm.h) against cuBLAS on the same
// device, at the Transformer's shapes (base preset, batch 64 x 64 tokens = 4096 rows):
//   tokens x 512 x 512     Q/K/V/O projections      tokens x 2048 x 512  FFN up
//   tokens x 512 x 2048    FFN down                 64 x (128 x 128 x 64) attention scores
// in bf16 (tensor cores, fp32 accumulation) and f32 (CUDA cores; cuBLAS without TF32).
// Each product is checked against cuBLAS's result, then timed with events over repeats.
//
//   cuda_gemm_bench            the table, then one "RESULT ..." line per case
//   cuda_gemm_bench --probe    the device, or "no CUDA device: ..." and exit status 2
// Exit status: 0, 1 on an error or a wrong result, 2 without a device.
#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "runtime/cuda/cuda_gemm.h"
#include "runtime/cuda/driver.h"

using namespace tgc;
using namespace tgc::runtime::cuda;

namespace {

void checkCublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("{}: cuBLAS status {}", what, static_cast<int>(s)));
}

struct Case {
  std::string name;
  int64_t batch, m, n, k;
  bool transB;
};

std::vector<unsigned char> randomMatrix(int64_t count, DType d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<unsigned char> out(static_cast<size_t>(count) * dtypeSize(d));
  for (int64_t i = 0; i < count; ++i) {
    const float f = u(rng);
    if (d == DType::f32) {
      std::memcpy(&out[static_cast<size_t>(i) * 4], &f, 4);
    } else {
      const uint16_t h = floatToBF16(f);
      std::memcpy(&out[static_cast<size_t>(i) * 2], &h, 2);
    }
  }
  return out;
}

double valueAt(const std::vector<unsigned char>& v, size_t i, DType d) {
  if (d == DType::f32) {
    float f;
    std::memcpy(&f, &v[i * 4], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &v[i * 2], 2);
  return bf16ToFloat(h);
}

struct Timed {
  double ms = 0;      // per product
  double tflops = 0;
};

template <class F>
Timed timeIt(const std::shared_ptr<Device>& dev, Stream& s, double flops, F&& launchOnce) {
  for (int i = 0; i < 3; ++i) launchOnce();  // warm-up (first launch loads the module)
  s.synchronize();
  Event start(dev), end(dev);
  // Enough repeats for ~50 ms of work, from one timed launch.
  start.record(s);
  launchOnce();
  end.record(s);
  end.synchronize();
  const double once = std::max(1e-3, static_cast<double>(Event::elapsedMs(start, end)));
  const int reps = static_cast<int>(std::clamp(50.0 / once, 5.0, 2000.0));
  start.record(s);
  for (int i = 0; i < reps; ++i) launchOnce();
  end.record(s);
  end.synchronize();
  Timed t;
  t.ms = static_cast<double>(Event::elapsedMs(start, end)) / reps;
  t.tflops = flops / (t.ms * 1e-3) / 1e12;
  return t;
}

int runBench() {
  auto dev = Device::open();
  const DeviceInfo& info = dev->info();
  fmt::print("device: {} ({}, {} SMs, {:.1f} GiB), driver {}\n", info.name, info.arch(),
             info.multiprocessors, static_cast<double>(info.totalBytes) / (1 << 30),
             info.driverVersion);
  Stream s(dev);
  CudaGemm gemm(dev);
  cublasHandle_t handle = nullptr;
  checkCublas(cublasCreate(&handle), "cublasCreate");
  checkCublas(cublasSetStream(handle, reinterpret_cast<cudaStream_t>(s.handle())),
              "cublasSetStream");

  const int64_t tokens = 64 * 64;
  const std::vector<Case> cases = {{"tokens x 512 x 512", 1, tokens, 512, 512, false},
                                   {"tokens x 2048 x 512", 1, tokens, 2048, 512, false},
                                   {"tokens x 512 x 2048", 1, tokens, 512, 2048, false},
                                   {"64 x (128 x 128 x 64) Q K^T", 64, 128, 128, 64, true}};
  int bad = 0;
  fmt::print("{:<30} {:>5} {:>10} {:>10} {:>10} {:>10} {:>7} {:>9}\n", "shape (batch x m x n x k)",
             "dtype", "tgc ms", "tgc TF/s", "cuBLAS ms", "cuBLAS TF/s", "ratio", "max err");
  for (DType dt : {DType::bf16, DType::f32}) {
    for (const Case& c : cases) {
      const int64_t sa = c.m * c.k, sb = c.k * c.n, sc = c.m * c.n;
      const size_t es = dtypeSize(dt);
      auto ha = randomMatrix(c.batch * sa, dt, 1), hb = randomMatrix(c.batch * sb, dt, 2);
      DeviceBuffer a(dev, c.batch * sa * static_cast<int64_t>(es), "A"),
          b(dev, c.batch * sb * static_cast<int64_t>(es), "B"),
          ct(dev, c.batch * sc * static_cast<int64_t>(es), "C (tgc)"),
          cb(dev, c.batch * sc * static_cast<int64_t>(es), "C (cuBLAS)");
      s.upload(a.ptr(), ha.data(), static_cast<int64_t>(ha.size()));
      s.upload(b.ptr(), hb.data(), static_cast<int64_t>(hb.size()));

      CudaGemmDesc d = CudaGemmDesc::contiguous(dt, c.m, c.n, c.k, false, c.transB);
      if (c.batch > 1) {
        d.batch = {c.batch};
        d.strideA = {sa};
        d.strideB = {sb};
        d.strideC = {sc};
      }
      // Row-major C = A op(B) is column-major C^T = op(B)^T A^T: cuBLAS gets B first.
      const cudaDataType type = dt == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
      const float alpha = 1, beta = 0;
      const cublasOperation_t opB = c.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
      auto cublas = [&] {
        checkCublas(cublasGemmStridedBatchedEx(
                        handle, opB, CUBLAS_OP_N, static_cast<int>(c.n), static_cast<int>(c.m),
                        static_cast<int>(c.k), &alpha, reinterpret_cast<void*>(b.ptr()), type,
                        static_cast<int>(d.ldb), sb, reinterpret_cast<void*>(a.ptr()), type,
                        static_cast<int>(d.lda), sa, &beta, reinterpret_cast<void*>(cb.ptr()),
                        type, static_cast<int>(d.ldc), sc, static_cast<int>(c.batch),
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "cublasGemmStridedBatchedEx");
      };
      auto ours = [&] { gemm.run(d, a.ptr(), b.ptr(), ct.ptr(), s); };
      ours();
      cublas();
      std::vector<unsigned char> got(static_cast<size_t>(c.batch * sc) * es), want(got.size());
      s.download(got.data(), ct.ptr(), static_cast<int64_t>(got.size()));
      s.download(want.data(), cb.ptr(), static_cast<int64_t>(want.size()));
      s.synchronize();
      double maxErr = 0, maxRef = 0;
      for (size_t i = 0; i < got.size() / es; ++i) {
        maxErr = std::max(maxErr, std::fabs(valueAt(got, i, dt) - valueAt(want, i, dt)));
        maxRef = std::max(maxRef, std::fabs(valueAt(want, i, dt)));
      }
      const double relErr = maxErr / std::max(maxRef, 1e-30);
      // Both accumulate in fp32; bf16 outputs round to 8 bits.
      const bool ok = relErr <= (dt == DType::bf16 ? 2e-2 : 1e-4);
      if (!ok) ++bad;

      const double flops = 2.0 * static_cast<double>(c.batch * c.m * c.n * c.k);
      const Timed t = timeIt(dev, s, flops, ours), r = timeIt(dev, s, flops, cublas);
      fmt::print("{:<30} {:>5} {:>10.4f} {:>10.1f} {:>10.4f} {:>10.1f} {:>7.2f} {:>9.2e}{}\n",
                 c.name, dtypeName(dt), t.ms, t.tflops, r.ms, r.tflops, t.tflops / r.tflops,
                 relErr, ok ? "" : "  WRONG");
      fmt::print("RESULT gemm dtype={} shape=\"{}\" tgc_tflops={:.2f} cublas_tflops={:.2f} "
                 "ratio={:.3f} rel_err={:.2e} ok={}\n",
                 dtypeName(dt), c.name, t.tflops, r.tflops, t.tflops / r.tflops, relErr,
                 ok ? 1 : 0);
    }
  }
  cublasDestroy(handle);
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool probe = argc > 1 && std::string(argv[1]) == "--probe";
  if (std::string why = noDeviceReason(); !why.empty()) {
    fmt::print(stderr, "{}\n", why);
    return 2;
  }
  try {
    if (probe) {
      const DeviceInfo& i = Device::open()->info();
      fmt::print("{} ({}), {} SMs, {:.1f} GiB, driver {}\n", i.name, i.arch(), i.multiprocessors,
                 static_cast<double>(i.totalBytes) / (1 << 30), i.driverVersion);
      return 0;
    }
    return runBench();
  } catch (const std::exception& e) {
    fmt::print(stderr, "cuda_gemm_bench: error: {}\n", e.what());
    return 1;
  }
}
