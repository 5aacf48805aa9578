// CPU library kernels of softmax_cross_entropy, softmax_cross_entropy_grad and layer_norm_grad
// (semantics: ir/fused_ops.h), in f32 and f64.
//
// Every kernel is parallel over rows on the ThreadPool; a row is contiguous. The inner loops
// work on 16 f32 / 8 f64 lanes (two 32-byte GCC vectors, or fixed arrays that GCC
// vectorizes); they are compiled twice, portable and with __attribute__((target("avx2,fma"))),
// and the AVX2 set is picked at run time with __builtin_cpu_supports. Both sets sum in the
// same order (the AVX2 one contracts multiply-adds into FMAs, so the last bits may differ;
// each set is deterministic whatever the thread count). exp is a branch-free polynomial
// (f32: Cephes degree 6 as codegen/llvm_math.cpp, ~1 ulp; f64: degree-13 Taylor on
// |r| <= ln2/2, a few ulp), written once over a scalar or a vector type; the cross-entropy
// loops use a cheaper variant for arguments <= 0 (lossExp's nonPositive). Rows (blocks of
// rows for layer_norm_grad) are split dynamically over the threads, so that one slowed by
// other load does not hold up the launch.
//
//  * softmax_cross_entropy: one read of each row from memory, in 2 KB blocks: a block's max
//    and logit sum, then (from L1) its exp(x - m) summed, m the running max; a block that
//    raises m scales the sums so far by exp(m_old - m_new) (online log-sum-exp). The next
//    blocks are prefetched while one is in exps. A target outside [0, V) gives loss 0
//    (ir/fused_ops.h).
//  * softmax_cross_entropy_grad: one streaming pass writing
//    dloss * (exp(x - lse) - eps / V), then the target element's -(1 - eps) * dloss.
//    A row whose target is outside [0, V) gets zeros (the gradient of its constant loss), and
//    so does a row whose dloss is 0 (a padding token masked out of the mean), without its
//    exps (so a NaN logit in such a row does not reach dlogits, where 0 * NaN would).
//  * layer_norm_grad: dx per row (mean and rstd recomputed from x); dgamma and dbeta as
//    partial sums over fixed blocks of kLnBlockRows rows (so the result does not depend on
//    the thread count), then summed over blocks in order, in parallel over columns.
#pragma once

#include <cstdint>

#include "codegen/library.h"
#include "ir/dtype.h"

namespace tgc::codegen {

// Rows of logits [rows, v]; targets [rows] of targetType (i32 or i64); loss and lse [rows].
struct CrossEntropyShape {
  DType dtype = DType::f32;  // f32 or f64
  DType targetType = DType::i64;
  int64_t rows = 0, v = 0;
  double smoothing = 0;
};

void softmaxCrossEntropyForward(const CrossEntropyShape& s, const void* logits,
                                const void* targets, void* loss, void* lse, ThreadPool& pool);
void softmaxCrossEntropyBackward(const CrossEntropyShape& s, const void* logits,
                                 const void* targets, const void* lse, const void* dloss,
                                 void* dlogits, ThreadPool& pool);

// x, dy, dx [rows, d]; gamma, dgamma, dbeta [d].
struct LayerNormShape {
  DType dtype = DType::f32;  // f32 or f64
  int64_t rows = 0, d = 0;
  double eps = 1e-5;
};
inline constexpr int64_t kLnBlockRows = 32;

void layerNormBackward(const LayerNormShape& s, const void* x, const void* gamma, const void* dy,
                       void* dx, void* dgamma, void* dbeta, ThreadPool& pool);

// Library bindings (codegen/library.h) of the three ops: shapes and attributes read once from
// the node.
LibraryKernel bindSoftmaxCrossEntropy(const Node& n);
LibraryKernel bindSoftmaxCrossEntropyGrad(const Node& n);
LibraryKernel bindLayerNormGrad(const Node& n);

// Which inner loops run: Avx2 by default where the CPU has AVX2 and FMA; tests force
// Portable to cover the fallback. Set it between calls only. Avx2 on a CPU without it throws
// std::runtime_error.
enum class LossIsa { Avx2, Portable };
LossIsa lossIsa();
void setLossIsa(LossIsa isa);

// The vectorized exp of the kernels over n values (for tests). nonPositive: the variant the
// cross-entropy loops use, for arguments <= 0 (x - max, x - lse): below -87 (f32; -708 f64)
// it gives e^-87 instead of a subnormal or 0.
void lossExp(DType dtype, const void* x, void* y, int64_t n, bool nonPositive = false);

}  // namespace tgc::codegen
