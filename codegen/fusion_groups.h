// Generic fusion for the CPU backend: which graph nodes share one generated kernel.
//
// lowerGroup (codegen/lower.h) turns a group of nodes into one kernel whose outputs are the
// last node's results and the group's other outputs (below); every other member is computed
// as an expression inside it and never reaches memory. formFusionGroups picks the groups:
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
//   Multi-output groups: when the last node is elementwise, a producer evaluated at exactly
//   the last node's indices (it has the last node's shape and reaches it through
//   elementwise members of that shape only) may join although its value is also needed
//   outside: it becomes another output of the group, stored once by the same kernel, when
//   every outside user runs after the last node (or the value is a graph output only).
//   AdamW's new m and v are such values: used by the new parameter and returned as state,
//   they are computed, stored and used in the parameter's kernel (g, m, v, p read once).
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
// used only inside its group (or recomputed by each group using it, or an output of the
// group used only after its last node), and every value the group reads from outside is a
// source, a GEMM or view result, or an output of an earlier group.
#pragma once

#include <vector>

#include "codegen/lower.h"
#include "ir/graph.h"

namespace tgc::codegen {

// The Kernel nodes of g partitioned into groups, in launch order (by last node), ready for
// lowerGroup. Deterministic.
std::vector<FusionGroup> formFusionGroups(const Graph& g);

}  // namespace tgc::codegen
