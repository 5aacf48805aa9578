// Graph IR -> Kernel IR: classification of nodes and dispatch of groups to the templates.
// The templates live in lower_reduce.cpp and here (pointwise, scatter_add); the expression
// of a value at an index, which lets a group of several nodes become one kernel, is
// lower_expr.cpp's.
#include "codegen/lower.h"

#include <fmt/format.h>

#include <set>

#include "codegen/lower_loops.h"
#include "codegen/lower_templates.h"

namespace tgc::codegen {

using kir::BinaryOp;
using kir::LoopKind;

NodeExecution classify(const Node& node) {
  switch (node.op()) {
    case OpKind::Input:
    case OpKind::Constant: return NodeExecution::Source;
    case OpKind::MatMul: return NodeExecution::Gemm;
    case OpKind::Reshape: return NodeExecution::View;
    case OpKind::Iota: case OpKind::PhiloxUniform:
    case OpKind::Neg: case OpKind::Abs: case OpKind::Exp: case OpKind::Log:
    case OpKind::Sqrt: case OpKind::Rsqrt: case OpKind::Tanh: case OpKind::Erf:
    case OpKind::Sigmoid: case OpKind::Relu: case OpKind::Gelu: case OpKind::LogicalNot:
    case OpKind::Cast: case OpKind::Add: case OpKind::Sub: case OpKind::Mul: case OpKind::Div:
    case OpKind::Pow: case OpKind::Maximum: case OpKind::Minimum: case OpKind::Eq:
    case OpKind::Ne: case OpKind::Lt: case OpKind::Le: case OpKind::Gt: case OpKind::Ge:
    case OpKind::LogicalAnd: case OpKind::LogicalOr: case OpKind::Where:
    case OpKind::ReduceSum: case OpKind::ReduceMax: case OpKind::ReduceMean:
    case OpKind::Softmax: case OpKind::LogSoftmax: case OpKind::LayerNorm:
    case OpKind::Transpose: case OpKind::Broadcast: case OpKind::Slice: case OpKind::Concat:
    case OpKind::Gather: case OpKind::ScatterAdd:
      return NodeExecution::Kernel;
    case OpKind::FusedAttention: case OpKind::FusedAttentionGrad:
    case OpKind::SoftmaxCrossEntropy: case OpKind::SoftmaxCrossEntropyGrad:
    case OpKind::LayerNormGrad:
      return NodeExecution::Library;
  }
  throw IRError(fmt::format("{}: unknown op", describeNode(node)));
}

namespace lower {

void lowerPointwise(Ctx& c) {
  const Value* out = c.anchor().result();
  c.collapse(out, std::vector<bool>(out->type().shape.size(), false));
  Shape shape = c.view(out);
  if (shape.empty()) shape = {1};
  DType ot = out->type().dtype;
  int ob = c.outputBuffer(out);
  parallelNest(c, shape, LoopKind::Vector, c.opsPerElement(), [&](const Index& idx) {
    Stmts s;
    ExprP v = c.at(out, idx, s);
    s.push_back(kir::store(ob, c.flat(idx, shape), kir::cast(v, ot)));
    return s;
  });
}

// out = zeros; out[indices[j], :] += updates[j, :]. Each parallel iteration owns a block
// of output rows (and, when there are few rows, a block of columns): it zeroes them, then
// scans all indices and adds the updates of the rows it owns, so no two iterations ever
// write the same element. Indices out of range are skipped (the interpreter reports them).
void lowerScatterAdd(Ctx& c) {
  const Node& n = c.anchor();
  const Value* indices = n.operand(0);
  const Value* updates = n.operand(1);
  const Value* out = n.result();
  DType ot = out->type().dtype;
  if (ot == DType::bf16 || ot == DType::f16)
    unsupported(n, fmt::format("accumulating {} in memory would round at every addition",
                               dtypeName(ot)));
  const int64_t rows = out->type().shape[0];
  const int64_t rowSize = rows ? out->type().numel() / rows : 0;
  const int64_t count = indices->type().numel();
  int ob = c.outputBuffer(out, kir::Access::ReadWrite);
  kir::Kernel& k = c.kernel();

  int64_t rb = std::max<int64_t>(1, (rows + kTargetParallel - 1) / kTargetParallel);
  int64_t nrb = (rows + rb - 1) / rb;
  int64_t bs = rowSize;
  if (nrb < kTargetParallel && rowSize >= 128) {
    int64_t want = (kTargetParallel + nrb - 1) / nrb;
    bs = std::max<int64_t>(64, ((rowSize + want - 1) / want + 7) / 8 * 8);
  }
  int64_t ncb = std::max<int64_t>(1, (rowSize + bs - 1) / bs);
  int p = c.newVar("p", DType::i64);
  k.parallelVar = p;
  k.parallelExtent = nrb * ncb;
  k.costPerIteration = std::max<int64_t>(1, 2 * rb * bs + 4 * count + 2 * count * bs / nrb);
  ExprP rowBlock = ncb > 1 ? kir::binary(BinaryOp::Div, c.var(p), c.num(ncb)) : c.var(p);
  ExprP colBlock = ncb > 1 ? kir::binary(BinaryOp::Rem, c.var(p), c.num(ncb)) : c.num(0);
  ExprP first = kir::mul(rowBlock, rb);

  auto cols = [&](ExprP row, const std::function<Stmts(ExprP o, ExprP e)>& f) {
    return blockLoop(c, colBlock, bs, rowSize, LoopKind::Vector,
                     [&](ExprP e) { return f(kir::add(kir::mul(row, rowSize), e), e); });
  };
  Stmts body{forLoop(c, "row", rb, LoopKind::Serial, [&](ExprP rr) {
    ExprP row = kir::add(first, rr);
    Stmts zero = cols(row, [&](ExprP o, ExprP) {
      return Stmts{kir::store(ob, o, kir::cast(constOf(0, computeType(ot)), ot))};
    });
    if (rows % rb == 0) return zero;
    return Stmts{kir::ifThen(kir::binary(BinaryOp::Lt, row, c.num(rows)), zero)};
  })};
  body.push_back(forLoop(c, "i", count, LoopKind::Serial, [&](ExprP i) {
    c.newBody();
    Stmts s;
    int r = c.newVar("row_of_i", DType::i64);
    s.push_back(kir::assign(r, kir::cast(c.atFlat(indices, i, s), DType::i64)));
    ExprP mine = kir::binary(
        BinaryOp::And,
        kir::binary(BinaryOp::And, kir::binary(BinaryOp::Ge, c.var(r), first),
                    kir::binary(BinaryOp::Lt, c.var(r), kir::add(first, c.num(rb)))),
        kir::binary(BinaryOp::Lt, c.var(r), c.num(rows)));
    Stmts add = cols(c.var(r), [&](ExprP o, ExprP e) {
      Stmts a;
      ExprP u = c.atFlat(updates, kir::add(kir::mul(i, rowSize), e), a);
      a.push_back(kir::store(ob, o, kir::binary(BinaryOp::Add, kir::load(k, ob, o),
                                                kir::cast(u, ot))));
      return a;
    });
    s.push_back(kir::ifThen(mine, add));
    return s;
  }));
  k.body = std::move(body);
}

}  // namespace lower

LoweredKernel lowerGroup(const std::vector<const Node*>& group) {
  if (group.empty()) throw IRError("lowerGroup: empty group");
  for (const Node* n : group)
    if (classify(*n) != NodeExecution::Kernel)
      throw IRError(fmt::format("{}: cannot be part of a generated kernel (it runs as {})",
                                describeNode(*n), n->op() == OpKind::MatMul ? "a GEMM"
                                : n->op() == OpKind::Reshape              ? "a view"
                                                                          : "a source"));
  // Every node must feed the last one: a group's only outputs are the last node's results,
  // so the work of any other node would be silently lost.
  std::set<const Node*> members(group.begin(), group.end()), fed;
  std::vector<const Node*> stack{group.back()};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!fed.insert(n).second) continue;
    for (const Value* o : n->operands())
      if (members.count(o->def())) stack.push_back(o->def());
  }
  for (const Node* n : group)
    if (!fed.count(n))
      throw IRError(fmt::format("{}: is in a group but does not feed its last node {}",
                                describeNode(*n), describeNode(*group.back())));
  lower::Ctx c(group);
  const Node& last = c.anchor();
  if (last.result()->type().numel() == 0) {
    // Nothing to compute: a kernel that writes its (empty) result and does no work.
    c.outputBuffer(last.result());
    c.kernel().parallelExtent = 0;
  } else {
    switch (last.op()) {
      case OpKind::Input:
      case OpKind::Constant:
      case OpKind::MatMul:
      case OpKind::Reshape:
      case OpKind::FusedAttention: case OpKind::FusedAttentionGrad:
      case OpKind::SoftmaxCrossEntropy: case OpKind::SoftmaxCrossEntropyGrad:
      case OpKind::LayerNormGrad: break;  // rejected above
      case OpKind::Iota: case OpKind::PhiloxUniform:
      case OpKind::Neg: case OpKind::Abs: case OpKind::Exp: case OpKind::Log:
      case OpKind::Sqrt: case OpKind::Rsqrt: case OpKind::Tanh: case OpKind::Erf:
      case OpKind::Sigmoid: case OpKind::Relu: case OpKind::Gelu: case OpKind::LogicalNot:
      case OpKind::Cast: case OpKind::Add: case OpKind::Sub: case OpKind::Mul: case OpKind::Div:
      case OpKind::Pow: case OpKind::Maximum: case OpKind::Minimum: case OpKind::Eq:
      case OpKind::Ne: case OpKind::Lt: case OpKind::Le: case OpKind::Gt: case OpKind::Ge:
      case OpKind::LogicalAnd: case OpKind::LogicalOr: case OpKind::Where:
      case OpKind::Broadcast: case OpKind::Slice: case OpKind::Gather:
        lower::lowerPointwise(c);
        break;
      case OpKind::Transpose: lower::lowerTranspose(c); break;
      case OpKind::Concat: lower::lowerConcat(c); break;
      case OpKind::ReduceSum:
      case OpKind::ReduceMax:
      case OpKind::ReduceMean: lower::lowerReduce(c); break;
      case OpKind::Softmax:
      case OpKind::LogSoftmax: lower::lowerSoftmax(c); break;
      case OpKind::LayerNorm: lower::lowerLayerNorm(c); break;
      case OpKind::ScatterAdd: lower::lowerScatterAdd(c); break;
    }
  }
  kir::verify(c.kernel());
  return LoweredKernel{std::move(c.kernel()), std::move(c.values())};
}

}  // namespace tgc::codegen
