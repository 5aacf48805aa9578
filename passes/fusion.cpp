#include "passes/fusion.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "passes/passes.h"

namespace tgc {
namespace {

// Same reading as the runtime's flags: unset or empty is nullopt, "0" is false.
std::optional<bool> envFlag(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v) != "0";
}

}  // namespace

bool forwardFusionsEnabled() {
  if (envFlag("TGC_NO_FUSION").value_or(false)) return false;
  return envFlag("TGC_FORWARD_FUSIONS").value_or(kForwardFusionsByDefault);
}

void runForwardFusions(Graph& g) {
  if (!forwardFusionsEnabled()) return;
  PassContext ctx;
  runFuseAttention(g, ctx);
  runFuseCrossEntropy(g, ctx);
}

void runGradientFusions(Graph& g) {
  if (envFlag("TGC_NO_FUSION").value_or(false) || envFlag("TGC_NO_FUSE_FFN").value_or(false))
    return;
  PassContext ctx;
  runFuseFFN(g, ctx);
}

}  // namespace tgc
