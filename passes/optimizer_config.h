// The optimizer settings of a training step (the adamw pass, passes/train_step.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "ir/dtype.h"

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

}  // namespace tgc
