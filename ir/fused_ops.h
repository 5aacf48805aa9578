// The fused ops of ops.def: their shape rules and their exact semantics.
//
// fused_attention(q, k, v [, mask] [, bias] [, seed, offset]) -> out, lse
//   q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv]: one float dtype, equal batch dims "...".
//   mask (operand 3 when has_mask): bool of q's rank, broadcasting to [..., Tq, Tk]
//   (a key-padding mask is [B, 1, 1, Tk]); true = the key may be attended to.
//   bias (the next operand when has_bias): q's dtype and rank, broadcasting to
//   [..., Tq, Tk] (ALiBi [1, H, Tq, Tk], a relative-position bias, a float mask).
//   causal (needs Tq == Tk): key j is allowed for query i only when j <= i.
//   seed i64[], offset i64[] (the last two operands, present exactly when p_drop > 0).
//     s[i, j]  = scale * dot(q[i], k[j]) + bias[i, j]      over allowed (i, j)
//     lse[i]   = log(sum over allowed j of exp(s[i, j])), -inf when no key is allowed
//     p[i, j]  = exp(s[i, j] - lse[i]) where allowed, else 0 (a fully masked row is all 0)
//     dropout: element e (row-major index of (..., i, j) in [..., Tq, Tk]) is kept when
//              philoxUniformAt(seed, offset, e) >= p_drop (compared in the dtype), and a
//              kept p is multiplied by (dtype)(1 / (1 - p_drop)) -- exactly the frontend's
//              dropout(softmax(...), p) (frontend/eval_tensor.cpp), so fused == unfused bit
//              for bit in the random stream.
//     out[i]   = sum over j of p_dropped[i, j] * v[j]       [..., Tq, Dv]
//     lse                                                   [..., Tq], q's dtype
//
//   layout "bhtd" (the default) is the above; "bthd" ("heads inside rows", what the
//   projection GEMMs write once reshaped) stores q, k, v and out as [..., T, H, D]: the
//   op reads them as their [..., H, T, D] transposes (dims -3 and -2 swapped) and writes out
//   in the same layout. lse stays [..., H, Tq], and the mask and the dropout's index space
//   keep their meaning over [..., H, Tq, Tk]. It is the fused op of
//   transpose(attention(transpose(q), transpose(k), transpose(v))) with perm [0, 2, 1, 3],
//   without the four copies (passes/fuse_attention.cpp folds them).
//
// fused_attention_grad(q, k, v, out, lse, dout [, mask] [, bias] [, seed, offset])
//     -> dq, dk, dv [, dbias]
//   Same attributes as the forward (layout bthd: out, dout, dq, dk, dv too are
//   [..., T, H, D]), and bias_grad: then a fourth result dbias of the bias's type, ds summed
//   over the dims the bias broadcasts along (0 at disallowed (i, j)). Recomputes p from lse
//   (never stores [Tq, Tk]):
//     z[i, j]   = dropout keep factor (0 or 1/(1-p_drop)), 1 without dropout
//     dv        = (p * z)^T dout
//     dpz[i, j] = dot(dout[i], v[j]);   dp = dpz * z
//     delta[i]  = dot(dout[i], out[i])          (= sum_j p dp)
//     ds        = p * (dp - delta)
//     dq = scale * ds k,   dk = scale * ds^T q
//   Rows with lse = -inf (fully masked) contribute nothing.
//
// softmax_cross_entropy(logits [..., V], targets [...] i32/i64) -> loss [...], lse [...]
//   With eps = smoothing:  lse = logsumexp(logits[r, :]),
//     loss[r] = (1 - eps) * (lse - logits[r, t_r]) + eps * (lse - mean_c logits[r, c])
//   which is (1 - eps) * nll + eps * (-mean log_softmax): the frontend's
//   label_smoothed_cross_entropy before its padding mask and mean. A target outside
//   [0, V) is an error in the interpreter; the library kernel gives that row loss 0.
// softmax_cross_entropy_grad(logits, targets, lse, dloss) -> dlogits [..., V]
//     dlogits[r, c] = dloss[r] * (exp(logits[r, c] - lse[r]) - (1 - eps) [c == t_r] - eps / V)
//
// layer_norm_grad(x [..., D], gamma [D], dy [..., D]) -> dx [..., D], dgamma [D], dbeta [D]
//   The gradient of layer_norm(x, gamma, beta) (eps as there) for the output gradient dy:
//     xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps) (biased variance over D)
//     dbeta = sum over rows of dy,   dgamma = sum over rows of dy * xhat
//     dx = rstd * (g - mean_D(g) - xhat * mean_D(g * xhat)),   g = dy * gamma
#pragma once

#include <string>
#include <vector>

#include "ir/op_table.h"

namespace tgc {

// fused_attention's layout attribute; throws ShapeError for a name other than the two.
enum class AttentionLayout { Bhtd, Bthd };
AttentionLayout attentionLayoutOf(const std::string& name);
// A bthd operand's shape [..., T, H, D] as the op reads it, [..., H, T, D] (rank >= 3).
Shape bthdAsBhtd(Shape s);

std::vector<TensorType> inferFusedAttention(const InferContext& c);
std::vector<TensorType> inferFusedAttentionGrad(const InferContext& c);
std::vector<TensorType> inferSoftmaxCrossEntropy(const InferContext& c);
std::vector<TensorType> inferSoftmaxCrossEntropyGrad(const InferContext& c);
std::vector<TensorType> inferLayerNormGrad(const InferContext& c);
std::vector<TensorType> inferQuantizedMatmul(const InferContext& c);

}  // namespace tgc
