#include "passes/fusion.h"

#include <cstdlib>
#include <string>

#include "passes/passes.h"

namespace tgc {

void runForwardFusions(Graph& g) {
  // Same reading as the runtime's flag: set, not empty and not "0".
  const char* off = std::getenv("TGC_NO_FUSION");
  if (off && *off && std::string(off) != "0") return;
  PassContext ctx;
  runFuseAttention(g, ctx);
  runFuseCrossEntropy(g, ctx);
}

}  // namespace tgc
