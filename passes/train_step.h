// The training-step graph: forward + loss + backward + optimizer update in one graph.
#pragma once

#include <cstdint>
#include <string>

#include "ir/graph.h"
#include "passes/pass_manager.h"
#include "passes/optimizer_config.h"

namespace tgc {

// Rewrites `g`, whose outputs[0] is the scalar loss, into one training step:
//   new inputs:  for each parameter p (input role "param"): adam.m.<p>, adam.v.<p> (role
//                "state", same type as p), and `step` (i64[], role "data", counting from 1;
//                reused if the graph already has it);
//   outputs:     loss, the other original outputs (metrics), grad_norm (before clipping),
//                lr, then new.<p>, new.adam.m.<p>, new.adam.v.<p> for every parameter.
// It runs the default training pipeline through the pass manager (passes/default_pipeline.h:
// the forward fusions, mixed-precision with cfg.precision bf16, autodiff, fuse-ffn, a
// canonicalize/cse/dce clean-up, adamw, rematerialize), with `pm`'s printing and dumps. Returns the number of parameters updated.
size_t buildTrainStep(Graph& g, const OptimizerConfig& cfg, const PassManagerOptions& pm = {});

// The learning rate the graph computes at `step` (for tests and the progress display).
double scheduledLearningRate(const OptimizerConfig& cfg, int64_t step);

}  // namespace tgc
