// Templates for the data-movement anchors that the generic pointwise template handles
// poorly: transpose (tiled when the contiguous dim moves) and concat (one contiguous copy
// per operand and row). Both copy raw elements of groups whose operands come from memory;
// with an operand computed inside the group they use the pointwise template.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "codegen/lower_loops.h"
#include "codegen/lower_templates.h"

namespace tgc::codegen::lower {

using kir::LoopKind;

namespace {

// A transpose with size-1 dims dropped and runs of input dims that stay adjacent merged:
// output dim i is input dim perm[i]; both shapes row-major.
struct CollapsedTranspose {
  Shape in, out;
  std::vector<size_t> perm;
};

CollapsedTranspose collapseTranspose(const Shape& in, const std::vector<int64_t>& perm) {
  std::vector<std::pair<size_t, size_t>> runs;  // [first, last] input dims, in output order
  for (int64_t p : perm) {
    auto d = static_cast<size_t>(p);
    if (in[d] == 1) continue;
    if (!runs.empty() && runs.back().second + 1 == d) {
      runs.back().second = d;
    } else {
      // Size-1 input dims between two runs do not break adjacency.
      bool adjacent = !runs.empty() && runs.back().second < d;
      for (size_t e = adjacent ? runs.back().second + 1 : d; adjacent && e < d; ++e)
        adjacent = in[e] == 1;
      if (adjacent) runs.back().second = d;
      else runs.push_back({d, d});
    }
  }
  std::vector<size_t> order(runs.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return runs[a].first < runs[b].first; });
  CollapsedTranspose t;
  t.perm.resize(runs.size());
  for (size_t rank = 0; rank < order.size(); ++rank) {
    const auto& run = runs[order[rank]];
    int64_t size = 1;
    for (size_t d = run.first; d <= run.second; ++d) size *= in[d];
    t.in.push_back(size);
    t.perm[order[rank]] = rank;
  }
  for (size_t i = 0; i < runs.size(); ++i) t.out.push_back(t.in[t.perm[i]]);
  return t;
}

}  // namespace

void lowerTranspose(Ctx& c) {
  const Node& n = c.anchor();
  const Value* x = n.operand(0);
  const Value* out = n.result();
  if (c.inGroup(x)) return lowerPointwise(c);
  CollapsedTranspose t = collapseTranspose(x->type().shape, n.attrInts("perm"));
  const size_t q = t.out.size();
  if (q <= 1 || t.perm[q - 1] == q - 1) return lowerPointwise(c);  // a copy, or rows move whole

  int ib = c.inputBuffer(x);
  int ob = c.outputBuffer(out);
  std::vector<int64_t> inStride(q, 1);
  for (size_t d = q - 1; d-- > 0;) inStride[d] = inStride[d + 1] * t.in[d + 1];
  auto inOffset = [&](const Index& idx) {
    ExprP f = c.num(0);
    for (size_t i = 0; i < q; ++i) f = kir::add(kir::mul(idx[i], inStride[t.perm[i]]), f);
    return f;
  };
  // Tiles of T x T elements (T * size = 32 bytes) over the output's last dim and the output
  // dim that reads the input's last dim, so reads and writes stay in cache lines a tile
  // shares. Larger tiles were slower (measured): with power-of-two row strides their rows
  // fall into the same L1 sets and evict each other.
  const size_t last = q - 1;
  const size_t ob2 = static_cast<size_t>(std::find(t.perm.begin(), t.perm.end(), q - 1) - t.perm.begin());
  const int64_t tile = std::max<int64_t>(8, 32 / static_cast<int64_t>(dtypeSize(out->type().dtype)));
  std::vector<size_t> others;
  Shape parShape;
  for (size_t i = 0; i < q; ++i)
    if (i != last && i != ob2) others.push_back(i), parShape.push_back(t.out[i]);
  const int64_t tilesB = (t.out[ob2] + tile - 1) / tile;
  const int64_t tilesL = (t.out[last] + tile - 1) / tile;
  parShape.push_back(tilesB);

  kir::Kernel& k = c.kernel();
  int p = c.newVar("p", DType::i64);
  k.parallelVar = p;
  k.parallelExtent = numElements(parShape);
  k.costPerIteration = std::max<int64_t>(1, 2 * tile * tile * tilesL);
  Index idx(q);
  for (size_t i = 0; i < others.size(); ++i) idx[others[i]] = unravelDim(c, c.var(p), parShape, i);
  ExprP tb = unravelDim(c, c.var(p), parShape, others.size());
  k.body = {forLoop(c, "tile", tilesL, LoopKind::Serial, [&](ExprP tl) {
    return blockLoop(
        c, tb, tile, t.out[ob2], LoopKind::Serial,
        [&](ExprP b) {
          idx[ob2] = b;
          return blockLoop(
              c, tl, tile, t.out[last], LoopKind::Serial,
              [&](ExprP l) {
                idx[last] = l;
                return Stmts{kir::store(ob, c.flat(idx, t.out), kir::load(k, ib, inOffset(idx)))};
              },
              fmt::format("i{}", last));
        },
        fmt::format("i{}", ob2));
  })};
}

void lowerConcat(Ctx& c) {
  const Node& n = c.anchor();
  const Value* out = n.result();
  const Shape& os = out->type().shape;
  const auto axis = static_cast<size_t>(normalizeAxis(n.attrInt("axis"), out->type().rank()));
  int64_t pre = 1, post = 1;
  for (size_t d = 0; d < axis; ++d) pre *= os[d];
  for (size_t d = axis + 1; d < os.size(); ++d) post *= os[d];
  bool fromMemory = std::none_of(n.operands().begin(), n.operands().end(),
                                 [&](const Value* v) { return c.inGroup(v); });
  // Few rows: the pointwise template splits the work into blocks instead.
  if (!fromMemory || pre < kTargetParallel) return lowerPointwise(c);

  int ob = c.outputBuffer(out);
  kir::Kernel& k = c.kernel();
  int p = c.newVar("p", DType::i64);
  k.parallelVar = p;
  k.parallelExtent = pre;
  k.costPerIteration = std::max<int64_t>(1, 2 * os[axis] * post);
  const int64_t rowLen = os[axis] * post;
  int64_t offset = 0;
  for (const Value* v : n.operands()) {
    const int64_t len = v->type().shape[axis] * post;
    if (len > 0) {
      int ib = c.inputBuffer(v);
      k.body.push_back(forLoop(c, "j", len, LoopKind::Vector, [&](ExprP j) {
        ExprP dst = kir::add(kir::add(kir::mul(c.var(p), rowLen), c.num(offset)), j);
        ExprP src = kir::add(kir::mul(c.var(p), len), j);
        return Stmts{kir::store(ob, dst, kir::load(k, ib, src))};
      }));
    }
    offset += len;
  }
}

}  // namespace tgc::codegen::lower
