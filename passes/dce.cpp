// dce: dead code elimination. Graph::removeDeadNodes does the work: a node lives when one
// of its results is a graph output or feeds a live node; inputs always live, because they
// are the graph's signature.
#include "passes/passes.h"

namespace tgc {

bool runDCE(Graph& g, PassContext&) { return g.removeDeadNodes() > 0; }

}  // namespace tgc
