// The built-in passes, one file each. registry.cpp lists them by name.
#pragma once

#include "passes/pass.h"

namespace tgc {

// dce.cpp: removes nodes whose results are unused and are not outputs; inputs stay.
bool runDCE(Graph& g, PassContext& ctx);
// cse.cpp: merges nodes with equal op, operands, attributes and result types.
bool runCSE(Graph& g, PassContext& ctx);
// constant_fold.cpp: evaluates nodes whose operands are all constants.
bool runConstantFold(Graph& g, PassContext& ctx);
// canonicalize.cpp: algebraic identities and layout-op simplifications.
bool runCanonicalize(Graph& g, PassContext& ctx);
// fuse_attention.cpp: matmul -> scale -> mask -> softmax -> (dropout) -> matmul becomes one
// fused_attention node (runs before autodiff; passes/fusion.h runs it with the other fusions).
bool runFuseAttention(Graph& g, PassContext& ctx);
// fuse_norms.cpp: LayerNorm and RMSNorm written out (mean, variance, rsqrt) become
// layer_norm and rms_norm (before autodiff, with the other forward fusions).
bool runFuseNorms(Graph& g, PassContext& ctx);
// fuse_activations.cpp: GELU written out (erf or tanh form, recognized by what it computes)
// becomes gelu (before autodiff, with the other forward fusions).
bool runFuseActivations(Graph& g, PassContext& ctx);
bool runQuantize(Graph& g, PassContext& ctx);
// fuse_cross_entropy.cpp: log_softmax + one-hot + label-smoothed NLL -> softmax_cross_entropy.
bool runFuseCrossEntropy(Graph& g, PassContext& ctx);
// fuse_ffn.cpp: the ReLU gradient of ReLU -> dropout reads the dropout's output only (after
// autodiff; passes/fusion.h runs it with the gradient fusions).
bool runFuseFFN(Graph& g, PassContext& ctx);
// mixed_precision.cpp: f32 matmuls compute in bf16 (each operand cast, result cast back to
// f32); everything else stays f32. Before autodiff; merge-casts after it (or right after,
// in an inference graph) makes the casts of one value one.
bool runMixedPrecision(Graph& g, PassContext& ctx);
bool runMergeCasts(Graph& g, PassContext& ctx);
// After merge-casts in a bf16 training step: ReLU gradients read the bf16 copies.
bool runNarrowReluGradients(Graph& g, PassContext& ctx);
// autodiff.cpp: appends d outputs[0] / d each parameter (inputs of role param) as outputs.
bool runAutodiff(Graph& g, PassContext& ctx);
// train_step.cpp: the training step's update from those gradients: the learning-rate
// schedule, global-norm clipping and AdamW (ctx.optimizer); the gradients stop being outputs.
bool runAdamW(Graph& g, PassContext& ctx);
// rematerialize.cpp: saved values that a short chain of elementwise/layout ops recomputes
// from values live anyway are recomputed in the backward instead of kept (after autodiff;
// the forward is what outputs[0], the loss, depends on). buildTrainStep runs it last unless
// TGC_NO_FUSION=1 or TGC_NO_REMAT=1 (rematerializeEnabled()).
bool runRematerialize(Graph& g, PassContext& ctx);
bool rematerializeEnabled();

}  // namespace tgc
