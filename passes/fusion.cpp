#include "passes/fusion.h"

#include "ir/env_flag.h"
#include "passes/default_pipeline.h"
#include "passes/pass_manager.h"

namespace tgc {

bool forwardFusionsEnabled() {
  if (envFlag("TGC_NO_FUSION")) return false;
  return envSwitch("TGC_FORWARD_FUSIONS").value_or(kForwardFusionsByDefault);
}

void runForwardFusions(Graph& g) {
  PassManagerOptions quiet;
  quiet.verify_each = false;  // the caller's graph was verified; the passes keep it valid
  PassManager(defaultPipeline(PipelineMode{}), quiet).run(g);
}

}  // namespace tgc
