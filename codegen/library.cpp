// The library-kernel registry (codegen/library.h).
#include "codegen/library.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "codegen/attention_cpu.h"
#include "codegen/gemm_int8.h"
#include "codegen/loss_kernels.h"
#include "ir/op_table.h"

namespace tgc::codegen {
namespace {

// The run-time operands after the first `first` (3 forward, 6 backward): [mask] [bias]
// [seed, offset] into p; returns the mask.
const uint8_t* runTimeOperands(AttentionParams& p, const void* const* in, size_t first) {
  const uint8_t* mask = p.hasMask ? static_cast<const uint8_t*>(in[first]) : nullptr;
  size_t at = first + (p.hasMask ? 1 : 0);
  if (p.hasBias) p.bias = in[at++];
  if (p.pDrop > 0) {
    p.seed = static_cast<uint64_t>(*static_cast<const int64_t*>(in[at]));
    p.offset = static_cast<uint64_t>(*static_cast<const int64_t*>(in[at + 1]));
  }
  return mask;
}

// fused_attention(q, k, v [, mask] [, bias] [, seed, offset]) -> out, lse
LibraryKernel bindFusedAttention(const Node& n) {
  libraryFloatType(n);
  const AttentionParams params = attentionParamsFor(n);
  return [params](const void* const* in, void* const* out, ThreadPool& pool) {
    AttentionParams p = params;
    const uint8_t* mask = runTimeOperands(p, in, 3);
    attentionForward(p, in[0], in[1], in[2], mask, out[0], out[1], pool);
  };
}

// fused_attention_grad(q, k, v, out, lse, dout [, mask] [, bias] [, seed, offset])
//   -> dq, dk, dv [, dbias]
LibraryKernel bindFusedAttentionGrad(const Node& n) {
  libraryFloatType(n);
  const AttentionParams params = attentionParamsFor(n);
  return [params](const void* const* in, void* const* out, ThreadPool& pool) {
    AttentionParams p = params;
    const uint8_t* mask = runTimeOperands(p, in, 6);
    if (p.biasGrad) p.dbias = out[3];
    attentionBackward(p, in[0], in[1], in[2], in[3], in[4], in[5], mask, out[0], out[1],
                      out[2], pool);
  };
}

// quantized_matmul(x, w): the weights are quantized and packed at the first run and, with
// weights_constant, kept for every run after it (the caller promises the same values: the
// executable may hand the kernel the same buffer with new contents, so nothing here could
// tell); without it every run packs them.
LibraryKernel bindQuantizedMatmul(const Node& n) {
  const TensorType& w = n.operand(1)->type();
  const int64_t k = w.shape[0], cols = w.shape[1];
  const int64_t rows = k == 0 ? 0 : n.operand(0)->type().numel() / k;
  const int64_t outElems = n.result()->type().numel();
  const bool constant = n.attrBool("weights_constant");
  struct Packed {
    bool ready = false;
    Int8Weights weights;
  };
  auto packed = std::make_shared<Packed>();
  return [=](const void* const* in, void* const* out, ThreadPool& pool) {
    float* y = static_cast<float*>(out[0]);
    if (k == 0) {
      std::fill(y, y + outElems, 0.0f);
      return;
    }
    if (!constant || !packed->ready) {
      packed->weights = quantizeWeights(static_cast<const float*>(in[1]), k, cols, cols);
      packed->ready = true;
    }
    int8Gemm(static_cast<const float*>(in[0]), rows, k, packed->weights, nullptr, y, cols, &pool);
  };
}

// dynamic_update_slice(x, update, starts) -> y: y = x, skipped when the executable placed y
// in x's own buffer (runtime/executable.h), then update's rows written at starts, each start
// checked against its dim first (a start outside it is an error, as in the interpreter).
LibraryKernel bindDynamicUpdateSlice(const Node& n) {
  const Shape x = n.operand(0)->type().shape, u = n.operand(1)->type().shape;
  const size_t elem = dtypeSize(n.result()->type().dtype);
  const size_t bytes = static_cast<size_t>(n.result()->type().numel()) * elem;
  const std::string node = describeNode(n);
  return [=](const void* const* in, void* const* out, ThreadPool&) {
    const auto* starts = static_cast<const int64_t*>(in[2]);
    if (std::string why = updateStartsError(x, u, starts); !why.empty())
      throw IRError(fmt::format("{}: {}", node, why));
    auto* y = static_cast<char*>(out[0]);
    if (out[0] != in[0]) std::memcpy(y, in[0], bytes);
    int64_t rows = 1;  // the update's rows: every dim but the last
    for (size_t d = 0; d + 1 < u.size(); ++d) rows *= u[d];
    const size_t run = (u.empty() ? 1 : static_cast<size_t>(u.back())) * elem;
    const auto* src = static_cast<const char*>(in[1]);
    for (int64_t r = 0; r < rows && run > 0; ++r) {
      int64_t rest = r, offset = 0, scale = 1;
      for (size_t d = u.size(); d-- > 0;) {
        const int64_t i = d + 1 == u.size() ? 0 : rest % u[d];
        if (d + 1 < u.size()) rest /= u[d];
        offset += (starts[d] + i) * scale;
        scale *= x[d];
      }
      std::memcpy(y + static_cast<size_t>(offset) * elem, src + static_cast<size_t>(r) * run, run);
    }
  };
}

[[noreturn]] LibraryKernel none(const Node& n) {
  throw IRError(fmt::format("{}: the CPU backend has no library kernel for this op",
                            describeNode(n)));
}

}  // namespace

DType libraryFloatType(const Node& n) {
  DType found = DType::f32;
  bool any = false;
  auto check = [&](const Value* v) {
    const DType d = v->type().dtype;
    if (!isFloat(d)) return;
    if (d != DType::f32 && d != DType::f64)
      throw IRError(fmt::format("{}: the CPU library kernels run f32 and f64 only, not {}",
                                describeNode(n), dtypeName(d)));
    if (any && d != found)
      throw IRError(fmt::format("{}: mixes {} and {}", describeNode(n), dtypeName(found),
                                dtypeName(d)));
    found = d;
    any = true;
  };
  for (const Value* v : n.operands()) check(v);
  for (size_t r = 0; r < n.numResults(); ++r) check(n.result(r));
  if (!any) throw IRError(fmt::format("{}: has no float operand or result", describeNode(n)));
  return found;
}

LibraryKernel bindLibraryKernel(const Node& n) {
  switch (n.op()) {
    case OpKind::FusedAttention: return bindFusedAttention(n);
    case OpKind::FusedAttentionGrad: return bindFusedAttentionGrad(n);
    case OpKind::SoftmaxCrossEntropy: return bindSoftmaxCrossEntropy(n);
    case OpKind::SoftmaxCrossEntropyGrad: return bindSoftmaxCrossEntropyGrad(n);
    case OpKind::LayerNormGrad: return bindLayerNormGrad(n);
    case OpKind::QuantizedMatmul: return bindQuantizedMatmul(n);
    case OpKind::DynamicUpdateSlice: return bindDynamicUpdateSlice(n);
    // Every other op runs elsewhere (codegen::classify decides which ops are library ops);
    // a library op missing above is refused here, naming the node, when a graph compiles.
    default:
      return none(n);
  }
}

}  // namespace tgc::codegen
