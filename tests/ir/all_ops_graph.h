// A small, valid graph that uses every op of ir/ops.def at least once, with non-default
// attributes, dims, quoted names and non-finite constants: the shared fixture for
// round-trip tests (text, JSON) and anything else that must see every op.
#pragma once

#include <memory>
#include <vector>

#include "ir/graph.h"

namespace tgc::test {

std::unique_ptr<Graph> buildAllOpsGraph();

// Ops of the table that `g` does not use (empty for buildAllOpsGraph(), or the helper
// needs a new line for a new op).
std::vector<OpKind> opsMissingFrom(const Graph& g);

}  // namespace tgc::test
