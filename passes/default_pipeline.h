// The pipelines tgc runs itself: what `tgc run`, `tgc train` and `tgc compile` apply to a
// lowered graph, as text the pass manager runs (so --print-after-all and --dump-dir show
// it) and a user can print with --print-pipeline, edit and pass back with --passes.
#pragma once

#include <string>
#include <string_view>

#include "ir/dtype.h"
#include "passes/pass_manager.h"

namespace tgc {

struct PipelineMode {
  enum class Kind {
    Forward,    // an inference graph (tgc run, tgc compile)
    Gradients,  // outputs[0] differentiated, the gradients appended (tgc compile --grad)
    TrainStep,  // the gradients and the AdamW update (tgc train, tgc compile --train)
  };
  Kind kind = Kind::Forward;
  DType precision = DType::f32;  // bf16: the matmuls autocast (mixed-precision)
  bool quantize = false;         // int8 matmuls by parameter weights (Forward only)
};

// The default pipeline of a mode, after the switches that turn passes off (TGC_NO_FUSION,
// TGC_FORWARD_FUSIONS, TGC_NO_FUSE_FFN, TGC_NO_REMAT). Throws PassError for a precision
// other than f32 or bf16, or quantize outside Forward.
Pipeline defaultPipeline(const PipelineMode& mode);

// parsePipeline where the name "default" stands for defaultPipeline(mode) and "none" for
// nothing: "default,cse" runs the default pipeline and then CSE; "none" the raw lowering.
Pipeline parsePipelineFor(std::string_view text, const PipelineMode& mode);

}  // namespace tgc
