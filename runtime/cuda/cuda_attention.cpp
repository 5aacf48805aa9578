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

static_assert(sizeof(AttnParams) == 34 * 8, "AttnParams must match attention_kernels.cu");

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

AttentionLaunch attentionLaunchFor(const Node& n) {
  AttentionLaunch l;
  l.kernel = attentionKernelFor(n);
  const codegen::AttentionParams a = codegen::attentionParamsFor(n);
  l.forward = n.op() == OpKind::FusedAttention;
  const int64_t bytes = elementBytes(l.kernel);
  l.sharedBytes = static_cast<unsigned>(l.forward ? forwardShared(a.d, a.dv, bytes)
                                                  : backwardShared(a.d, a.dv, bytes));
  const int64_t blocks = a.batch * (((l.forward ? a.tq : a.tk) + kTile - 1) / kTile);
  if (blocks > 0x7fffffff)
    throw IRError(fmt::format("{}: {} blocks exceed the grid", describeNode(n), blocks));
  l.blocks = static_cast<unsigned>(blocks);
  AttnParams& p = l.params;
  p.batch = a.batch;
  p.tq = a.tq;
  p.tk = a.tk;
  p.d = a.d;
  p.dvDim = a.dv;
  p.maskStrideI = a.maskStrideI;
  p.maskStrideJ = a.maskStrideJ;
  p.scale = a.scale;
  p.pDrop = a.pDrop;
  p.keepScale = 1.0 / (1.0 - a.pDrop);
  p.causal = a.causal;
  p.hasMask = a.hasMask;
  p.dropout = a.pDrop > 0;
  p.heads = a.heads;
  p.hasBias = a.hasBias;
  p.biasGrad = a.biasGrad;
  p.biasStrideI = a.biasStrideI;
  p.biasStrideJ = a.biasStrideJ;
  l.maskBase.assign(a.maskBase.begin(), a.maskBase.end());
  l.biasBase.assign(a.biasBase.begin(), a.biasBase.end());
  l.maskAt = l.forward ? 3 : 6;  // after q, k, v (and out, lse, dout)
  l.biasAt = l.maskAt + (a.hasMask ? 1 : 0);
  l.seedAt = n.operands().size() - 2;
  if (a.biasGrad) l.dbiasBytes = a.biasElements * bytes;
  return l;
}

AttnParams AttentionLaunch::withPointers(const CUdeviceptr* in, const CUdeviceptr* out) const {
  AttnParams p = params;
  p.q = in[0];
  p.k = in[1];
  p.v = in[2];
  if (p.hasMask) p.mask = in[maskAt];
  if (p.hasBias) p.bias = in[biasAt];
  if (p.biasGrad) p.dbias = out[3];
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
  }
  return p;
}

CudaLibraryLaunch CudaAttention::bind(const Node& n) const {
  const std::string what = describeNode(n);
  auto l = std::make_shared<const AttentionLaunch>(attentionLaunchFor(n));
  CUfunction fn = module_->function(l->kernel);
  // The mask's offsets per batch item, uploaded on each launch from l's copy.
  std::shared_ptr<DeviceBuffer> maskBase;
  if (l->params.hasMask && !l->maskBase.empty())
    maskBase = std::make_shared<DeviceBuffer>(
        device_, static_cast<int64_t>(l->maskBase.size() * sizeof(long long)),
        "fused attention's mask offsets");
  std::shared_ptr<DeviceBuffer> biasBase;
  if (l->params.hasBias && !l->biasBase.empty())
    biasBase = std::make_shared<DeviceBuffer>(
        device_, static_cast<int64_t>(l->biasBase.size() * sizeof(long long)),
        "fused attention's bias offsets");
  const int64_t dqBytes = l->params.batch * l->params.tq * l->params.d *
                          elementBytes(l->kernel);
  return [=](const CUdeviceptr* in, const CUdeviceptr* out, Stream& s) {
    AttnParams p = l->withPointers(in, out);
    if (maskBase) {
      s.upload(maskBase->ptr(), l->maskBase.data(), maskBase->bytes());
      p.maskBase = maskBase->ptr();
    }
    if (biasBase) {
      s.upload(biasBase->ptr(), l->biasBase.data(), biasBase->bytes());
      p.biasBase = biasBase->ptr();
    }
    if (!l->forward && dqBytes > 0) s.fill(p.dq, 0, dqBytes);  // the kernel adds into dq
    if (l->dbiasBytes > 0) s.fill(p.dbias, 0, l->dbiasBytes);  // and into dbias
    if (l->blocks == 0) return;
    void* args[] = {&p};
    launch(fn, Dim3{l->blocks, 1, 1}, Dim3{kThreads, 1, 1}, l->sharedBytes, s, args, what);
  };
}

}  // namespace tgc::runtime::cuda
