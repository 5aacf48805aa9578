// Graph IR as a Graphviz digraph (dot), for pictures.
#pragma once

#include <string>

#include "ir/graph.h"

namespace tgc {

std::string graphToDot(const Graph& g);

}  // namespace tgc
