// Graph IR -> Kernel IR: classification of nodes and dispatch of groups to the templates.
// The templates live in lower_reduce.cpp and here (pointwise, scatter_add); the expression
// of a value at an index, which lets a group of several nodes become one kernel, is
// lower_expr.cpp's.
#include "codegen/lower.h"

#include <fmt/format.h>

#include <array>
#include <set>

#include "codegen/lower_loops.h"
#include "codegen/lower_templates.h"
#include "ir/env_flag.h"

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
    case OpKind::Sigmoid: case OpKind::Silu: case OpKind::Relu: case OpKind::Gelu: case OpKind::LogicalNot:
    case OpKind::Cast: case OpKind::Add: case OpKind::Sub: case OpKind::Mul: case OpKind::Div:
    case OpKind::Pow: case OpKind::Maximum: case OpKind::Minimum: case OpKind::Eq:
    case OpKind::Ne: case OpKind::Lt: case OpKind::Le: case OpKind::Gt: case OpKind::Ge:
    case OpKind::LogicalAnd: case OpKind::LogicalOr: case OpKind::Where:
    case OpKind::ReduceSum: case OpKind::ReduceMax: case OpKind::ReduceMean:
    case OpKind::Softmax: case OpKind::LogSoftmax: case OpKind::LayerNorm: case OpKind::RmsNorm:
    case OpKind::Transpose: case OpKind::Broadcast: case OpKind::Slice: case OpKind::Concat:
    case OpKind::Gather: case OpKind::ScatterAdd:
      return NodeExecution::Kernel;
    case OpKind::FusedAttention: case OpKind::FusedAttentionGrad:
    case OpKind::SoftmaxCrossEntropy: case OpKind::SoftmaxCrossEntropyGrad:
    case OpKind::LayerNormGrad: case OpKind::QuantizedMatmul: case OpKind::DynamicUpdateSlice:
      return NodeExecution::Library;
  }
  throw IRError(fmt::format("{}: unknown op", describeNode(node)));
}

bool isElementwise(OpKind op) {
  switch (op) {
    case OpKind::Neg: case OpKind::Abs: case OpKind::Exp: case OpKind::Log:
    case OpKind::Sqrt: case OpKind::Rsqrt: case OpKind::Tanh: case OpKind::Erf:
    case OpKind::Sigmoid: case OpKind::Silu: case OpKind::Relu: case OpKind::Gelu: case OpKind::LogicalNot:
    case OpKind::Cast: case OpKind::Add: case OpKind::Sub: case OpKind::Mul: case OpKind::Div:
    case OpKind::Pow: case OpKind::Maximum: case OpKind::Minimum: case OpKind::Eq:
    case OpKind::Ne: case OpKind::Lt: case OpKind::Le: case OpKind::Gt: case OpKind::Ge:
    case OpKind::LogicalAnd: case OpKind::LogicalOr: case OpKind::Where:
    case OpKind::Broadcast:
      return true;
    case OpKind::Input: case OpKind::Constant: case OpKind::Iota: case OpKind::PhiloxUniform:
    case OpKind::ReduceSum: case OpKind::ReduceMax: case OpKind::ReduceMean:
    case OpKind::Softmax: case OpKind::LogSoftmax: case OpKind::LayerNorm: case OpKind::RmsNorm:
    case OpKind::MatMul:
    case OpKind::Reshape: case OpKind::Transpose: case OpKind::Slice: case OpKind::Concat:
    case OpKind::Gather: case OpKind::ScatterAdd:
    case OpKind::FusedAttention: case OpKind::FusedAttentionGrad:
    case OpKind::SoftmaxCrossEntropy: case OpKind::SoftmaxCrossEntropyGrad:
    case OpKind::LayerNormGrad: case OpKind::QuantizedMatmul: case OpKind::DynamicUpdateSlice:
      return false;
  }
  return false;
}

namespace lower {

void lowerPointwise(Ctx& c) {
  const Value* out = c.anchor().result();
  c.collapse(out, std::vector<bool>(out->type().shape.size(), false));
  Shape shape = c.view(out);
  if (shape.empty()) shape = {1};
  // The anchor's result, then the extra outputs (each of its shape: the same flat index)
  // in reverse graph order (lowerGroup in lower.h says why).
  std::vector<const Value*> outs{out};
  outs.insert(outs.end(), c.extraOutputs().rbegin(), c.extraOutputs().rend());
  std::vector<int> buffers;
  for (const Value* v : outs) buffers.push_back(c.outputBuffer(v));
  auto stores = [&](const Index& idx, Stmts& s) {
    for (size_t i = 0; i < outs.size(); ++i) {
      ExprP v = c.at(outs[i], idx, s);
      s.push_back(kir::store(buffers[i], c.flat(idx, shape), kir::cast(v, outs[i]->type().dtype)));
    }
  };
  // A draw makes four elements per Philox call (ir/philox.h): iterate over quads of the
  // last dim, so that one vector iteration runs one call per four elements, not four. Rows
  // must hold whole quads, unless there is one row: then its last 1-3 elements (the tail)
  // draw one by one, in the last parallel iteration.
  static const bool quads = !envFlag("TGC_NO_PHILOX_QUADS");
  const int64_t last = shape.back();
  if (quads && c.draws() && last >= 4 && (last % 4 == 0 || shape.size() == 1)) {
    Shape qs = shape;
    qs.back() = last / 4;
    parallelNest(c, qs, LoopKind::Vector, 4 * c.opsPerElement(), [&](const Index& q) {
      Stmts s;
      std::array<ExprP, 4> lanes;
      for (int t = 0; t < 4; ++t) lanes[t] = kir::add(kir::mul(q.back(), 4), c.num(t));
      c.setQuad(q.back(), lanes);
      for (int t = 0; t < 4; ++t) {
        Index idx = q;
        idx.back() = lanes[t];
        stores(idx, s);
      }
      c.clearQuad();
      return s;
    });
    if (last % 4 != 0) {
      Stmts tail;
      for (int64_t e = last / 4 * 4; e < last; ++e) {
        c.newBody();  // at()'s memo compares index pointers: each constant index is new
        stores({c.num(e)}, tail);
      }
      kir::Kernel& k = c.kernel();
      k.body.push_back(kir::ifThen(
          kir::binary(BinaryOp::Eq, c.var(k.parallelVar), c.num(k.parallelExtent - 1)), tail));
    }
    return;
  }
  parallelNest(c, shape, LoopKind::Vector, c.opsPerElement(), [&](const Index& idx) {
    Stmts s;
    stores(idx, s);
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
  return lowerGroup(FusionGroup{group, {}});
}

LoweredKernel lowerGroup(const FusionGroup& fg) {
  const std::vector<const Node*>& group = fg.nodes;
  if (group.empty()) throw IRError("lowerGroup: empty group");
  for (const Node* n : group)
    if (classify(*n) != NodeExecution::Kernel)
      throw IRError(fmt::format("{}: cannot be part of a generated kernel (it runs as {})",
                                describeNode(*n), n->op() == OpKind::MatMul ? "a GEMM"
                                : n->op() == OpKind::Reshape              ? "a view"
                                                                          : "a source"));
  // Every node must feed the last one: the outputs are the last node's results and values
  // the last node is computed from, so the work of any other node would be silently lost.
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
  // Extra outputs are stored at the elementwise last node's indices: one value per index.
  for (const Value* v : fg.extraOutputs) {
    const Node* last = group.back();
    const char* why = nullptr;
    if (!members.count(v->def()) || v->def() == last)
      why = "it is not the result of another member";
    else if (!isElementwise(last->op()))
      why = "the last node is not elementwise";
    else if (v->type().shape != last->result()->type().shape)
      why = "its shape is not the last node's";
    if (why)
      throw IRError(fmt::format("{}: cannot be another output of the group of {}: {}",
                                describeNode(*v->def()), describeNode(*last), why));
  }
  lower::Ctx c(group, fg.extraOutputs);
  const Node& last = c.anchor();
  if (last.result()->type().numel() == 0) {
    // Nothing to compute: a kernel that writes its (empty) results and does no work.
    c.outputBuffer(last.result());
    for (auto v = fg.extraOutputs.rbegin(); v != fg.extraOutputs.rend(); ++v) c.outputBuffer(*v);
    c.kernel().parallelExtent = 0;
  } else {
    switch (last.op()) {
      case OpKind::Input:
      case OpKind::Constant:
      case OpKind::MatMul:
      case OpKind::Reshape:
      case OpKind::FusedAttention: case OpKind::FusedAttentionGrad:
      case OpKind::SoftmaxCrossEntropy: case OpKind::SoftmaxCrossEntropyGrad:
      case OpKind::LayerNormGrad: case OpKind::QuantizedMatmul: case OpKind::DynamicUpdateSlice: break;  // rejected above
      case OpKind::Iota: case OpKind::PhiloxUniform:
      case OpKind::Neg: case OpKind::Abs: case OpKind::Exp: case OpKind::Log:
      case OpKind::Sqrt: case OpKind::Rsqrt: case OpKind::Tanh: case OpKind::Erf:
      case OpKind::Sigmoid: case OpKind::Silu: case OpKind::Relu: case OpKind::Gelu: case OpKind::LogicalNot:
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
      case OpKind::RmsNorm: lower::lowerRmsNorm(c); break;
      case OpKind::ScatterAdd: lower::lowerScatterAdd(c); break;
    }
  }
  kir::verify(c.kernel());
  return LoweredKernel{std::move(c.kernel()), std::move(c.values())};
}

}  // namespace tgc::codegen
