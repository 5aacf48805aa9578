#include "codegen/lower_loops.h"

#include <fmt/format.h>

namespace tgc::codegen::lower {

using kir::BinaryOp;

kir::StmtP forLoop(Ctx& c, const std::string& name, int64_t extent, kir::LoopKind kind,
                   const std::function<Stmts(ExprP)>& body) {
  int v = c.newVar(name, DType::i64);
  return kir::loop(v, extent, body(c.var(v)), kind);
}

Stmts blockLoop(Ctx& c, ExprP blk, int64_t bs, int64_t total, kir::LoopKind kind,
                const std::function<Stmts(ExprP)>& body, const std::string& name) {
  int64_t nb = (total + bs - 1) / bs;
  int64_t rem = total - (nb - 1) * bs;
  auto make = [&](int64_t extent) {
    return forLoop(c, name, extent, kind, [&](ExprP j) {
      c.newBody();
      return body(kir::add(kir::mul(blk, bs), j));
    });
  };
  if (nb <= 1 || rem == bs) return {make(nb <= 1 ? total : bs)};
  return {kir::ifThen(kir::binary(BinaryOp::Eq, blk, c.num(nb - 1)), {make(rem)}, {make(bs)})};
}

ExprP unravelDim(Ctx& c, ExprP f, const Shape& shape, size_t d) {
  int64_t stride = 1;
  for (size_t e = d + 1; e < shape.size(); ++e) stride *= shape[e];
  ExprP q = stride == 1 ? f : kir::binary(BinaryOp::Div, f, c.num(stride));
  return d == 0 ? q : kir::binary(BinaryOp::Rem, q, c.num(shape[d]));
}

void parallelNest(Ctx& c, const Shape& shape, kir::LoopKind inner, int64_t opsPerElement,
                  const BodyFn& body) {
  kir::Kernel& k = c.kernel();
  const size_t r = shape.size();
  // Leading dims go to p until there is enough parallel work; the last dim always stays a
  // loop so the innermost loop runs over contiguous memory.
  size_t lead = 0;
  int64_t par = 1;
  while (lead + 1 < r && par < kTargetParallel) par *= shape[lead++];
  // Still too little: cut the last dim into blocks, each worth at least ~2k operations (a
  // multiple of 8 elements when the innermost loop is vectorized).
  int64_t last = shape[r - 1], bs = last, nb = 1;
  int64_t minBlock = std::max<int64_t>(1, 2048 / std::max<int64_t>(opsPerElement, 1));
  if (inner == kir::LoopKind::Vector) minBlock = (minBlock + 7) / 8 * 8;
  if (par < kTargetParallel && last >= 2 * minBlock) {
    int64_t want = (kTargetParallel + par - 1) / par;
    bs = std::max<int64_t>(minBlock, (last + want - 1) / want);
    if (inner == kir::LoopKind::Vector) bs = (bs + 7) / 8 * 8;
    nb = (last + bs - 1) / bs;
    if (nb <= 1) bs = last, nb = 1;
  }
  int p = c.newVar("p", DType::i64);
  k.parallelVar = p;
  k.parallelExtent = par * nb;
  int64_t perIter = bs;
  for (size_t d = lead; d + 1 < r; ++d) perIter *= shape[d];
  k.costPerIteration = std::max<int64_t>(1, perIter * opsPerElement);

  Shape parShape(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(lead));
  parShape.push_back(nb);
  Index idx(r);
  for (size_t d = 0; d < lead; ++d) idx[d] = unravelDim(c, c.var(p), parShape, d);
  ExprP blk = nb > 1 ? unravelDim(c, c.var(p), parShape, lead) : c.num(0);

  // Loops over dims lead..r-1, built from the inside out.
  std::function<Stmts(size_t)> level = [&](size_t d) -> Stmts {
    if (d + 1 == r)
      return blockLoop(
          c, blk, bs, last, inner,
          [&](ExprP j) {
            idx[d] = j;
            return body(idx);
          },
          fmt::format("i{}", d));
    return {forLoop(c, fmt::format("i{}", d), shape[d], kir::LoopKind::Serial, [&](ExprP v) {
      idx[d] = v;
      return level(d + 1);
    })};
  };
  k.body = level(lead);
}

}  // namespace tgc::codegen::lower
