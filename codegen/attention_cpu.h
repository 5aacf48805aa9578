// FlashAttention on the CPU: the library kernels of fused_attention and fused_attention_grad
// (semantics: ir/fused_ops.h), in f32 and f64.
//
// Forward: one task per (batch item, block of 64 queries), handed out from a shared counter
// over the pool's threads. Each task walks the key blocks of 64 keys with an online softmax
// (a running row max m and sum l; the output block is rescaled by exp(m_old - m_new) when
// the max grows), so no [Tq, Tk] matrix ever exists: besides out and lse [..., Tq], memory
// is per thread a few 64 x 64 blocks and one head's keys (transposed). The causal mask and
// a broadcast bool mask are read inside the block; key blocks entirely past the causal
// diagonal are skipped, and inside a block pair the rows go in groups of 16, each cut at
// the last key its last row may see; dropout draws philoxUniformAt for each element of the
// [..., Tq, Tk] index space (8 Philox calls, 32 elements, at a time with AVX2), exactly the
// frontend's stream.
// Short sequences (L <= 64, the Transformer presets) are one block: one task per head, and
// the forward computes each row's softmax exactly (max, exp, sum and 1/l in one call), scales
// p by 1/l and dropout's factors and writes the product p v straight into out -- no running
// max, no rescaling, no accumulator block (TGC_NO_ATTENTION_ONE_BLOCK=1: the online path).
// Each thread keeps its scratch blocks from call to call (rebuilt when the shapes change).
// With a key-padding mask (the same for every query) both kernels stop at the head's last
// allowed key: a padded batch item costs its own length, not the padded one.
//
// Backward (FlashAttention-2 loop order): one task per batch item (batch x heads); it owns
// that head's dq, dk, dv, so tasks never write the same memory. Key blocks outer (their dk,
// dv accumulate in 64-row blocks), query blocks inner (from the diagonal on when causal);
// p is recomputed from the saved lse, and delta[i] = dot(dout[i], out[i]) once per row.
//
// The block products run on a small register-blocked kernel (6 rows x 2 vectors, the rows
// left over in tiles of 3-5, never 1-2) built for AVX2+FMA with __attribute__((target)),
// chosen at run time with __builtin_cpu_supports; a portable C++ version runs elsewhere
// (and in tests, forced by setAttentionIsa). On 64^3 blocks it ran 1.2-1.4x faster than
// calling the JIT-compiled GEMM (codegen/gemm.h) per block, which packs both operands every
// call. Its columns are padded to 16: when the head dims are multiples of 16 (32, 64) q, k,
// v, dout are its operands as they are and dq, dk, dv accumulate in the outputs; other head
// dims go through padded per-thread copies. Keys and values are transposed per block with
// 8 x 8 AVX2 transposes. f32 uses a vectorized exp (Cephes polynomial, ~1 ulp); f64 uses
// std::exp.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/dtype.h"

namespace tgc {
class Node;
class ThreadPool;
}  // namespace tgc

namespace tgc::codegen {

// One fused attention call. q [batch, tq, d], k [batch, tk, d], v [batch, tk, dv],
// out [batch, tq, dv], lse [batch, tq], contiguous, where batch is the product of the
// op's batch dims (H included) -- or, when heads > 1 (layout bthd), q, k, v, out (dout,
// dq, dk, dv) are [batch / heads, T, heads, D]: batch item b is head b % heads, its rows
// heads * D apart, and every loop reads and writes them in place through that stride.
// lse is [batch, tq] either way.
struct AttentionParams {
  DType dtype = DType::f32;  // f32 or f64
  int64_t batch = 1, tq = 0, tk = 0, d = 0, dv = 0;
  int64_t heads = 1;
  double scale = 1;
  bool causal = false;  // key j allowed for query i only when j <= i (tq == tk)
  // Optional bool mask (0/1 bytes; true = allowed). Element (b, i, j) is at
  // maskBase[b] + i * maskStrideI + j * maskStrideJ (strides 0 broadcast a dim).
  bool hasMask = false;
  std::vector<int64_t> maskBase;
  int64_t maskStrideI = 0, maskStrideJ = 0;
  // Optional additive bias of the dtype, added to the scaled scores: element (b, i, j) at
  // biasBase[b] + i * biasStrideI + j * biasStrideJ (strides 0 broadcast a dim).
  bool hasBias = false;
  std::vector<int64_t> biasBase;
  int64_t biasStrideI = 0, biasStrideJ = 0;
  int64_t biasElements = 0;  // of the bias (and dbias) as stored
  // Backward with biasGrad: dbias (the bias's shape) gets the score gradients summed over
  // the bias's broadcast dims. Batch items that share a part of the bias run one after the
  // other in one task, in order, so the sums do not depend on the threads.
  bool biasGrad = false;
  double pDrop = 0;  // dropout inside the kernel when > 0; seed and offset as the op's
  // Run-time operands, filled in by the caller for each call: dropout's seed and offset,
  // the bias and dbias.
  uint64_t seed = 0, offset = 0;
  const void* bias = nullptr;
  void* dbias = nullptr;
};

// The parameters of a fused_attention or fused_attention_grad node (seed, offset, bias and
// dbias are operands: the caller fills them in at run time). Throws IRError naming the node for a
// dtype other than f32 / f64.
AttentionParams attentionParamsFor(const Node& n);

// out, lse from q, k, v (and mask when hasMask). A row with no allowed key gets out = 0 and
// lse = -inf.
void attentionForward(const AttentionParams& p, const void* q, const void* k, const void* v,
                      const uint8_t* mask, void* out, void* lse, ThreadPool& pool);

// dq, dk, dv from q, k, v, out, lse, dout (ir/fused_ops.h's formulas). The outputs must
// not alias any input: with head dims that are multiples of 16, dq, dk and dv are written
// in place while q, k and dout are still being read.
void attentionBackward(const AttentionParams& p, const void* q, const void* k, const void* v,
                       const void* out, const void* lse, const void* dout, const uint8_t* mask,
                       void* dq, void* dk, void* dv, ThreadPool& pool);

// Which inner loops run. Avx2 is the default on CPUs with AVX2 and FMA; tests switch to
// Portable to cover the fallback. Not thread-safe: set it between calls only. Setting Avx2
// on a CPU without it throws std::runtime_error.
enum class AttentionIsa { Avx2, Portable };
AttentionIsa attentionIsa();
void setAttentionIsa(AttentionIsa isa);
// Whether this CPU can run the Avx2 loops (x86 with AVX2 and FMA).
bool attentionHasAvx2();

}  // namespace tgc::codegen
