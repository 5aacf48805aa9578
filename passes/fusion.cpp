#include "passes/fusion.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "ir/env_flag.h"
#include "passes/passes.h"

namespace tgc {
namespace {


}  // namespace

bool forwardFusionsEnabled() {
  if (envFlag("TGC_NO_FUSION")) return false;
  return envSwitch("TGC_FORWARD_FUSIONS").value_or(kForwardFusionsByDefault);
}

void runForwardFusions(Graph& g) {
  if (!forwardFusionsEnabled()) return;
  PassContext ctx;
  runFuseNorms(g, ctx);
  runFuseActivations(g, ctx);
  runFuseAttention(g, ctx);
  runFuseCrossEntropy(g, ctx);
}

void runGradientFusions(Graph& g) {
  if (envFlag("TGC_NO_FUSION") || envFlag("TGC_NO_FUSE_FFN"))
    return;
  PassContext ctx;
  runFuseFFN(g, ctx);
}

}  // namespace tgc
