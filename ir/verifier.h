// The verifier: checks that a graph is well formed and every stored type is what the op
// table's rule gives.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace tgc {

// Every problem found, each naming the op, its provenance name and the shapes involved.
std::vector<std::string> verifyGraph(const Graph& g);
// Throws IRError joining verifyGraph's messages, if any.
void verifyOrThrow(const Graph& g);

}  // namespace tgc
