// Folding elementwise ops that follow a matmul into the GEMM's epilogue
// (codegen/gemm_epilogue.h), on the graph the executable is about to launch (after autodiff
// and the training step are built).
//
// A matmul whose result has one user starts a chain; each next node joins while the value
// it consumes has exactly that one user and is not a graph output, and it matches the next
// epilogue stage (stages only go forward: bias, addend, activation, scale, mask):
//
//   mul(mm, c)             c a scalar constant, right after the matmul: alpha *= c
//   add(v, bias)           bias of n elements ([n] or [1, ..., n]) broadcast over rows
//   add(v, r)              r of v's exact type: the addend (residuals, gradient sums)
//   relu(v), gelu(v)       the activation (gelu with approximate "none" or "tanh")
//   mul(v, c)              c a scalar constant: the scale
//   where(gt(h, 0), v, 0)  the ReLU gradient dH * (H > 0): mask h, kept where h > 0
//   where(m, v, 0)         m a bool of v's shape: kept where m is true (m in memory anyway,
//                          or read only here while the where's result is stored: dropout)
//
// (add, mul and the scalar constants match in either operand order.) The chain becomes
// the matmul alone, moved to where its last node was (so every epilogue operand is
// computed before it), under the last node's name; the table says which epilogue each
// folded matmul runs and which values feed it.
//
// Autodiff's ReLU rule tests the pre-activation (gt(y, 0) with h = relu(y)), which would
// keep y alive for the backward and stop the forward chain at the bias. gt(y, 0) is the
// same as gt(relu(y), 0) for every y (NaN and -0 included), so those tests are first
// rewritten to read h where h is stored anyway (the next matmul reads it).
//
// Bias gradients (foldBiasGradients, a second pass): for y = x W + b the backward computes
// dW = matmul(x, dY, transpose_a) and db = reduce_sum(dY) over the rows of dY, which are
// the K of that product. The GEMM sums the columns of op(B) while it packs B anyway
// (GemmDesc::sumB), so the reduction joins the matmul as a second result: the reduce_sum
// stays in the graph (a backend that ignores the table still computes it), and the CPU
// executable gives its result a slot written by the GEMM launch and launches no kernel for
// it.
#pragma once

#include <unordered_map>
#include <vector>

#include "codegen/gemm.h"
#include "ir/graph.h"

namespace tgc::runtime {

struct FoldedEpilogue {
  codegen::GemmEpilogue stages;  // layouts of addend and mask: those of C (set by applyTo)
  double alpha = 1.0;            // folded scalar factor of the product
  const Value* bias = nullptr;
  const Value* addend = nullptr;
  const Value* mask = nullptr;
  // The folded reduce_sum's result, written by the launch as GemmDesc::sumB (null: none).
  const Value* sumB = nullptr;

  // The values the GEMM launch reads besides A and B, in the order epilogueOperands takes
  // their pointers: bias, addend, mask (the present ones).
  std::vector<const Value*> operands() const;
  // Sets d's epilogue, alpha and sumB; d is the node's GemmDesc as the executable derives it
  // (addend and mask are contiguous values of C's shape, so they share C's layout).
  void applyTo(codegen::GemmDesc& d) const;
};

// Matmul node -> its epilogue, for the nodes folded.
using GemmEpilogues = std::unordered_map<const Node*, FoldedEpilogue>;

// Rewrites g as described above; returns the folded matmuls. TGC_NO_GEMM_EPILOGUE=1 in the
// environment turns the fold off (for comparisons).
GemmEpilogues foldGemmEpilogues(Graph& g);

// Adds to `folded` the reduce_sums computed as column sums of a matmul's B:
// reduce_sum(v) with v and the matmul's B the same memory (up to reshapes), summing exactly
// the K rows of op(B) (every axis but the last of v for B as stored; the last axis for a
// transposed B), keepdims or not, f32 or f64, an unbatched matmul (rank-2 operands) with
// K > 0 and a non-empty result. A bf16 B's sums are f32: reduce_sum(cast(v) {dtype=f32})
// with v B's memory and the cast read by that sum alone (mixed precision's FFN bias
// gradients; the others sum the f32 gradient a bf16 B was rounded from, another sum). Each reduce_sum joins one matmul. The matmul moves before
// the reduce_sum's first user when it comes after it (and can: its operands computed
// before). Returns the reduce_sum nodes folded. TGC_NO_GEMM_EPILOGUE=1 or
// TGC_NO_BIAS_GRAD_FOLD=1 turns it off.
std::vector<const Node*> foldBiasGradients(Graph& g, GemmEpilogues& folded);

// The epilogue operands of a launch: `ptrs` points at those of operands() in order, then
// (when d.sumB) at the sumB output.
codegen::GemmEpilogueOperands epilogueOperands(const codegen::GemmDesc& d, void* const* ptrs);

}  // namespace tgc::runtime
