// The library-kernel registry (codegen/library.h).
#include "codegen/library.h"

#include <fmt/format.h>

#include "codegen/attention_cpu.h"
#include "codegen/loss_kernels.h"

namespace tgc::codegen {
namespace {

// fused_attention(q, k, v [, mask] [, seed, offset]) -> out, lse
LibraryKernel bindFusedAttention(const Node& n) {
  libraryFloatType(n);
  const AttentionParams params = attentionParamsFor(n);
  const bool dropout = params.pDrop > 0;
  return [params, dropout](const void* const* in, void* const* out, ThreadPool& pool) {
    AttentionParams p = params;
    if (dropout) {  // the last two operands
      const size_t s = p.hasMask ? 4 : 3;
      p.seed = static_cast<uint64_t>(*static_cast<const int64_t*>(in[s]));
      p.offset = static_cast<uint64_t>(*static_cast<const int64_t*>(in[s + 1]));
    }
    const auto* mask = p.hasMask ? static_cast<const uint8_t*>(in[3]) : nullptr;
    attentionForward(p, in[0], in[1], in[2], mask, out[0], out[1], pool);
  };
}

// fused_attention_grad(q, k, v, out, lse, dout [, mask] [, seed, offset]) -> dq, dk, dv
LibraryKernel bindFusedAttentionGrad(const Node& n) {
  libraryFloatType(n);
  const AttentionParams params = attentionParamsFor(n);
  const bool dropout = params.pDrop > 0;
  return [params, dropout](const void* const* in, void* const* out, ThreadPool& pool) {
    AttentionParams p = params;
    if (dropout) {
      const size_t s = p.hasMask ? 7 : 6;
      p.seed = static_cast<uint64_t>(*static_cast<const int64_t*>(in[s]));
      p.offset = static_cast<uint64_t>(*static_cast<const int64_t*>(in[s + 1]));
    }
    const auto* mask = p.hasMask ? static_cast<const uint8_t*>(in[6]) : nullptr;
    attentionBackward(p, in[0], in[1], in[2], in[3], in[4], in[5], mask, out[0], out[1],
                      out[2], pool);
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
    // Every other op runs elsewhere (codegen::classify decides which ops are library ops);
    // a library op missing above is refused here, naming the node, when a graph compiles.
    default:
      return none(n);
  }
}

}  // namespace tgc::codegen
