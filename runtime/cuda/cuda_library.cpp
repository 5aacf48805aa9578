#include "runtime/cuda/cuda_library.h"

#include <fmt/format.h>

#include <algorithm>

#include "codegen/cuda/nvrtc.h"
#include "runtime/cuda/cuda_attention.h"
#include "runtime/cuda/library_kernels_cu.h"  // generated: kLibraryKernelsSource

namespace tgc::runtime::cuda {

namespace {

constexpr unsigned kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

// The f32 or f64 of the node's first operand; others are an IRError.
std::string floatSuffix(const Node& n) {
  const DType d = n.operand(0)->type().dtype;
  if (d == DType::f32) return "f32";
  if (d == DType::f64) return "f64";
  throw IRError(fmt::format("{}: the CUDA library kernels take f32 or f64, not {}",
                            describeNode(n), dtypeName(d)));
}

std::string targetSuffix(const Node& n) {
  const DType d = n.operand(1)->type().dtype;
  if (d == DType::i32) return "i32";
  if (d == DType::i64) return "i64";
  throw IRError(fmt::format("{}: targets must be i32 or i64, not {}", describeNode(n),
                            dtypeName(d)));
}

unsigned blocksFor(int64_t work) {
  return static_cast<unsigned>(std::clamp<int64_t>(work, 1, kMaxBlocks));
}

}  // namespace

const std::string& librarySource() {
  static const std::string source(kLibraryKernelsSource);
  return source;
}

std::vector<std::string> libraryKernelNames() {
  std::vector<std::string> names;
  for (const char* t : {"f32", "f64"}) {
    names.push_back(fmt::format("tgc_ln_grad_rows_{}", t));
    names.push_back(fmt::format("tgc_ln_grad_cols_{}", t));
    for (const char* ti : {"i32", "i64"}) {
      names.push_back(fmt::format("tgc_sce_{}_{}", t, ti));
      names.push_back(fmt::format("tgc_sce_grad_{}_{}", t, ti));
    }
  }
  return names;
}

CudaLibrary::CudaLibrary(std::shared_ptr<Device> device) : device_(std::move(device)) {
  const auto compiled =
      codegen::cuda::compileCubin(librarySource(), "tgc_library", device_->info().arch());
  module_ = std::make_unique<Module>(device_, compiled.image, "the library kernels");
}

CudaLibrary::~CudaLibrary() = default;

std::vector<std::string> libraryKernelsFor(const Node& n) {
  switch (n.op()) {
    case OpKind::LayerNormGrad: {
      const std::string t = floatSuffix(n);
      return {"tgc_ln_grad_rows_" + t, "tgc_ln_grad_cols_" + t};
    }
    case OpKind::SoftmaxCrossEntropy:
      return {fmt::format("tgc_sce_{}_{}", floatSuffix(n), targetSuffix(n))};
    case OpKind::SoftmaxCrossEntropyGrad:
      return {fmt::format("tgc_sce_grad_{}_{}", floatSuffix(n), targetSuffix(n))};
    case OpKind::FusedAttention:
    case OpKind::FusedAttentionGrad:
      return {attentionKernelFor(n)};
    // Every other op runs elsewhere (codegen::classify decides which ops are library ops);
    // a library op missing above is refused here, naming the node, when a graph compiles.
    default:
      break;
  }
  throw IRError(fmt::format("{}: not a library op", describeNode(n)));
}

CudaLibraryLaunch CudaLibrary::bind(const Node& n) const {
  const std::string what = describeNode(n);
  const std::vector<std::string> names = libraryKernelsFor(n);  // checks op and dtypes
  if (n.op() == OpKind::FusedAttention || n.op() == OpKind::FusedAttentionGrad) {
    if (!attention_) attention_ = std::make_unique<CudaAttention>(device_);
    return attention_->bind(n);
  }
  if (n.op() == OpKind::LayerNormGrad) {
    const int64_t d = n.operand(0)->type().shape.back();
    const int64_t rows = d == 0 ? 0 : n.operand(0)->type().numel() / d;
    const double eps = n.attrFloat("eps");
    CUfunction rowsFn = module_->function(names[0]);
    CUfunction colsFn = module_->function(names[1]);
    // mean and rstd per row, from the row kernel to the column kernel.
    auto stats = std::make_shared<DeviceBuffer>(
        device_, 2 * rows * static_cast<int64_t>(dtypeSize(n.operand(0)->type().dtype)),
        "layer_norm_grad's row statistics");
    return [=](const CUdeviceptr* in, const CUdeviceptr* out, Stream& s) {
      if (rows == 0 || d == 0) return;
      CUdeviceptr x = in[0], gamma = in[1], dy = in[2], dx = out[0], dgamma = out[1],
                  dbeta = out[2], st = stats->ptr();
      long long r = rows, dd = d;
      double e = eps;
      void* rowArgs[] = {&x, &gamma, &dy, &dx, &st, &r, &dd, &e};
      launch(rowsFn, Dim3{blocksFor(rows), 1, 1}, Dim3{kThreads, 1, 1}, 0, s, rowArgs,
             what + " (rows)");
      void* colArgs[] = {&x, &dy, &st, &dgamma, &dbeta, &r, &dd};
      launch(colsFn, Dim3{static_cast<unsigned>((d + 31) / 32), 1, 1}, Dim3{32, 8, 1}, 0, s,
             colArgs, what + " (columns)");
    };
  }
  const int64_t v = n.operand(0)->type().shape.back();
  const int64_t rows = n.operand(1)->type().numel();
  const double eps = n.attrFloat("smoothing");
  CUfunction fn = module_->function(names[0]);
  if (n.op() == OpKind::SoftmaxCrossEntropy)
    return [=](const CUdeviceptr* in, const CUdeviceptr* out, Stream& s) {
      if (rows == 0) return;
      CUdeviceptr logits = in[0], targets = in[1], loss = out[0], lse = out[1];
      long long r = rows, vv = v;
      double e = eps;
      void* args[] = {&logits, &targets, &loss, &lse, &r, &vv, &e};
      launch(fn, Dim3{blocksFor(rows), 1, 1}, Dim3{kThreads, 1, 1}, 0, s, args, what);
    };
  return [=](const CUdeviceptr* in, const CUdeviceptr* out, Stream& s) {  // the gradient
    if (rows == 0 || v == 0) return;
    CUdeviceptr logits = in[0], targets = in[1], lse = in[2], dloss = in[3], dlogits = out[0];
    long long r = rows, vv = v;
    double e = eps;
    void* args[] = {&logits, &targets, &lse, &dloss, &dlogits, &r, &vv, &e};
    launch(fn, Dim3{blocksFor((rows * v + kThreads - 1) / kThreads), 1, 1},
           Dim3{kThreads, 1, 1}, 0, s, args, what);
  };
}

}  // namespace tgc::runtime::cuda
