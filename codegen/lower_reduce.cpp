// Templates for the reductions, softmax and layer_norm. Accumulators are locals updated
// in Vector loops: the emitter gives float arithmetic `reassoc`, so LLVM vectorizes them.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "codegen/lower_loops.h"
#include "codegen/lower_templates.h"

namespace tgc::codegen::lower {

using kir::BinaryOp;
using kir::LoopKind;
using kir::UnaryOp;

namespace {

ExprP bin(BinaryOp op, ExprP a, ExprP b) { return kir::binary(op, std::move(a), std::move(b)); }

constexpr double kInf = std::numeric_limits<double>::infinity();

// Nested loops over the dims `dims` of `full` (the others already set), the last of kind
// `inner`; body gets the completed index.
Stmts loopsOver(Ctx& c, const Shape& shape, const std::vector<size_t>& dims, size_t from,
                Index& full, LoopKind inner, const std::function<Stmts(const Index&)>& body) {
  if (from == dims.size()) {
    c.newBody();
    return body(full);
  }
  size_t d = dims[from];
  bool last = from + 1 == dims.size();
  return {forLoop(c, fmt::format("r{}", d), shape[d], last ? inner : LoopKind::Serial,
                  [&](ExprP v) {
                    full[d] = v;
                    return loopsOver(c, shape, dims, from + 1, full, inner, body);
                  })};
}

struct ReduceSpec {
  OpKind op;
  DType acc;      // accumulator type
  ExprP init;
  BinaryOp combine;
};

ReduceSpec reduceSpec(const Node& n) {
  DType dt = n.operand(0)->type().dtype;
  ReduceSpec s{n.op(), isFloat(dt) ? computeType(dt) : DType::i64, nullptr, BinaryOp::Add};
  bool isMax = n.op() == OpKind::ReduceMax;
  s.combine = isMax ? BinaryOp::Max : BinaryOp::Add;
  if (isFloat(dt))
    s.init = kir::constFloat(isMax ? -kInf : 0.0, s.acc);
  else
    s.init = kir::constInt(isMax ? std::numeric_limits<int64_t>::min() : 0, DType::i64);
  return s;
}

// acc / count for reduce_mean (ints truncate toward zero, as the interpreter).
ExprP finishMean(Ctx& c, const ReduceSpec& s, ExprP acc, int64_t count) {
  if (s.op != OpKind::ReduceMean) return acc;
  if (isFloat(s.acc))
    return bin(BinaryOp::Div, acc, kir::constFloat(static_cast<double>(count), s.acc));
  return bin(BinaryOp::Div, acc, c.num(count));
}

}  // namespace

void lowerReduce(Ctx& c) {
  const Node& n = c.anchor();
  const Value* x = n.operand(0);
  const Value* out = n.result();
  const Shape& xs = x->type().shape;
  const size_t r = xs.size();
  std::vector<bool> reduced(r, false);
  for (int64_t a : n.attrInts("axes")) reduced[normalizeAxis(a, static_cast<int64_t>(r))] = true;
  int64_t count = 1;
  for (size_t d = 0; d < r; ++d)
    if (reduced[d]) count *= xs[d];
  DType dt = x->type().dtype;
  if (count == 0 && out->type().numel() > 0 &&
      (n.op() == OpKind::ReduceMax || (n.op() == OpKind::ReduceMean && !isFloat(dt))))
    unsupported(n, fmt::format("it reduces over zero elements of {}", x->type().str()));

  std::vector<bool> barrier(r > 0 ? r - 1 : 0);
  for (size_t d = 0; d + 1 < r; ++d) barrier[d] = reduced[d] != reduced[d + 1];
  std::vector<int> groupOf = c.collapse(x, barrier);
  Shape xv = c.view(x);
  std::vector<bool> cred(xv.size(), false);
  for (size_t d = 0; d < r; ++d)
    if (reduced[d]) cred[groupOf[d]] = true;
  if (xv.empty()) xv = {1}, cred = {false};
  std::vector<size_t> kept, red;
  Shape ks;
  for (size_t g = 0; g < xv.size(); ++g) {
    (cred[g] ? red : kept).push_back(g);
    if (!cred[g]) ks.push_back(xv[g]);
  }
  ReduceSpec spec = reduceSpec(n);
  DType ot = out->type().dtype;
  int64_t ops = c.opsPerElement();

  // Leading-axes reduction (the last dim is kept): the output row is the accumulator,
  // rows of the input stream through it, and iterations own blocks of output columns.
  bool leading = !cred.back() && !red.empty() && (ot == DType::f32 || ot == DType::f64 ||
                 ot == DType::i64 || (ot == DType::i32 && n.op() != OpKind::ReduceMean));
  if (leading) {
    int ob = c.outputBuffer(out, kir::Access::ReadWrite);
    DType at = computeType(ot);
    bool isMax = n.op() == OpKind::ReduceMax;
    int64_t intMin = ot == DType::i32 ? std::numeric_limits<int32_t>::min()
                                      : std::numeric_limits<int64_t>::min();
    ExprP init = isFloat(ot) ? spec.init : kir::constInt(isMax ? intMin : 0, ot);
    int64_t cols = xv.back();
    Shape outer(ks.begin(), ks.end() - 1);
    int64_t par = numElements(outer);
    int64_t want = std::max<int64_t>(1, (kTargetParallel + par - 1) / std::max<int64_t>(par, 1));
    int64_t bs = cols;
    if (want > 1 && cols > 64) bs = std::max<int64_t>(64, ((cols + want - 1) / want + 7) / 8 * 8);
    bs = std::min<int64_t>(bs, 2048);
    int64_t nb = std::max<int64_t>(1, (cols + bs - 1) / bs);
    kir::Kernel& k = c.kernel();
    int p = c.newVar("p", DType::i64);
    k.parallelVar = p;
    k.parallelExtent = par * nb;
    k.costPerIteration = std::max<int64_t>(1, bs * count * ops);
    Shape parShape = outer;
    parShape.push_back(nb);
    Index full(xv.size());
    Index kidx(ks.size());
    for (size_t i = 0; i + 1 < kept.size(); ++i)
      full[kept[i]] = kidx[i] = unravelDim(c, c.var(p), parShape, i);
    ExprP blk = nb > 1 ? unravelDim(c, c.var(p), parShape, outer.size()) : c.num(0);
    auto columns = [&](const std::function<Stmts(ExprP outIdx, ExprP col)>& f) {
      return blockLoop(c, blk, bs, cols, LoopKind::Vector, [&](ExprP j) {
        kidx.back() = j;
        full[kept.back()] = j;
        return f(c.flat(kidx, ks), j);
      });
    };
    Stmts body = columns([&](ExprP o, ExprP) { return Stmts{kir::store(ob, o, init)}; });
    Stmts acc = loopsOver(c, xv, red, 0, full, LoopKind::Serial, [&](const Index&) {
      return columns([&](ExprP o, ExprP) {
        Stmts s;
        ExprP v = kir::cast(c.at(x, full, s), at);
        s.push_back(kir::store(ob, o, bin(spec.combine, kir::load(k, ob, o), v)));
        return s;
      });
    });
    body.insert(body.end(), acc.begin(), acc.end());
    if (n.op() == OpKind::ReduceMean) {
      Stmts fin = columns([&](ExprP o, ExprP) {
        return Stmts{kir::store(ob, o, finishMean(c, spec, kir::load(k, ob, o), count))};
      });
      body.insert(body.end(), fin.begin(), fin.end());
    }
    k.body = std::move(body);
    return;
  }

  // Otherwise each output element is a local accumulator over the reduced dims, the
  // innermost loop running over the last (reduced, contiguous) dim.
  int ob = c.outputBuffer(out);
  if (ks.empty()) ks = {1};
  // Vectorize the accumulation when it runs over contiguous memory (else it would gather).
  const LoopKind accKind = cred.back() ? LoopKind::Vector : LoopKind::Serial;
  parallelNest(c, ks, LoopKind::Serial, ops * std::max<int64_t>(count, 1), [&](const Index& ki) {
    Index full(xv.size());
    for (size_t i = 0; i < kept.size(); ++i) full[kept[i]] = ki[i];
    int acc = c.newVar("acc", spec.acc);
    Stmts s{kir::assign(acc, spec.init)};
    Stmts loops = loopsOver(c, xv, red, 0, full, accKind, [&](const Index& fi) {
      Stmts b;
      ExprP v = kir::cast(c.at(x, fi, b), spec.acc);
      b.push_back(kir::assign(acc, bin(spec.combine, c.var(acc), v)));
      return b;
    });
    s.insert(s.end(), loops.begin(), loops.end());
    ExprP res = finishMean(c, spec, c.var(acc), count);
    s.push_back(kir::store(ob, c.flat(ki, ks), kir::cast(res, ot)));
    return s;
  });
}

void lowerSoftmax(Ctx& c) {
  const Node& n = c.anchor();
  const Value* x = n.operand(0);
  const Value* out = n.result();
  const bool logMode = n.op() == OpKind::LogSoftmax;
  const size_t r = x->type().shape.size();
  const size_t axis = static_cast<size_t>(normalizeAxis(n.attrInt("axis"), static_cast<int64_t>(r)));
  std::vector<bool> barrier(r - 1, false);
  if (axis > 0) barrier[axis - 1] = true;
  if (axis + 1 < r) barrier[axis] = true;
  std::vector<int> groupOf = c.collapse(x, barrier);
  const Shape xv = c.view(x);
  const size_t ga = static_cast<size_t>(groupOf[axis]);
  const int64_t len = xv[ga];
  Shape rows;
  std::vector<size_t> rowDims;
  for (size_t g = 0; g < xv.size(); ++g)
    if (g != ga) rows.push_back(xv[g]), rowDims.push_back(g);
  if (rows.empty()) rows = {1};
  DType ot = out->type().dtype;
  DType ct = computeType(ot);
  // A 16-bit output would round exp(x - m) before the division: recompute it instead.
  const bool storeExp = !logMode && ct == ot;
  // Passes along a strided axis stay scalar (vectorizing them would gather).
  const LoopKind passKind = ga + 1 == xv.size() ? LoopKind::Vector : LoopKind::Serial;
  int ob = c.outputBuffer(out);
  kir::Kernel& k = c.kernel();

  parallelNest(c, rows, LoopKind::Serial, len * (c.opsPerElement() + 20), [&](const Index& ri) {
    Index full(xv.size());
    for (size_t i = 0; i < rowDims.size(); ++i) full[rowDims[i]] = ri[i];
    // One pass over the row: body(x value, output offset) per element.
    auto pass = [&](const std::function<Stmts(ExprP value, ExprP o, Stmts& s)>& body) {
      return forLoop(c, "j", len, passKind, [&](ExprP j) {
        c.newBody();
        full[ga] = j;
        Stmts s;
        ExprP v = c.at(x, full, s);
        Stmts b = body(v, c.flat(full, xv), s);
        s.insert(s.end(), b.begin(), b.end());
        return s;
      });
    };
    int m = c.newVar("max", ct), sum = c.newVar("sum", ct);
    Stmts s{kir::assign(m, kir::constFloat(-kInf, ct))};
    s.push_back(pass([&](ExprP v, ExprP, Stmts&) {
      return Stmts{kir::assign(m, bin(BinaryOp::Max, c.var(m), v))};
    }));
    // A row that is all -inf has no mass: zeros (softmax) or -inf (log_softmax).
    Stmts empty{pass([&](ExprP, ExprP o, Stmts&) {
      return Stmts{kir::store(ob, o, kir::cast(kir::constFloat(logMode ? -kInf : 0.0, ct), ot))};
    })};
    auto shifted = [&](ExprP v) { return bin(BinaryOp::Sub, v, c.var(m)); };
    Stmts live{kir::assign(sum, kir::constFloat(0.0, ct))};
    live.push_back(pass([&](ExprP v, ExprP o, Stmts&) {
      ExprP e = kir::unary(UnaryOp::Exp, shifted(v));
      Stmts b;
      if (storeExp) b.push_back(kir::store(ob, o, e));
      b.push_back(kir::assign(sum, bin(BinaryOp::Add, c.var(sum), e)));
      return b;
    }));
    if (logMode) {
      int lse = c.newVar("log_sum", ct);
      live.push_back(kir::assign(lse, kir::unary(UnaryOp::Log, c.var(sum))));
      live.push_back(pass([&](ExprP v, ExprP o, Stmts&) {
        return Stmts{kir::store(ob, o, kir::cast(bin(BinaryOp::Sub, shifted(v), c.var(lse)), ot))};
      }));
    } else {
      // One division per row, then multiplications (within an ulp of dividing each).
      int inv = c.newVar("inv_sum", ct);
      live.push_back(kir::assign(inv, bin(BinaryOp::Div, kir::constFloat(1.0, ct), c.var(sum))));
      if (storeExp) {
        live.push_back(forLoop(c, "j", len, passKind, [&](ExprP j) {
          full[ga] = j;
          ExprP o = c.flat(full, xv);
          return Stmts{kir::store(ob, o, bin(BinaryOp::Mul, kir::load(k, ob, o), c.var(inv)))};
        }));
      } else {
        live.push_back(pass([&](ExprP v, ExprP o, Stmts&) {
          ExprP e = kir::unary(UnaryOp::Exp, shifted(v));
          return Stmts{kir::store(ob, o, kir::cast(bin(BinaryOp::Mul, e, c.var(inv)), ot))};
        }));
      }
    }
    s.push_back(kir::ifThen(bin(BinaryOp::Eq, c.var(m), kir::constFloat(-kInf, ct)), empty, live));
    return s;
  });
}

namespace {

// One pass over a row's d elements of x: body(value, j, flat index, pre) gives the statements
// for element j (pre collects the loads it needs).
using RowBody = std::function<Stmts(ExprP value, ExprP j, ExprP o, Stmts& pre)>;

// What a norm over the last axis of the anchor's operand 0 builds one row from.
struct RowNorm {
  std::function<kir::StmtP(const RowBody&)> pass;  // a vector pass over the row
  DType ot, ct;    // the result's dtype and the compute dtype
  int ob;          // the output buffer
  int64_t d;       // the row's length
  double eps;
  ExprP cf(double v) const { return kir::constFloat(v, ct); }
  // inv = 1 / sqrt(sum / d + eps): the row's inverse standard deviation or root mean square.
  kir::StmtP inverseRoot(Ctx& c, int inv, int sum) const {
    ExprP mean = bin(BinaryOp::Div, c.var(sum), cf(static_cast<double>(d)));
    return kir::assign(inv, bin(BinaryOp::Div, cf(1),
                                kir::unary(UnaryOp::Sqrt, bin(BinaryOp::Add, mean, cf(eps)))));
  }
  kir::StmtP store(ExprP o, ExprP y) const { return kir::store(ob, o, kir::cast(y, ot)); }
};

// One task per row, whose statements row(norm) builds; extra is the per-element cost beyond
// the fused chain's.
void lowerRowNorm(Ctx& c, int64_t extra, const std::function<Stmts(const RowNorm&)>& row) {
  const Node& n = c.anchor();
  const Value* x = n.operand(0);
  const Shape& xs = x->type().shape;
  const int64_t d = xs.back();
  Shape rows(xs.begin(), xs.end() - 1);
  if (rows.empty()) rows = {1};
  const DType ot = n.result()->type().dtype;
  const int ob = c.outputBuffer(n.result());
  parallelNest(c, rows, LoopKind::Serial, d * (c.opsPerElement() + extra), [&](const Index& ri) {
    Index full(ri.begin(), ri.begin() + static_cast<std::ptrdiff_t>(xs.size() - 1));
    full.push_back(nullptr);
    auto pass = [&](const RowBody& body) {
      return forLoop(c, "j", d, LoopKind::Vector, [&](ExprP j) {
        c.newBody();
        full.back() = j;
        Stmts s;
        ExprP v = c.at(x, full, s);
        Stmts b = body(v, j, c.flat(full, xs), s);
        s.insert(s.end(), b.begin(), b.end());
        return s;
      });
    };
    return row(RowNorm{pass, ot, computeType(ot), ob, d, n.attrFloat("eps")});
  });
}

}  // namespace

// layer_norm: per row, the mean, the sum of squared deviations, then
// (x - mean) * (1 / sqrt(var + eps)) * gamma + beta.
void lowerLayerNorm(Ctx& c) {
  const Value* gamma = c.anchor().operand(1);
  const Value* beta = c.anchor().operand(2);
  lowerRowNorm(c, 8, [&](const RowNorm& r) {
    int sum = c.newVar("sum", r.ct), mean = c.newVar("mean", r.ct);
    int sq = c.newVar("sumsq", r.ct), inv = c.newVar("inv_std", r.ct);
    Stmts s{kir::assign(sum, r.cf(0))};
    s.push_back(r.pass([&](ExprP v, ExprP, ExprP, Stmts&) {
      return Stmts{kir::assign(sum, bin(BinaryOp::Add, c.var(sum), v))};
    }));
    s.push_back(kir::assign(mean, bin(BinaryOp::Div, c.var(sum), r.cf(static_cast<double>(r.d)))));
    s.push_back(kir::assign(sq, r.cf(0)));
    s.push_back(r.pass([&](ExprP v, ExprP, ExprP, Stmts&) {
      ExprP dv = bin(BinaryOp::Sub, v, c.var(mean));
      return Stmts{kir::assign(sq, bin(BinaryOp::Add, c.var(sq), bin(BinaryOp::Mul, dv, dv)))};
    }));
    s.push_back(r.inverseRoot(c, inv, sq));
    s.push_back(r.pass([&](ExprP v, ExprP j, ExprP o, Stmts& pre) {
      ExprP y = bin(BinaryOp::Mul, bin(BinaryOp::Mul, bin(BinaryOp::Sub, v, c.var(mean)), c.var(inv)),
                    c.at(gamma, {j}, pre));
      return Stmts{r.store(o, bin(BinaryOp::Add, y, c.at(beta, {j}, pre)))};
    }));
    return s;
  });
}

// rms_norm: per row, the sum of squares, then x * (1 / sqrt(sumsq / d + eps)) * gamma.
void lowerRmsNorm(Ctx& c) {
  const Value* gamma = c.anchor().operand(1);
  lowerRowNorm(c, 4, [&](const RowNorm& r) {
    int sq = c.newVar("sumsq", r.ct), inv = c.newVar("inv_rms", r.ct);
    Stmts s{kir::assign(sq, r.cf(0))};
    s.push_back(r.pass([&](ExprP v, ExprP, ExprP, Stmts&) {
      return Stmts{kir::assign(sq, bin(BinaryOp::Add, c.var(sq), bin(BinaryOp::Mul, v, v)))};
    }));
    s.push_back(r.inverseRoot(c, inv, sq));
    s.push_back(r.pass([&](ExprP v, ExprP j, ExprP o, Stmts& pre) {
      return Stmts{r.store(o, bin(BinaryOp::Mul, bin(BinaryOp::Mul, v, c.var(inv)), c.at(gamma, {j}, pre)))};
    }));
    return s;
  });
}

}  // namespace tgc::codegen::lower
