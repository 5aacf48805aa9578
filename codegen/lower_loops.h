// Loop-nest scaffolding shared by the lowering templates: how a kernel's iteration space
// is split between the runtime's parallel index and serial/vector loops.
#pragma once

#include <functional>

#include "codegen/lower_expr.h"

namespace tgc::codegen::lower {

using BodyFn = std::function<Stmts(const Index&)>;

// Makes the kernel's body iterate over `shape` (rank >= 1): the leading dims (and, when
// they give too little parallel work, blocks of the last dim) come from the parallel
// index p; the rest are loops, the innermost of kind `inner`. body(idx) gives the
// innermost statements for the multi-index idx. Sets parallelVar, parallelExtent and
// costPerIteration (opsPerElement per element of `shape`).
void parallelNest(Ctx& c, const Shape& shape, kir::LoopKind inner, int64_t opsPerElement,
                  const BodyFn& body);

// A loop over the block `blk` (an i64 expression) of [0, total) cut in blocks of `bs`:
// body(j) gets the index j in [0, total); the last block may be shorter, so it gets its
// own loop (trip counts are constants).
Stmts blockLoop(Ctx& c, ExprP blk, int64_t bs, int64_t total, kir::LoopKind kind,
                const std::function<Stmts(ExprP)>& body, const std::string& name = "j");

// A plain loop of `extent` over a fresh variable named `name`; body(var) its statements.
kir::StmtP forLoop(Ctx& c, const std::string& name, int64_t extent, kir::LoopKind kind,
                   const std::function<Stmts(ExprP)>& body);

// The i64 index of dim d of a row-major shape from a flat index f: (f / stride) % size.
ExprP unravelDim(Ctx& c, ExprP f, const Shape& shape, size_t d);

// How many parallel iterations the templates aim for (enough to balance a few threads).
inline constexpr int64_t kTargetParallel = 32;

}  // namespace tgc::codegen::lower
