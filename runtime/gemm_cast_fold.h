// Folding a weight's cast to bf16 into the GEMMs that read it (codegen::GemmDesc::bF32).
//
// Under --precision bf16 every weight W (f32: the optimizer's master copy) reaches its
// matmuls as cast(W) {dtype=bf16}: once for the forward product and once, rematerialized,
// for the backward's dX = dY W^T. Each cast is a kernel of its own that reads 4 bytes and
// writes 2 per element, and the GEMM then reads those 2 bytes again to pack them. The bf16
// GEMM packs B anyway, so it rounds the f32 W as it packs it, with the cast's rounding
// (nearest even, NaN kept quiet): the cast launches nothing and its bf16 copy never exists.
// The result is bit for bit the same.
//
// A cast folds when it casts f32 to bf16, its kernel group is itself alone, its operand is
// in memory as it is (an input, a constant, a GEMM's or a library call's result, or a view
// of one), its result is no graph output, and every use of it is as the B operand of a
// matmul. (A would work the same way; the activations' casts are fused into the kernels
// that compute them, so there is nothing to gain.)
#pragma once

#include <unordered_map>
#include <unordered_set>

#include "codegen/lower.h"
#include "ir/graph.h"

namespace tgc::runtime {

// The cast nodes of g that fold as above, given g's kernel groups (runtime/graph_walk.h).
// TGC_NO_GEMM_CAST_FOLD=1 in the environment turns the fold off (for comparisons).
std::unordered_set<const Node*> foldableGemmCasts(
    const Graph& g, const std::unordered_map<const Node*, codegen::FusionGroup>& groups);

}  // namespace tgc::runtime
