// Generic fusion for the CPU backend: which graph nodes share one generated kernel.
//
// lowerGroup (codegen/lower.h) turns a group of nodes into one kernel whose only outputs
// are the last node's results; every other member is computed as an expression inside it
// and never reaches memory. formFusionGroups picks the groups:
//
//   Walking the graph backwards, each Kernel node (classify) not yet taken starts a group
//   and is its last node. A producer of an operand of a member joins the group when
//     - it is a Kernel node that may sit inside a group (not a reduction, softmax,
//       layer_norm or scatter_add: those must be last),
//     - its result is used by exactly one node (that member) and is not a graph output,
//     - fusing it does not recompute it much: the group evaluates it at no more indices
//       than it has elements, or at most 3 times that for a cheap op (no transcendental,
//       no Philox), or any number of times for a pure index remapping (broadcast,
//       transpose, slice, iota) or a cast.
//   GEMMs, views and sources are never inside a group: their values come from memory.
//   Duplicable nodes are the exception to "one user": a free or cheap op computed from
//   other duplicable nodes and values in memory of which at most one is large (the others
//   are broadcast operands), such as a one-hot mask made from iota and the labels or a
//   gradient times its clipping factor, is copied into the group of each user that can
//   take it (same recompute bound): that reads no more memory than storing it once and
//   loading it in each user. It gets a launch of its own only if some user cannot take it
//   (a GEMM, a graph output).
//
// A group runs where its last node was. That is always a valid order: a member's value is
// used only inside its group (or recomputed by each group using it), and every value the
// group reads from outside is a source, a GEMM or view result, or the last node of an
// earlier group.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace tgc::codegen {

// The Kernel nodes of g partitioned into groups, in launch order (by last node); each
// group lists its nodes in graph order, ready for lowerGroup. Deterministic.
std::vector<std::vector<const Node*>> formFusionGroups(const Graph& g);

}  // namespace tgc::codegen
