// The training-step graph: forward + loss + backward + optimizer update in one graph.
#pragma once

#include <cstdint>
#include <string>

#include "ir/graph.h"

namespace tgc {

struct OptimizerConfig {
  // AdamW with the paper's settings.
  double beta1 = 0.9;
  double beta2 = 0.98;
  double eps = 1e-9;
  double weight_decay = 0.0;  // decoupled (AdamW); 0 is the paper's Adam
  // Learning rate: "noam" is the paper's d_model^-0.5 * min(step^-0.5, step * warmup^-1.5),
  // times lr_scale; "constant" is lr.
  std::string schedule = "noam";
  double lr = 1e-3;
  double lr_scale = 1.0;
  int64_t warmup = 4000;
  int64_t d_model = 512;
  // Clip gradients to this global L2 norm; 0 turns clipping off.
  double clip_norm = 1.0;
  // Compute precision of the matmuls (forward and backward): f32, or bf16 through the
  // mixed-precision pass before autodiff (passes/mixed_precision.cpp). Parameters, their
  // gradients, the optimizer state and update stay f32 either way.
  DType precision = DType::f32;
};

// Rewrites `g`, whose outputs[0] is the scalar loss, into one training step:
//   new inputs:  for each parameter p (input role "param"): adam.m.<p>, adam.v.<p> (role
//                "state", same type as p), and `step` (i64[], role "data", counting from 1;
//                reused if the graph already has it);
//   outputs:     loss, the other original outputs (metrics), grad_norm (before clipping),
//                lr, then new.<p>, new.adam.m.<p>, new.adam.v.<p> for every parameter.
// With cfg.precision == bf16 the mixed-precision pass runs after the forward fusions.
// Returns the number of parameters updated.
size_t buildTrainStep(Graph& g, const OptimizerConfig& cfg);

// The learning rate the graph computes at `step` (for tests and the progress display).
double scheduledLearningRate(const OptimizerConfig& cfg, int64_t step);

}  // namespace tgc
