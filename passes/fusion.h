// The graph fusions that run before autodiff: each rewrites ordinary ops into a fused op of
// ir/ops.def whose gradient rule emits a fused backward op, so the backward graph is fused too.
// The gradient fusions run after it, on the joint graph, and rewrite what autodiff emitted.
#pragma once

#include "ir/graph.h"

namespace tgc {

// Runs the forward fusions, the default pipeline of an inference graph
// (passes/default_pipeline.h: fuse-norms, fuse-activations, fuse-attention,
// fuse-cross-entropy). Executable::compile calls it on the graph it compiles unless its
// caller ran a pipeline itself (where a training step's forward is already differentiated
// it finds nothing: the intermediates it would fuse are read by the backward). Nothing runs
// unless forwardFusionsEnabled().
void runForwardFusions(Graph& g);

// TGC_NO_FUSION=1 turns the forward fusions off (as it turns off the runtime's kernel
// fusion); TGC_FORWARD_FUSIONS=1 or =0 turns them on or off; otherwise kForwardFusionsByDefault.
bool forwardFusionsEnabled();

inline constexpr bool kForwardFusionsByDefault = true;

}  // namespace tgc
