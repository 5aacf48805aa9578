#include "runtime/cuda/cuda_attention.h"

#include <fmt/format.h>

#include "codegen/attention_cpu.h"
#include "codegen/cuda/nvrtc.h"
#include "runtime/cuda/attention_kernels_cu.h"  // generated: kAttentionKernelsSource

namespace tgc::runtime::cuda {

namespace {

// The kernels' tiling (attention_kernels.cu): 256 threads, tiles of 32 queries / keys.
constexpr unsigned kThreads = 256;
constexpr int64_t kTile = 32;
constexpr int64_t kTileLd = kTile + 1;
constexpr int64_t kMaxHeadDim = 128;

// attention_kernels.cu's AttnParams, field for field.
struct AttnParams {
  unsigned long long q = 0, k = 0, v = 0, out = 0, lse = 0, dout = 0, dq = 0, dk = 0, dv = 0,
                     mask = 0, maskBase = 0, seed = 0, offset = 0;
  long long batch = 0, tq = 0, tk = 0, d = 0, dvDim = 0, maskStrideI = 0, maskStrideJ = 0;
  double scale = 1, pDrop = 0, keepScale = 1;
  long long causal = 0, hasMask = 0, dropout = 0;
};
static_assert(sizeof(AttnParams) == 26 * 8, "AttnParams must match attention_kernels.cu");

// Dynamic shared memory of each kernel for head dims d and dv, elements of `bytes`.
int forwardShared(int64_t d, int64_t dv, int64_t bytes) {
  return static_cast<int>((kTile * d + d * kTileLd + kTile * dv) * bytes);
}
int backwardShared(int64_t d, int64_t dv, int64_t bytes) {
  return static_cast<int>(
      (d * kTileLd + dv * kTileLd + kTile * d + kTile * dv + 2 * kTile * kTileLd + 2 * kTile) *
      bytes);
}

int64_t elementBytes(const std::string& kernel) { return kernel.ends_with("f64") ? 8 : 4; }

}  // namespace

const std::string& attentionSource() {
  static const std::string source(kAttentionKernelsSource);
  return source;
}

std::vector<std::string> attentionKernelNames() {
  return {"tgc_attn_fwd_f32", "tgc_attn_fwd_f64", "tgc_attn_bwd_f32", "tgc_attn_bwd_f64"};
}

std::string attentionKernelFor(const Node& n) {
  const codegen::AttentionParams p = codegen::attentionParamsFor(n);  // checks the dtype
  if (p.d > kMaxHeadDim || p.dv > kMaxHeadDim)
    throw IRError(fmt::format("{}: the CUDA attention kernels take head dims up to {}, not {} "
                              "and {}",
                              describeNode(n), kMaxHeadDim, p.d, p.dv));
  return fmt::format("tgc_attn_{}_{}", n.op() == OpKind::FusedAttention ? "fwd" : "bwd",
                     p.dtype == DType::f64 ? "f64" : "f32");
}

CudaAttention::CudaAttention(std::shared_ptr<Device> device) : device_(std::move(device)) {
  const auto compiled =
      codegen::cuda::compileCubin(attentionSource(), "tgc_attention", device_->info().arch());
  module_ = std::make_unique<Module>(device_, compiled.image, "the attention kernels");
  // Every node of a graph binds before any runs: allow each kernel its largest tile.
  for (const std::string& name : attentionKernelNames()) {
    const int64_t bytes = elementBytes(name);
    module_->setMaxDynamicShared(module_->function(name),
                                 name.find("fwd") != std::string::npos
                                     ? forwardShared(kMaxHeadDim, kMaxHeadDim, bytes)
                                     : backwardShared(kMaxHeadDim, kMaxHeadDim, bytes));
  }
}

CudaAttention::~CudaAttention() = default;

CudaLibraryLaunch CudaAttention::bind(const Node& n) const {
  const std::string what = describeNode(n);
  const std::string name = attentionKernelFor(n);
  const codegen::AttentionParams a = codegen::attentionParamsFor(n);
  const bool forward = n.op() == OpKind::FusedAttention;
  const int64_t bytes = elementBytes(name);
  const unsigned shared = static_cast<unsigned>(forward ? forwardShared(a.d, a.dv, bytes)
                                                        : backwardShared(a.d, a.dv, bytes));
  const int64_t tiles = ((forward ? a.tq : a.tk) + kTile - 1) / kTile;
  const int64_t blocks = a.batch * tiles;
  if (blocks > 0x7fffffff)
    throw IRError(fmt::format("{}: {} blocks exceed the grid", what, blocks));
  CUfunction fn = module_->function(name);

  AttnParams base;
  base.batch = a.batch;
  base.tq = a.tq;
  base.tk = a.tk;
  base.d = a.d;
  base.dvDim = a.dv;
  base.maskStrideI = a.maskStrideI;
  base.maskStrideJ = a.maskStrideJ;
  base.scale = a.scale;
  base.pDrop = a.pDrop;
  base.keepScale = 1.0 / (1.0 - a.pDrop);
  base.causal = a.causal;
  base.hasMask = a.hasMask;
  base.dropout = a.pDrop > 0;
  const size_t maskAt = forward ? 3 : 6;
  const size_t seedAt = n.operands().size() - 2;
  // The mask's offset per batch item, uploaded on each launch (the host copy lives here).
  auto maskBase = std::make_shared<std::vector<long long>>(a.maskBase.begin(), a.maskBase.end());
  std::shared_ptr<DeviceBuffer> maskBaseDev;
  if (a.hasMask && !maskBase->empty())
    maskBaseDev = std::make_shared<DeviceBuffer>(
        device_, static_cast<int64_t>(maskBase->size() * sizeof(long long)),
        "fused attention's mask offsets");
  const int64_t dqBytes = a.batch * a.tq * a.d * bytes;

  return [=](const CUdeviceptr* in, const CUdeviceptr* out, Stream& s) {
    AttnParams p = base;
    p.q = in[0];
    p.k = in[1];
    p.v = in[2];
    if (p.hasMask) {
      p.mask = in[maskAt];
      if (maskBaseDev) {
        s.upload(maskBaseDev->ptr(), maskBase->data(), maskBaseDev->bytes());
        p.maskBase = maskBaseDev->ptr();
      }
    }
    if (p.dropout) {
      p.seed = in[seedAt];
      p.offset = in[seedAt + 1];
    }
    if (forward) {
      p.out = out[0];
      p.lse = out[1];
    } else {
      p.out = in[3];
      p.lse = in[4];
      p.dout = in[5];
      p.dq = out[0];
      p.dk = out[1];
      p.dv = out[2];
      if (dqBytes > 0) s.fill(p.dq, 0, dqBytes);  // the kernel adds into dq
    }
    if (blocks == 0) return;
    void* args[] = {&p};
    launch(fn, Dim3{static_cast<unsigned>(blocks), 1, 1}, Dim3{kThreads, 1, 1}, shared, s, args,
           what);
  };
}

}  // namespace tgc::runtime::cuda
