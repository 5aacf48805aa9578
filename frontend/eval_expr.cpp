// The evaluator's expressions: names, indexing, members, operators folded at compile time,
// and the sequences that 'for' and comprehensions iterate.
#include "frontend/eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "frontend/eval_internal.h"

namespace tgc::fe {

Val Evaluator::eval(const Expr& e) {
  DepthGuard guard(*this, e.loc);
  tick(e.loc);
  switch (e.kind) {
    case ExprKind::Int: return Val::integer(e.ival);
    case ExprKind::Float: return Val::number(e.fval);
    case ExprKind::Str: return Val::str(e.text);
    case ExprKind::Bool: return Val::boolean(e.bval);
    case ExprKind::Name: return evalName(e.text, e.loc);
    case ExprKind::Unary: return unaryOp(e.op, eval(*e.kids[0]), e.loc);
    case ExprKind::Binary: {
      if (e.op == Op::And || e.op == Op::Or) {
        Val a = eval(*e.kids[0]);
        if (a.k == VK::Bool) {
          if (e.op == Op::And ? !a.b : a.b) return a;  // short circuit
          Val b = eval(*e.kids[1]);
          if (b.k != VK::Bool)
            fail(e.kids[1]->loc, fmt::format("'{}' needs two bools or two bool tensors, got a bool and "
                                             "{}", opSpelling(e.op), describeVal(b)));
          return b;
        }
        Val b = eval(*e.kids[1]);
        if (a.k == VK::Tensor && b.k == VK::Tensor)
          return addNode(e.loc, e.op == Op::And ? OpKind::LogicalAnd : OpKind::LogicalOr,
                         {a.t, b.t}, {}, e.op == Op::And ? "logical_and" : "logical_or");
        fail(e.loc, fmt::format("'{}' needs two bools or two bool tensors, got {} and {}",
                                opSpelling(e.op), describeVal(a), describeVal(b)));
      }
      Val a = eval(*e.kids[0]);
      Val b = eval(*e.kids[1]);
      return binaryOp(e.op, a, b, e.loc);
    }
    case ExprKind::Call: {
      Val callee = eval(*e.kids[0]);
      std::vector<ArgVal> args;
      for (const Arg& a : e.args) args.push_back(ArgVal{a.name, eval(*a.value), a.loc});
      return call(callee, std::move(args), e.loc);
    }
    case ExprKind::Index: return evalIndex(e);
    case ExprKind::Member: return evalMember(eval(*e.kids[0]), e.text, e.loc);
    case ExprKind::List: {
      std::vector<Val> items;
      for (const auto& k : e.kids) items.push_back(eval(*k));
      return Val::listOf(std::move(items));
    }
    case ExprKind::Comprehension: {
      Val lo = eval(*e.kids[1]);
      Val hi;
      if (e.kids.size() > 2) hi = eval(*e.kids[2]);
      std::vector<Val> seq = iterate(lo, e.kids.size() > 2 ? &hi : nullptr, e.kids[1]->loc);
      // The loop variable is visible only inside the comprehension.
      auto& locals = frame().locals;
      std::optional<Val> saved;
      if (auto it = locals.find(e.text); it != locals.end()) saved = it->second;
      std::vector<Val> out;
      try {
        for (const Val& x : seq) {
          locals[e.text] = x;
          out.push_back(eval(*e.kids[0]));
        }
      } catch (...) {
        if (saved) locals[e.text] = *saved;
        else locals.erase(e.text);
        throw;
      }
      if (saved) locals[e.text] = *saved;
      else locals.erase(e.text);
      return Val::listOf(std::move(out));
    }
  }
  fail(e.loc, "internal error: unknown expression");
}

Val Evaluator::evalName(const std::string& name, Loc loc) {
  Frame& f = frame();
  const Val* found = nullptr;
  if (auto it = f.locals.find(name); it != f.locals.end()) found = &it->second;
  if (!found && f.self) {
    if (auto it = f.self->members.find(name); it != f.self->members.end()) {
      if (it->second.k == VK::ParamRef) return paramValue(f.self, static_cast<size_t>(it->second.i), loc);
      if (it->second.k == VK::Error) throw EvalAbort{};
      return fromMemberForm(it->second);
    } else if (auto m = f.self->methods.find(name); m != f.self->methods.end()) {
      Val v;
      v.k = VK::Fn;
      v.fn = m->second;
      v.inst = f.self;
      return v;
    }
  }
  if (!found) {
    if (auto it = globals_.find(name); it != globals_.end()) {
      found = &it->second;
      if (dim_names_.count(name)) dims_used_.insert(name);
    }
  }
  if (found) {
    if (found->k == VK::Error) throw EvalAbort{};  // already reported where it failed
    return *found;
  }
  if (pending_dims_.count(name))
    fail(loc, fmt::format("dim '{}' cannot be used here: config entries are evaluated before dims "
                          "are bound", name));
  if (unbound_dims_.count(name))
    fail(loc, fmt::format("dim '{}' has no size: pass --dim {}=N or give it a default "
                          "(dim {} = N)", name, name, name));
  if (name == "training") {
    if (!g_ || no_tensors_ > 0)
      fail(loc, "'training' is only known while a graph is lowered; test it in a function or "
                "method, not in a module body or at the top level");
    return Val::boolean(training_);
  }
  if (auto it = builtins_.find(name); it != builtins_.end()) {
    if (name == "int" || name == "float" || name == "str") {
      // Callable as conversions, usable as annotations.
      Val v = it->second;
      v.s = name;
      return v;
    }
    return it->second;
  }
  fail(loc, fmt::format("unknown name '{}'{}", name, didYouMean(name, visibleNames())));
}

// A dimension of a tensor type: a non-negative integer (an integral float is accepted, so
// `d_model / heads` works).
static bool toDim(const Val& v, int64_t& out) {
  if (v.k == VK::Int) {
    out = v.i;
  } else if (v.k == VK::Float && std::isfinite(v.f) && v.f == std::floor(v.f) &&
             std::abs(v.f) < 9.0e18) {
    out = static_cast<int64_t>(v.f);
  } else {
    return false;
  }
  return out >= 0;
}

Val Evaluator::evalIndex(const Expr& e) {
  Val base = eval(*e.kids[0]);
  std::vector<Val> idx;
  std::vector<Loc> locs;
  for (size_t i = 1; i < e.kids.size(); ++i) {
    idx.push_back(eval(*e.kids[i]));
    locs.push_back(e.kids[i]->loc);
  }
  if (base.k == VK::DType) {
    // f32[B, S, d_model], or f32[shape] with a list value.
    if (idx.size() == 1 && idx[0].k == VK::List) {
      std::vector<Val> items = *idx[0].list;
      idx = items;
      locs.assign(items.size(), locs[0]);
    }
    Shape shape;
    int64_t numel = 1;
    for (size_t i = 0; i < idx.size(); ++i) {
      int64_t d;
      if (!toDim(idx[i], d))
        fail(locs[i], fmt::format("a dimension must be a non-negative integer, got {}",
                                  idx[i].isNumber() ? fmt::format("{}", idx[i].num())
                                                    : describeVal(idx[i])));
      if (d > 0 && numel > kMaxTensorElements / d)
        fail(e.loc, fmt::format("tensor type has more than {} elements", kMaxTensorElements));
      numel *= std::max<int64_t>(d, 1);
      shape.push_back(d);
    }
    return Val::type(TensorType{base.dt, shape});
  }
  if (base.k == VK::List) {
    if (idx.size() != 1 || idx[0].k != VK::Int)
      fail(e.loc, "a list is indexed by one integer");
    int64_t n = static_cast<int64_t>(base.list->size());
    int64_t i = idx[0].i;
    if (i < -n || i >= n)
      fail(locs[0], fmt::format("index {} is out of range for a list of {} elements", i, n));
    return (*base.list)[static_cast<size_t>(i < 0 ? i + n : i)];
  }
  if (base.k == VK::Tensor)
    fail(e.loc, "tensors cannot be indexed with [...]; use slice(x, axis, start, end) or "
                "gather(table, indices)");
  fail(e.loc, fmt::format("{} cannot be indexed", describeVal(base)));
}

Val Evaluator::evalMember(const Val& base, const std::string& name, Loc loc) {
  if (base.k == VK::Inst) {
    auto& inst = base.inst;
    if (auto it = inst->members.find(name); it != inst->members.end()) {
      if (it->second.k == VK::ParamRef) return paramValue(inst, static_cast<size_t>(it->second.i), loc);
      if (it->second.k == VK::Error) throw EvalAbort{};
      return fromMemberForm(it->second);
    }
    if (auto m = inst->methods.find(name); m != inst->methods.end()) {
      Val v;
      v.k = VK::Fn;
      v.fn = m->second;
      v.inst = inst;
      return v;
    }
    std::vector<std::string> cands;
    for (const auto& [k, v] : inst->members) cands.push_back(k);
    for (const auto& [k, v] : inst->methods) cands.push_back(k);
    fail(loc, fmt::format("module '{}' has no member '{}'{}", inst->decl->name, name,
                          didYouMean(name, cands)));
  }
  if (base.k == VK::Tensor || base.k == VK::Type) {
    TensorType t = base.k == VK::Tensor ? base.t->type() : base.tensorType();
    if (base.k == VK::Tensor) read_at_compile_time_.insert(base.t->def());  // used, at compile time
    if (name == "shape") {
      std::vector<Val> dims;
      for (int64_t d : t.shape) dims.push_back(Val::integer(d));
      return Val::listOf(std::move(dims));
    }
    if (name == "dtype") return Val::dtype(t.dtype);
    if (name == "rank") return Val::integer(t.rank());
    fail(loc, fmt::format("a tensor has no member '{}' (it has shape, dtype and rank){}", name,
                          didYouMean(name, {"shape", "dtype", "rank"})));
  }
  fail(loc, fmt::format("{} has no member '{}'", describeVal(base), name));
}

Val Evaluator::unaryOp(Op op, const Val& a, Loc loc) {
  switch (op) {
    case Op::Neg:
      if (a.k == VK::Int) {
        if (a.i == std::numeric_limits<int64_t>::min()) fail(loc, "integer overflow");
        return Val::integer(-a.i);
      }
      if (a.k == VK::Float) return Val::number(-a.f);
      if (a.k == VK::Tensor) return addNode(loc, OpKind::Neg, {a.t}, {}, "neg");
      break;
    case Op::Plus:
      if (a.isNumber() || a.k == VK::Tensor) return a;
      break;
    case Op::Not:
      if (a.k == VK::Bool) return Val::boolean(!a.b);
      if (a.k == VK::Tensor) return addNode(loc, OpKind::LogicalNot, {a.t}, {}, "logical_not");
      break;
    default: break;
  }
  fail(loc, fmt::format("operator '{}' cannot be applied to {}", opSpelling(op), describeVal(a)));
}

static bool isCompare(Op op) {
  return op == Op::Eq || op == Op::Ne || op == Op::Lt || op == Op::Le || op == Op::Gt ||
         op == Op::Ge;
}

template <class T>
static bool compareWith(Op op, const T& a, const T& b) {
  switch (op) {
    case Op::Eq: return a == b;
    case Op::Ne: return a != b;
    case Op::Lt: return a < b;
    case Op::Le: return a <= b;
    case Op::Gt: return a > b;
    case Op::Ge: return a >= b;
    default: return false;
  }
}

Val Evaluator::foldNumbers(Op op, const Val& a, const Val& b, Loc loc) {
  bool ints = a.k == VK::Int && b.k == VK::Int;
  if (isCompare(op)) return Val::boolean(ints ? compareWith(op, a.i, b.i) : compareWith(op, a.num(), b.num()));
  int64_t r = 0;
  switch (op) {
    case Op::Add:
      if (!ints) return Val::number(a.num() + b.num());
      if (__builtin_add_overflow(a.i, b.i, &r)) fail(loc, "integer overflow in '+'");
      return Val::integer(r);
    case Op::Sub:
      if (!ints) return Val::number(a.num() - b.num());
      if (__builtin_sub_overflow(a.i, b.i, &r)) fail(loc, "integer overflow in '-'");
      return Val::integer(r);
    case Op::Mul:
      if (!ints) return Val::number(a.num() * b.num());
      if (__builtin_mul_overflow(a.i, b.i, &r)) fail(loc, "integer overflow in '*'");
      return Val::integer(r);
    case Op::Div:
      if (b.num() == 0) fail(loc, "division by zero");
      // Integers divide exactly when they can (d_model / heads is an int); otherwise a float.
      if (ints && !(a.i == std::numeric_limits<int64_t>::min() && b.i == -1) && a.i % b.i == 0)
        return Val::integer(a.i / b.i);
      return Val::number(a.num() / b.num());
    case Op::Mod:
      if (b.num() == 0) fail(loc, "modulo by zero");
      if (ints) {
        if (b.i == -1) return Val::integer(0);
        int64_t m = a.i % b.i;
        if (m != 0 && ((m < 0) != (b.i < 0))) m += b.i;  // Python's sign convention
        return Val::integer(m);
      } else {
        double m = std::fmod(a.num(), b.num());
        if (m != 0 && ((m < 0) != (b.num() < 0))) m += b.num();
        return Val::number(m);
      }
    case Op::Pow:
      if (ints && b.i >= 0) {
        int64_t base = a.i, e = b.i, acc = 1;
        while (e > 0) {
          if (e & 1)
            if (__builtin_mul_overflow(acc, base, &acc)) fail(loc, "integer overflow in '**'");
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base)) fail(loc, "integer overflow in '**'");
        }
        return Val::integer(acc);
      }
      return Val::number(std::pow(a.num(), b.num()));
    case Op::MatMul:
      fail(loc, "'@' multiplies matrices: it needs two tensors, got two numbers");
    default: break;
  }
  fail(loc, fmt::format("operator '{}' cannot be applied to numbers", opSpelling(op)));
}

// Equality of compile-time values; nullopt when they cannot be compared.
static std::optional<bool> sameValue(const Val& a, const Val& b) {
  if (a.isNumber() && b.isNumber()) return a.num() == b.num();
  if (a.k != b.k) return std::nullopt;
  switch (a.k) {
    case VK::Bool: return a.b == b.b;
    case VK::Str: return a.s == b.s;
    case VK::DType: return a.dt == b.dt;
    case VK::Type: return a.tensorType() == b.tensorType();
    case VK::List: {
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i) {
        auto e = sameValue((*a.list)[i], (*b.list)[i]);
        if (!e) return std::nullopt;
        if (!*e) return false;
      }
      return true;
    }
    default: return std::nullopt;
  }
}

Val Evaluator::binaryOp(Op op, const Val& a, const Val& b, Loc loc) {
  if (a.k == VK::Tensor || b.k == VK::Tensor) return tensorBinary(op, a, b, loc);
  if (a.isNumber() && b.isNumber()) return foldNumbers(op, a, b, loc);
  if ((op == Op::Eq || op == Op::Ne) && a.k == VK::List && b.k == VK::List) {
    if (auto same = sameValue(a, b)) return Val::boolean(op == Op::Eq ? *same : !*same);
  }
  if (isCompare(op) && a.k == b.k) {
    switch (a.k) {
      case VK::Str: return Val::boolean(compareWith(op, a.s, b.s));
      case VK::Bool:
        if (op == Op::Eq || op == Op::Ne) return Val::boolean(compareWith(op, a.b, b.b));
        break;
      case VK::DType:
        if (op == Op::Eq || op == Op::Ne) return Val::boolean(compareWith(op, a.dt, b.dt));
        break;
      case VK::Type:
        if (op == Op::Eq) return Val::boolean(a.tensorType() == b.tensorType());
        if (op == Op::Ne) return Val::boolean(!(a.tensorType() == b.tensorType()));
        break;
      default: break;
    }
  }
  if (op == Op::Add && a.k == VK::Str && b.k == VK::Str) return Val::str(a.s + b.s);
  if (op == Op::Add && a.k == VK::List && b.k == VK::List) {
    std::vector<Val> r = *a.list;
    r.insert(r.end(), b.list->begin(), b.list->end());
    return Val::listOf(std::move(r));
  }
  if (op == Op::Mul && a.k == VK::List && b.k == VK::Int) {
    if (b.i < 0 || (b.i > 0 && a.list->size() > kMaxListLength / static_cast<size_t>(b.i)))
      fail(loc, fmt::format("cannot repeat a list {} times", b.i));
    std::vector<Val> r;
    for (int64_t i = 0; i < b.i; ++i) r.insert(r.end(), a.list->begin(), a.list->end());
    return Val::listOf(std::move(r));
  }
  fail(loc, fmt::format("operator '{}' cannot be applied to {} and {}", opSpelling(op),
                        describeVal(a), describeVal(b)));
}

std::vector<Val> Evaluator::iterate(const Val& lo, const Val* hi, Loc loc) {
  std::vector<Val> out;
  if (hi) {
    if (lo.k != VK::Int || hi->k != VK::Int)
      fail(loc, fmt::format("a range a..b needs two integers, got {} and {}", describeVal(lo),
                            describeVal(*hi)));
    if (hi->i > lo.i && static_cast<uint64_t>(hi->i) - static_cast<uint64_t>(lo.i) > kMaxListLength)
      fail(loc, fmt::format("a list cannot have more than {} elements", kMaxListLength));
    for (int64_t i = lo.i; i < hi->i; ++i) out.push_back(Val::integer(i));
    return out;
  }
  if (lo.k == VK::List) return *lo.list;
  fail(loc, fmt::format("'for' iterates over a range a..b or a list, got {}", describeVal(lo)));
}

}  // namespace tgc::fe
