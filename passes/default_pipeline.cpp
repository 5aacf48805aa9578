#include "passes/default_pipeline.h"

#include <fmt/format.h>

#include "ir/env_flag.h"
#include "passes/fusion.h"
#include "passes/passes.h"

namespace tgc {

Pipeline defaultPipeline(const PipelineMode& mode) {
  if (mode.precision != DType::f32 && mode.precision != DType::bf16)
    throw PassError(fmt::format("precision {} is not supported (f32, bf16)", dtypeName(mode.precision)));
  const bool forward = mode.kind == PipelineMode::Kind::Forward;
  if (mode.quantize && !forward)
    throw PassError("int8 quantization is for inference graphs, not gradients or training steps");
  std::vector<std::string> names;
  // Fused forward ops differentiate into fused backward ops, so the fusions come first.
  if (forwardFusionsEnabled())
    names.insert(names.end(), {"fuse-norms", "fuse-activations", "fuse-attention", "fuse-cross-entropy"});
  // Before autodiff each matmul operand has its own bf16 cast, so that the gradients of
  // a value read by several matmuls sum in f32; merge-casts then makes them one each.
  const bool bf16 = mode.precision == DType::bf16;
  if (bf16) names.push_back("mixed-precision");
  if (!forward) names.push_back("autodiff");
  if (bf16) names.push_back("merge-casts");
  if (mode.quantize) names.push_back("quantize");
  if (mode.kind == PipelineMode::Kind::TrainStep) {
    if (!envFlag("TGC_NO_FUSION") && !envFlag("TGC_NO_FUSE_FFN")) names.push_back("fuse-ffn");
    if (bf16) names.push_back("narrow-relu-gradients");
    // What autodiff emitted twice (the same transpose of a weight for two gradients, zeros)
    // merged, before adamw, and before rematerialize, whose recomputations CSE would undo.
    names.push_back("fixpoint(canonicalize,cse,dce)");
    names.push_back("adamw");
    if (rematerializeEnabled()) names.push_back("rematerialize");
  }
  std::string text;
  for (const auto& n : names) text += (text.empty() ? "" : ",") + n;
  return parsePipeline(text);
}

Pipeline parsePipelineFor(std::string_view text, const PipelineMode& mode) {
  return parsePipeline(text, {{"default", defaultPipeline(mode)}, {"none", Pipeline{}}});
}

}  // namespace tgc
