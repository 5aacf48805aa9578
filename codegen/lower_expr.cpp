#include "codegen/lower_expr.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <utility>

#include "codegen/lower.h"
#include "ir/env_flag.h"
#include "ir/op_table.h"

namespace tgc::codegen::lower {

using kir::BinaryOp;
using kir::UnaryOp;

DType computeType(DType storage) {
  return storage == DType::bf16 || storage == DType::f16 ? DType::f32 : storage;
}

void unsupported(const Node& n, const std::string& why) {
  throw IRError(fmt::format("{}: cannot lower to a CPU kernel: {}", describeNode(n), why));
}

ExprP constOf(double v, DType type) {
  if (type == DType::boolean) return kir::constBool(v != 0);
  if (isInteger(type)) return kir::constInt(static_cast<int64_t>(v), type);
  return kir::constFloat(type == DType::f32 ? static_cast<double>(static_cast<float>(v)) : v,
                         type);
}

std::string kernelName(const Node& last) {
  std::string s = last.result(0)->name();
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "k_" + s;
  return s;
}

namespace {

ExprP bin(BinaryOp op, ExprP a, ExprP b) { return kir::binary(op, std::move(a), std::move(b)); }
ExprP un(UnaryOp op, ExprP x) { return kir::unary(op, std::move(x)); }

// A splat constant's value as the interpreter stores it (rounded to its dtype).
double storedValue(double v, DType t) {
  switch (t) {
    case DType::f32: return static_cast<float>(v);
    case DType::f64: return v;
    case DType::bf16: return bf16ToFloat(floatToBF16(static_cast<float>(v)));
    case DType::f16: return f16ToFloat(floatToF16(static_cast<float>(v)));
    case DType::i32:
    case DType::i64: {
      if (std::isnan(v)) return 0;
      double lo = t == DType::i32 ? -2147483648.0 : -9223372036854775808.0;
      double hi = t == DType::i32 ? 2147483647.0 : 9223372036854775807.0;
      return v <= lo ? lo : v >= hi ? hi : std::trunc(v);
    }
    case DType::boolean: return v != 0 ? 1 : 0;
  }
  return v;
}

}  // namespace

Ctx::Ctx(const std::vector<const Node*>& group, std::vector<const Value*> extraOutputs)
    : group_(group), extraOutputs_(std::move(extraOutputs)) {
  for (const Node* n : group) producers_.insert(n);
  k_.name = kernelName(*group.back());
}

int Ctx::inputBuffer(const Value* v) {
  auto it = buffers_.find(v);
  if (it != buffers_.end()) return it->second;
  int b = k_.addBuffer(v->name(), v->type().dtype, v->type().numel(), kir::Access::Read);
  values_.push_back(v);
  buffers_[v] = b;
  return b;
}

int Ctx::outputBuffer(const Value* v, kir::Access access) {
  int b = k_.addBuffer(v->name(), v->type().dtype, v->type().numel(), access);
  values_.push_back(v);
  return b;
}

const Shape& Ctx::view(const Value* v) const {
  auto it = views_.find(v);
  return it == views_.end() ? v->type().shape : it->second;
}

Index Ctx::project(const Index& idx, const Shape& shape) const {
  if (idx.size() < shape.size())
    throw std::logic_error(fmt::format("lowering: index of rank {} for shape {}", idx.size(),
                                       shapeStr(shape)));
  Index out(shape.size());
  size_t lead = idx.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) out[d] = shape[d] == 1 ? zero_ : idx[lead + d];
  return out;
}

ExprP Ctx::flat(const Index& idx, const Shape& shape) const {
  ExprP f = num(0);
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1) f = kir::add(kir::mul(idx[d], stride), f);
    stride *= shape[d];
  }
  return f;
}

std::vector<int> Ctx::collapse(const Value* root, const std::vector<bool>& barrier) {
  const Shape& rs = root->type().shape;
  const size_t r = rs.size();
  std::vector<int> identity(r);
  for (size_t d = 0; d < r; ++d) identity[d] = static_cast<int>(d);

  // The sub-tree of in-group producers under root; merging needs all of it pointwise and
  // the rest of the group to be only the anchor (which reads root alone).
  std::vector<const Value*> values;
  std::unordered_set<const Node*> seen;
  bool pointwise = true;
  std::function<void(const Value*)> walk = [&](const Value* v) {
    values.push_back(v);
    if (!inGroup(v) || !seen.insert(v->def()).second) return;
    // A draw is a leaf: its value is a function of its row-major flat index, which merged
    // dims keep (and merged rows let quad loops span row ends).
    if (v->def()->op() == OpKind::PhiloxUniform) return;
    if (!isElementwise(v->def()->op())) pointwise = false;
    for (const Value* o : v->def()->operands()) walk(o);
  };
  walk(root);
  for (const Node* n : group_)
    if (!seen.count(n) && n != &anchor()) pointwise = false;
  if (!pointwise || r == 0) return identity;

  enum Status { Unit, Absent, Present };
  auto status = [&](const Value* v, size_t d) {
    const Shape& s = v->type().shape;
    if (rs[d] == 1) return Unit;
    int64_t j = static_cast<int64_t>(d) - static_cast<int64_t>(r - s.size());
    return j < 0 || s[j] == 1 ? Absent : Present;
  };
  std::vector<int> groupOf(r, 0);
  std::vector<size_t> starts{0};
  for (size_t d = 1; d < r; ++d) {
    bool merge = !barrier[d - 1];
    for (const Value* v : values) {
      if (!merge) break;
      Status sd = status(v, d);
      if (sd == Unit) continue;
      for (size_t e = starts.back(); e < d; ++e) {
        Status se = status(v, e);
        if (se != Unit && se != sd) merge = false;
      }
    }
    if (!merge) starts.push_back(d);
    groupOf[d] = static_cast<int>(starts.size()) - 1;
  }
  for (const Value* v : values) {
    const Shape& s = v->type().shape;
    Shape c(starts.size(), 1);
    for (size_t d = 0; d < r; ++d) {
      int64_t j = static_cast<int64_t>(d) - static_cast<int64_t>(r - s.size());
      if (j >= 0) c[groupOf[d]] *= s[j];
    }
    views_[v] = c;
  }
  return groupOf;
}

ExprP Ctx::at(const Value* v, const Index& fullIdx, Stmts& pre) {
  const Shape& shape = view(v);
  Index idx = project(fullIdx, shape);
  std::pair<const Value*, std::vector<const kir::Expr*>> key{v, {}};
  for (const ExprP& e : idx) key.second.push_back(e.get());
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;

  DType dt = v->type().dtype;
  ExprP e;
  if (!inGroup(v)) {
    e = kir::cast(kir::load(k_, inputBuffer(v), flat(idx, shape)), computeType(dt));
  } else {
    e = compute(*v->def(), idx, pre);
    // A 16-bit float computed inside the group has the precision it would have in memory.
    if (dt == DType::bf16 || dt == DType::f16) e = kir::cast(kir::cast(e, dt), DType::f32);
  }
  memo_[key] = e;
  return e;
}

ExprP Ctx::atFlat(const Value* v, ExprP f, Stmts& pre) {
  DType dt = v->type().dtype;
  if (!inGroup(v)) return kir::cast(kir::load(k_, inputBuffer(v), f), computeType(dt));
  views_.erase(v);  // indexed by its own shape here
  return at(v, unravel(f, v->type().shape), pre);
}

Index Ctx::unravel(ExprP f, const Shape& shape) const {
  Index idx(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    ExprP q = stride == 1 ? f : bin(BinaryOp::Div, f, num(stride));
    idx[d] = d == 0 ? q : bin(BinaryOp::Rem, q, num(shape[d]));
    stride *= shape[d];
  }
  return idx;
}

ExprP Ctx::compute(const Node& n, const Index& idx, Stmts& pre) {
  const Value* res = n.result();
  DType ct = computeType(res->type().dtype);
  switch (n.op()) {
    case OpKind::Input:
    case OpKind::MatMul:
    case OpKind::ReduceSum:
    case OpKind::ReduceMax:
    case OpKind::ReduceMean:
    case OpKind::Softmax:
    case OpKind::LogSoftmax:
    case OpKind::LayerNorm:
    case OpKind::RmsNorm:
    case OpKind::ScatterAdd:
    case OpKind::FusedAttention: case OpKind::FusedAttentionGrad:
    case OpKind::SoftmaxCrossEntropy: case OpKind::SoftmaxCrossEntropyGrad:
    case OpKind::LayerNormGrad: case OpKind::QuantizedMatmul: case OpKind::DynamicUpdateSlice:
      unsupported(n, "it can only be the last node of a group");
    case OpKind::Constant: {
      const auto& vals = n.attrFloats("value");
      if (vals.size() != 1) unsupported(n, "a non-splat constant inside a group");
      return constOf(storedValue(vals[0], res->type().dtype), ct);
    }
    case OpKind::Iota:
      return kir::cast(idx[normalizeAxis(n.attrInt("axis"), res->type().rank())], ct);
    case OpKind::PhiloxUniform: return philox(n, idx, pre);

    case OpKind::Neg: case OpKind::Abs: case OpKind::Exp: case OpKind::Log:
    case OpKind::Sqrt: case OpKind::Rsqrt: case OpKind::Tanh: case OpKind::Erf:
    case OpKind::Sigmoid: case OpKind::Silu: case OpKind::Relu: case OpKind::Gelu: case OpKind::LogicalNot:
    case OpKind::Cast: case OpKind::Add: case OpKind::Sub: case OpKind::Mul: case OpKind::Div:
    case OpKind::Pow: case OpKind::Maximum: case OpKind::Minimum: case OpKind::Eq:
    case OpKind::Ne: case OpKind::Lt: case OpKind::Le: case OpKind::Gt: case OpKind::Ge:
    case OpKind::LogicalAnd: case OpKind::LogicalOr: case OpKind::Where:
      return elementwise(n, idx, pre);

    case OpKind::Broadcast: return at(n.operand(0), idx, pre);
    case OpKind::Reshape:  // through the flat index: reshape keeps the row-major order
      return at(n.operand(0), unravel(flat(idx, res->type().shape), n.operand(0)->type().shape), pre);
    case OpKind::Transpose: {
      const auto& perm = n.attrInts("perm");
      Index src(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) src[perm[i]] = idx[i];
      return at(n.operand(0), src, pre);
    }
    case OpKind::Slice: {
      int64_t axis = normalizeAxis(n.attrInt("axis"), res->type().rank());
      Index src = idx;
      src[axis] = kir::add(kir::mul(idx[axis], n.attrInt("step")), num(n.attrInt("start")));
      return at(n.operand(0), src, pre);
    }
    case OpKind::Concat: {
      // Every operand is read at a clamped index (always in bounds), then the one whose
      // range holds the index is selected.
      int64_t axis = normalizeAxis(n.attrInt("axis"), res->type().rank());
      std::vector<int64_t> offsets;
      int64_t off = 0;
      for (const Value* o : n.operands()) {
        offsets.push_back(off);
        off += o->type().shape[axis];
      }
      ExprP result;
      for (size_t k = n.operands().size(); k-- > 0;) {
        int64_t len = n.operand(k)->type().shape[axis];
        if (len == 0) continue;
        Index src = idx;
        ExprP local = kir::add(idx[axis], num(-offsets[k]));
        src[axis] = bin(BinaryOp::Min, bin(BinaryOp::Max, local, num(0)), num(len - 1));
        ExprP v = at(n.operand(k), src, pre);
        result = result ? kir::select(bin(BinaryOp::Lt, idx[axis], num(offsets[k] + len)), v,
                                      result)
                        : v;
      }
      return result;
    }
    case OpKind::Gather: {
      // Rows out of range read as zeros (a kernel cannot report them; the interpreter does).
      const Value* table = n.operand(0);
      const Value* indices = n.operand(1);
      int64_t rows = table->type().shape[0];
      if (rows == 0) return constOf(0, ct);
      size_t ri = indices->type().shape.size();
      Index ii(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(ri));
      ExprP r = kir::cast(at(indices, ii, pre), DType::i64);
      ExprP ok = bin(BinaryOp::And, bin(BinaryOp::Ge, r, num(0)),
                     bin(BinaryOp::Lt, r, num(rows)));
      Index ti{bin(BinaryOp::Min, bin(BinaryOp::Max, r, num(0)), num(rows - 1))};
      ti.insert(ti.end(), idx.begin() + static_cast<std::ptrdiff_t>(ri), idx.end());
      return kir::select(ok, at(table, ti, pre), constOf(0, ct));
    }
  }
  unsupported(n, "unknown op");
}

ExprP Ctx::elementwise(const Node& n, const Index& idx, Stmts& pre) {
  DType rt = n.result()->type().dtype;
  DType ct = computeType(rt);
  auto a = [&](size_t i) { return at(n.operand(i), idx, pre); };
  auto c = [](double v, DType t) { return constOf(v, t); };
  bool fl = isFloat(rt);
  switch (n.op()) {
    case OpKind::Neg:
      return fl ? un(UnaryOp::Neg, a(0)) : bin(BinaryOp::Sub, c(0, ct), a(0));
    case OpKind::Abs: {
      if (fl) return un(UnaryOp::Abs, a(0));
      ExprP x = a(0);  // abs(MIN) wraps to MIN, as 0 - x does
      return kir::select(bin(BinaryOp::Lt, x, c(0, ct)), bin(BinaryOp::Sub, c(0, ct), x), x);
    }
    case OpKind::Exp: return un(UnaryOp::Exp, a(0));
    case OpKind::Log: return un(UnaryOp::Log, a(0));
    case OpKind::Sqrt: return un(UnaryOp::Sqrt, a(0));
    case OpKind::Rsqrt: return un(UnaryOp::Rsqrt, a(0));
    case OpKind::Tanh: return un(UnaryOp::Tanh, a(0));
    case OpKind::Erf: return un(UnaryOp::Erf, a(0));
    case OpKind::Sigmoid:
      return bin(BinaryOp::Div, c(1, ct),
                 bin(BinaryOp::Add, c(1, ct), un(UnaryOp::Exp, un(UnaryOp::Neg, a(0)))));
    case OpKind::Silu: {  // x / (1 + e^-x), as the interpreter computes it
      ExprP x = a(0);
      return bin(BinaryOp::Div, x, bin(BinaryOp::Add, c(1, ct), un(UnaryOp::Exp, un(UnaryOp::Neg, x))));
    }
    case OpKind::Relu: {
      ExprP x = a(0);  // NaN fails x <= 0 and stays; -0 becomes +0
      return kir::select(bin(BinaryOp::Le, x, c(0, ct)), c(0, ct), x);
    }
    case OpKind::Gelu: {
      ExprP x = a(0);
      const std::string& mode = n.attrString("approximate");
      ExprP inner;
      if (mode == "none") {
        inner = un(UnaryOp::Erf, bin(BinaryOp::Mul, x, c(1 / std::numbers::sqrt2, ct)));
      } else if (mode == "tanh") {
        ExprP x3 = bin(BinaryOp::Mul, bin(BinaryOp::Mul, x, x), x);
        ExprP arg = bin(BinaryOp::Add, x, bin(BinaryOp::Mul, c(0.044715, ct), x3));
        inner = un(UnaryOp::Tanh, bin(BinaryOp::Mul, c(0.7978845608028654, ct), arg));
      } else {
        unsupported(n, fmt::format("approximate must be \"none\" or \"tanh\", got \"{}\"", mode));
      }
      return bin(BinaryOp::Mul, bin(BinaryOp::Mul, c(0.5, ct), x),
                 bin(BinaryOp::Add, c(1, ct), inner));
    }
    case OpKind::LogicalNot: return un(UnaryOp::Not, a(0));
    case OpKind::Cast: {
      DType from = n.operand(0)->type().dtype;
      ExprP x = a(0);
      if (from == DType::boolean) return kir::select(x, c(1, ct), c(0, ct));
      if (rt == DType::boolean) return bin(BinaryOp::Ne, x, c(0, x->type));
      // An i64 reaches a 16-bit float through f64 and f32, rounding at each step, as the
      // interpreter does; the 16-bit rounding itself is at()'s.
      if (from == DType::i64 && (rt == DType::bf16 || rt == DType::f16))
        return kir::cast(kir::cast(x, DType::f64), DType::f32);
      return kir::cast(x, ct);  // floats to ints saturate, NaN gives 0 (kernel_ir semantics)
    }
    case OpKind::Add: return bin(BinaryOp::Add, a(0), a(1));
    case OpKind::Sub: return bin(BinaryOp::Sub, a(0), a(1));
    case OpKind::Mul: return bin(BinaryOp::Mul, a(0), a(1));
    case OpKind::Div: {
      if (fl) return bin(BinaryOp::Div, a(0), a(1));
      // Integer x / 0 has no value (the interpreter reports it; a kernel gives 0) and
      // MIN / -1 overflows (it wraps to MIN as -x does): neither reaches the divide.
      ExprP x = a(0), y = a(1);
      ExprP isZero = bin(BinaryOp::Eq, y, c(0, ct));
      ExprP isM1 = bin(BinaryOp::Eq, y, c(-1, ct));
      ExprP safe = kir::select(bin(BinaryOp::Or, isZero, isM1), c(1, ct), y);
      return kir::select(isM1, bin(BinaryOp::Sub, c(0, ct), x),
                         kir::select(isZero, c(0, ct), bin(BinaryOp::Div, x, safe)));
    }
    case OpKind::Pow: return bin(BinaryOp::Pow, a(0), a(1));
    case OpKind::Maximum: return bin(BinaryOp::Max, a(0), a(1));
    case OpKind::Minimum: return bin(BinaryOp::Min, a(0), a(1));
    case OpKind::Eq:
    case OpKind::Ne:
    case OpKind::Lt:
    case OpKind::Le:
    case OpKind::Gt:
    case OpKind::Ge: {
      ExprP x = a(0), y = a(1);
      BinaryOp op = n.op() == OpKind::Eq   ? BinaryOp::Eq
                    : n.op() == OpKind::Ne ? BinaryOp::Ne
                    : n.op() == OpKind::Lt ? BinaryOp::Lt
                    : n.op() == OpKind::Le ? BinaryOp::Le
                    : n.op() == OpKind::Gt ? BinaryOp::Gt
                                           : BinaryOp::Ge;
      if (x->type == DType::boolean && op != BinaryOp::Eq && op != BinaryOp::Ne) {
        // Order bools as the numbers 0 and 1.
        x = kir::select(x, c(1, DType::i32), c(0, DType::i32));
        y = kir::select(y, c(1, DType::i32), c(0, DType::i32));
      }
      return bin(op, x, y);
    }
    case OpKind::LogicalAnd: return bin(BinaryOp::And, a(0), a(1));
    case OpKind::LogicalOr: return bin(BinaryOp::Or, a(0), a(1));
    case OpKind::Where: return kir::select(a(0), a(1), a(2));
    case OpKind::Input: case OpKind::Constant: case OpKind::Iota: case OpKind::PhiloxUniform:
    case OpKind::ReduceSum: case OpKind::ReduceMax: case OpKind::ReduceMean:
    case OpKind::Softmax: case OpKind::LogSoftmax: case OpKind::LayerNorm: case OpKind::RmsNorm:
    case OpKind::MatMul:
    case OpKind::Reshape: case OpKind::Transpose: case OpKind::Broadcast: case OpKind::Slice:
    case OpKind::Concat: case OpKind::Gather: case OpKind::ScatterAdd:
    case OpKind::FusedAttention: case OpKind::FusedAttentionGrad:
    case OpKind::SoftmaxCrossEntropy: case OpKind::SoftmaxCrossEntropyGrad:
    case OpKind::LayerNormGrad: case OpKind::QuantizedMatmul: case OpKind::DynamicUpdateSlice:
      break;  // compute() handles these
  }
  unsupported(n, "not an elementwise op");
}

// Philox4x32-10 exactly as ir/philox.cpp, on i64 values holding 32-bit words. The words
// live in locals, one assignment per word and round, so the expression stays small.
//
// i64 is also the fastest layout once vectorized (x86: 4 elements per AVX2 register): the
// 32 x 32 -> 64-bit products are one vpmuludq each (it reads only the low halves, which is
// why the `& mask` of a word feeding a product costs nothing), the low word is the product
// as it is and the high word one shift. i32 words would pack 8 elements a register but need
// two products and a blend per hi/lo pair, as many operations per element. What the loop
// lacks is parallelism: each call is a chain of ten dependent multiply-shift-xor rounds,
// so the vector loop interleaves several iterations (TGC_NO_PHILOX_INTERLEAVE=1 leaves the
// choice to LLVM, for A/B runs): 4 when every element runs its own call; 2 in a quad loop,
// whose iteration already holds four words and the lanes' loads and stores, and spills with
// 4 (tests/codegen/philox_bench: 1.0-1.5 ns per element with 2, 1.3-1.9 with 4).
constexpr int kPhiloxInterleave = 4;
constexpr int kPhiloxQuadInterleave = 2;

std::array<int, 4> Ctx::philoxWords(ExprP ctr, ExprP seed, Stmts& pre) {
  const ExprP mask = num(0xFFFFFFFFll);
  auto local = [&](const char* name, ExprP value) {
    int v = newVar(name, DType::i64);
    pre.push_back(kir::assign(v, std::move(value)));
    return v;
  };
  auto lo = [&](ExprP x) { return bin(BinaryOp::And, std::move(x), mask); };
  auto hi = [&](ExprP x) { return bin(BinaryOp::Shr, std::move(x), num(32)); };
  int c0 = local("ph_c0", lo(ctr)), c1 = local("ph_c1", hi(ctr));
  int c2 = local("ph_c2", num(0)), c3 = local("ph_c3", num(0));
  int k0 = local("ph_k0", lo(seed)), k1 = local("ph_k1", hi(seed));
  int p0 = newVar("ph_p0", DType::i64), p1 = newVar("ph_p1", DType::i64);
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      pre.push_back(kir::assign(k0, lo(bin(BinaryOp::Add, var(k0), num(0x9E3779B9ll)))));
      pre.push_back(kir::assign(k1, lo(bin(BinaryOp::Add, var(k1), num(0xBB67AE85ll)))));
    }
    pre.push_back(kir::assign(p0, bin(BinaryOp::Mul, num(0xD2511F53ll), var(c0))));
    pre.push_back(kir::assign(p1, bin(BinaryOp::Mul, num(0xCD9E8D57ll), var(c2))));
    pre.push_back(
        kir::assign(c0, bin(BinaryOp::Xor, bin(BinaryOp::Xor, hi(var(p1)), var(c1)), var(k0))));
    pre.push_back(kir::assign(c1, lo(var(p1))));
    pre.push_back(
        kir::assign(c2, bin(BinaryOp::Xor, bin(BinaryOp::Xor, hi(var(p0)), var(c3)), var(k1))));
    pre.push_back(kir::assign(c3, lo(var(p0))));
  }
  return {c0, c1, c2, c3};
}

// Element f of the stream is word (f & 3) of the call with counter offset + (f >> 2)
// (ir/philox.h). In a quad loop the four lanes of one call share it; anywhere else each
// element runs its own call and selects its word.
ExprP Ctx::philox(const Node& n, const Index& idx, Stmts& pre) {
  static const bool interleave = !envFlag("TGC_NO_PHILOX_INTERLEAVE");
  auto interleaveAtLeast = [&](int count) {
    if (interleave) k_.vectorInterleave = std::max(k_.vectorInterleave, count);
  };
  const Shape& shape = view(n.result());  // its own shape, or merged dims (same flat index)
  ExprP seed = at(n.operand(0), idx, pre);
  ExprP offset = at(n.operand(1), idx, pre);
  // The top 24 bits of a word, scaled to [0, 1) (exact in f32). The mask is free where LLVM
  // knows the word fits 32 bits; behind the per-element select it does not, and without
  // the mask it converts i64 lanes to float one at a time.
  auto uniform = [&](ExprP word) {
    ExprP top = bin(BinaryOp::And, bin(BinaryOp::Shr, std::move(word), num(8)), num(0xFFFFFF));
    ExprP u = kir::cast(top, DType::f32);
    ExprP f = bin(BinaryOp::Mul, u, kir::constFloat(1.0 / 16777216.0, DType::f32));
    return kir::cast(f, computeType(n.result()->type().dtype));
  };
  if (quadJ_ && !shape.empty() && (shape.back() % 4 == 0 || shape.size() == 1)) {
    for (int t = 0; t < 4; ++t) {
      if (idx.back() != quadLanes_[t]) continue;
      // idx is (rows, 4j + t) and the rows hold whole quads (or there is one): the call is
      // quad (rows, j).
      Index q = idx;
      q.back() = quadJ_;
      Shape qs = shape;
      qs.back() /= 4;
      std::pair<const Node*, std::vector<const kir::Expr*>> key{&n, {}};
      for (const ExprP& e : q) key.second.push_back(e.get());
      interleaveAtLeast(kPhiloxQuadInterleave);
      auto it = quadWords_.find(key);
      if (it == quadWords_.end())
        it = quadWords_.emplace(key, philoxWords(kir::add(offset, flat(q, qs)), seed, pre)).first;
      return uniform(var(it->second[t]));
    }
  }
  interleaveAtLeast(kPhiloxInterleave);
  ExprP f = flat(idx, shape);
  std::array<int, 4> w =
      philoxWords(kir::add(offset, bin(BinaryOp::Shr, f, num(2))), seed, pre);
  ExprP lane = bin(BinaryOp::And, f, num(3));
  auto is = [&](int64_t t) { return bin(BinaryOp::Eq, lane, num(t)); };
  return uniform(kir::select(is(0), var(w[0]),
                             kir::select(is(1), var(w[1]),
                                         kir::select(is(2), var(w[2]), var(w[3])))));
}

bool Ctx::draws() const {
  return std::any_of(group_.begin(), group_.end(),
                     [](const Node* n) { return n->op() == OpKind::PhiloxUniform; });
}

int64_t Ctx::opsPerElement() const {
  // Transcendental functions cost about 20 operations, a Philox draw about 100.
  int64_t ops = 1;
  for (const Node* n : group_) {
    OpKind op = n->op();
    bool heavy = op == OpKind::Exp || op == OpKind::Log || op == OpKind::Tanh ||
                 op == OpKind::Erf || op == OpKind::Sigmoid || op == OpKind::Silu || op == OpKind::Gelu ||
                 op == OpKind::Pow || op == OpKind::Softmax || op == OpKind::LogSoftmax;
    ops += op == OpKind::PhiloxUniform ? 100 : heavy ? 20 : 2;
  }
  return ops;
}

}  // namespace tgc::codegen::lower
