// The graph fusions that run before autodiff: each rewrites ordinary ops into a fused op of
// ir/ops.def whose gradient rule emits a fused backward op, so the backward graph is fused too.
// The gradient fusions run after it, on the joint graph, and rewrite what autodiff emitted.
#pragma once

#include "ir/graph.h"

namespace tgc {

// Runs the forward fusions in order: fuse-norms (passes/fuse_norms.cpp), fuse-activations
// (passes/fuse_activations.cpp), fuse-attention (passes/fuse_attention.cpp),
// fuse-cross-entropy (passes/fuse_cross_entropy.cpp).
// buildTrainStep calls it before autodiff and Executable::compile on the graph it compiles
// (where a training step's forward is already differentiated it finds nothing: the
// intermediates it would fuse are read by the backward). Nothing runs unless
// forwardFusionsEnabled().
void runForwardFusions(Graph& g);

// TGC_NO_FUSION=1 turns the forward fusions off (as it turns off the runtime's kernel
// fusion); TGC_FORWARD_FUSIONS=1 or =0 turns them on or off; otherwise kForwardFusionsByDefault.
bool forwardFusionsEnabled();

inline constexpr bool kForwardFusionsByDefault = true;

// Runs the gradient fusions: fuse-ffn (passes/fuse_ffn.cpp). buildTrainStep calls it right
// after autodiff. Off with TGC_NO_FUSION=1 or TGC_NO_FUSE_FFN=1.
void runGradientFusions(Graph& g);

}  // namespace tgc
