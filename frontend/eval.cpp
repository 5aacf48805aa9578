#include "frontend/eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/verifier.h"

namespace tgc::fe {

std::string describeVal(const Val& v) {
  switch (v.k) {
    case VK::None: return "nothing (a call that returns no value)";
    case VK::Int: return "an int";
    case VK::Float: return "a float";
    case VK::Bool: return "a bool";
    case VK::Str: return "a str";
    case VK::DType: return "a dtype";
    case VK::Type: return fmt::format("the tensor type {}", v.tensorType().str());
    case VK::TypeName: return "a type name";
    case VK::Tensor: return fmt::format("a tensor {}", v.t->type().str());
    case VK::List: return "a list";
    case VK::Fn: return fmt::format("the function '{}'", v.fn->name);
    case VK::Module: return fmt::format("the module '{}'", v.mod->name);
    case VK::Inst: return fmt::format("an instance of module '{}'", v.inst->decl->name);
    case VK::Builtin: return "a builtin function";
    case VK::ParamRef: return "a parameter";
    case VK::Error: return "an error";
  }
  return "a value";
}

// Members hold methods by weak reference: a module storing its own method (or a parent's)
// would otherwise keep itself alive through a reference cycle.
static Val toMemberForm(const Val& v) {
  if (v.k == VK::Fn && v.inst) {
    Val r = v;
    r.weak_inst = v.inst;
    r.inst.reset();
    r.b = true;  // a method, held weakly
    return r;
  }
  if (v.k == VK::List) {
    std::vector<Val> items;
    for (const Val& x : *v.list) items.push_back(toMemberForm(x));
    return Val::listOf(std::move(items));
  }
  return v;
}

// The inverse, on reading a member; a method whose instance is gone cannot be called.
static Val fromMemberForm(const Val& v) {
  if (v.k == VK::Fn && v.b) {
    Val r = v;
    r.inst = v.weak_inst.lock();
    r.b = !r.inst;  // still set: the instance is gone
    return r;
  }
  if (v.k == VK::List) {
    std::vector<Val> items;
    for (const Val& x : *v.list) items.push_back(fromMemberForm(x));
    return Val::listOf(std::move(items));
  }
  return v;
}

std::string Instance::path() const {
  if (!named) return "";
  if (!has_owner) return local;
  auto o = owner.lock();
  if (!o) return "";
  std::string p = o->path();
  return p.empty() ? "" : p + "." + local;
}

// ---- setup ----------------------------------------------------------------------------------

Evaluator::Evaluator(Diags& d) : d_(d) {
  for (const OpInfo& info : allOps()) {
    if (info.kind == OpKind::Input) continue;  // inputs are graph parameters
    Val v;
    v.k = VK::Builtin;
    v.builtin = BuiltinId::Op;
    v.i = static_cast<int64_t>(info.kind);
    builtins_[std::string(info.name)] = v;
  }
  const std::pair<const char*, BuiltinId> fns[] = {
      {"dropout", BuiltinId::Dropout}, {"sinusoidal_table", BuiltinId::SinusoidalTable},
      {"zeros", BuiltinId::Zeros},     {"ones", BuiltinId::Ones},
      {"full", BuiltinId::Full},       {"len", BuiltinId::Len},
      {"min", BuiltinId::Min},         {"max", BuiltinId::Max},
      {"int", BuiltinId::ToInt},       {"float", BuiltinId::ToFloat},
      {"str", BuiltinId::ToStr},       {"floor", BuiltinId::Floor},
      {"ceil", BuiltinId::Ceil},       {"assert", BuiltinId::Assert},
      {"error", BuiltinId::Fail},
  };
  for (auto& [n, id] : fns) {
    Val v;
    v.k = VK::Builtin;
    v.builtin = id;
    builtins_[n] = v;
  }
  // int, float and str are also conversion functions; as annotations they name the kind.
  for (DType dt : kAllDTypes) builtins_[std::string(dtypeName(dt))] = Val::dtype(dt);
  builtins_["inf"] = Val::number(std::numeric_limits<double>::infinity());
  builtins_["nan"] = Val::number(std::numeric_limits<double>::quiet_NaN());
  builtins_["pi"] = Val::number(3.14159265358979323846);
  // The top-level frame (config, dims, top-level lets).
  auto top = std::make_unique<Frame>();
  top->kind = FrameKind::TopLevel;
  frames_.push_back(std::move(top));
}

std::vector<std::string> Evaluator::builtinNames() const {
  std::vector<std::string> r;
  for (const auto& [k, v] : builtins_) r.push_back(k);
  r.push_back("training");
  std::sort(r.begin(), r.end());
  return r;
}

bool Evaluator::defineGlobal(const std::string& name, Val v, Loc loc, const char* what) {
  if (builtins_.count(name) || name == "training") {
    d_.error(loc, fmt::format("{} '{}' has the name of a builtin; choose another name", what, name));
    return false;
  }
  auto it = global_locs_.find(name);
  if (it != global_locs_.end()) {
    d_.error(loc, fmt::format("'{}' is already defined", name));
    d_.note(it->second, "previous definition is here");
    return false;
  }
  globals_[name] = std::move(v);
  global_locs_[name] = loc;
  return true;
}

void Evaluator::fail(Loc loc, const std::string& msg) {
  d_.error(loc, msg);
  // Show where the failing function or module was called from (innermost first).
  int shown = 0;
  for (size_t i = frames_.size(); i-- > 1 && shown < 4;) {
    const Frame& f = *frames_[i];
    if (f.kind == FrameKind::Function || f.kind == FrameKind::Method) {
      d_.note(f.call_site, fmt::format("in call to '{}'", f.fn_name));
      ++shown;
    } else if (f.kind == FrameKind::ModuleBody) {
      d_.note(f.call_site, fmt::format("in instantiation of module '{}'", f.fn_name));
      ++shown;
    }
  }
  if (d_.full()) throw EvalFatal{};
  throw EvalAbort{};
}

void Evaluator::tick(Loc loc) {
  if (++steps_ > kMaxEvalSteps) {
    d_.error(loc, fmt::format("evaluation limit exceeded ({} steps): is a loop or a recursion "
                              "too long?", kMaxEvalSteps));
    throw EvalFatal{};
  }
}

Evaluator::DepthGuard::DepthGuard(Evaluator& ev, Loc loc) : e(ev) {
  // Checked before counting: when the constructor throws, the destructor does not run.
  if (e.depth_ >= kMaxEvalDepth)
    e.fail(loc, fmt::format("evaluation is nested too deeply (more than {} levels): is a "
                            "function or module recursive?", kMaxEvalDepth));
  ++e.depth_;
}

std::vector<std::string> Evaluator::visibleNames() const {
  std::vector<std::string> r;
  const Frame& f = *frames_.back();
  for (const auto& [k, v] : f.locals) r.push_back(k);
  if (f.self) {
    for (const auto& [k, v] : f.self->members) r.push_back(k);
    for (const auto& [k, v] : f.self->methods) r.push_back(k);
  }
  for (const auto& [k, v] : globals_) r.push_back(k);
  for (const auto& k : unbound_dims_) r.push_back(k);
  for (const auto& k : builtinNames()) r.push_back(k);
  return r;
}

// ---- expressions ----------------------------------------------------------------------------

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

// ---- calls ----------------------------------------------------------------------------------

Val Evaluator::call(const Val& callee, std::vector<ArgVal> args, Loc loc) {
  switch (callee.k) {
    case VK::Fn:
      if (callee.b)
        fail(loc, fmt::format("method '{}' belongs to a module instance that no longer exists",
                              callee.fn->name));
      return callFunction(*callee.fn, callee.inst, std::move(args), loc);
    case VK::Module: return instantiate(*callee.mod, std::move(args), loc);
    case VK::Inst: {
      auto it = callee.inst->methods.find("forward");
      if (it == callee.inst->methods.end())
        fail(loc, fmt::format("module '{}' has no 'forward' method, so its instances cannot be "
                              "called", callee.inst->decl->name));
      return callFunction(*it->second, callee.inst, std::move(args), loc);
    }
    case VK::Builtin: return callBuiltin(callee, std::move(args), loc);
    default: break;
  }
  fail(loc, fmt::format("{} cannot be called", describeVal(callee)));
}

namespace {
// Pops a frame and restores counters however the callee exits.
struct FrameScope {
  std::vector<std::unique_ptr<Evaluator::Frame>>& frames;
  int& callDepth;
  int* noTensors;
  ~FrameScope() {
    frames.pop_back();
    --callDepth;
    if (noTensors) --*noTensors;
  }
};
}  // namespace

void Evaluator::bindArgs(Frame& f, const std::string& what, const std::vector<ParamDecl>& params,
                         std::vector<ArgVal> args, Loc loc, bool intoMembers) {
  std::vector<std::optional<Val>> slots(params.size());
  std::vector<Loc> argLocs(params.size(), loc);
  size_t pos = 0;
  for (auto& a : args) {
    size_t idx;
    if (a.name.empty()) {
      if (pos >= params.size())
        fail(a.loc, fmt::format("{} takes {} argument{}, got {}", what, params.size(),
                                params.size() == 1 ? "" : "s", args.size()));
      idx = pos++;
    } else {
      auto it = std::find_if(params.begin(), params.end(),
                             [&](const ParamDecl& p) { return p.name == a.name; });
      if (it == params.end()) {
        std::vector<std::string> names;
        for (const auto& p : params) names.push_back(p.name);
        fail(a.loc, fmt::format("{} has no parameter '{}'{}", what, a.name, didYouMean(a.name, names)));
      }
      idx = static_cast<size_t>(it - params.begin());
      if (slots[idx]) fail(a.loc, fmt::format("argument '{}' is given twice", a.name));
    }
    slots[idx] = std::move(a.v);
    argLocs[idx] = a.loc;
  }
  // Bind in order so that defaults and annotations can use earlier parameters.
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamDecl& p = params[i];
    Val v;
    if (slots[i]) {
      v = std::move(*slots[i]);
    } else if (p.def) {
      v = eval(*p.def);
    } else {
      fail(loc, fmt::format("missing argument '{}' in call to {}", p.name, what));
    }
    if (p.type) v = checkAnnotation(v, eval(*p.type), argLocs[i], fmt::format("argument '{}' of {}", p.name, what));
    if (intoMembers) {
      f.self->members[p.name] = toMemberForm(v);
      f.self->member_locs[p.name] = p.loc;
    } else {
      f.locals[p.name] = std::move(v);
    }
  }
}

Val Evaluator::checkAnnotation(const Val& v, const Val& type, Loc loc, const std::string& what) {
  auto bad = [&](const std::string& want) {
    fail(loc, fmt::format("{} must be {}, got {}", what, want, describeVal(v)));
  };
  if (type.k == VK::Builtin && (type.s == "int" || type.s == "float" || type.s == "str")) {
    if (type.s == "int") {
      if (v.k != VK::Int) bad("an int");
      return v;
    }
    if (type.s == "float") {
      if (!v.isNumber()) bad("a float");
      return Val::number(v.num());
    }
    if (v.k != VK::Str) bad("a str");
    return v;
  }
  if (type.k == VK::DType) {
    if (type.dt == DType::boolean && v.k == VK::Bool) return v;
    if (v.k == VK::Tensor && v.t->type().dtype == type.dt) return v;
    if (type.dt == DType::boolean) bad("a bool or a bool tensor");
    bad(fmt::format("a {} tensor", dtypeName(type.dt)));
  }
  if (type.k == VK::Type) {
    if (v.k == VK::Tensor && v.t->type() == type.tensorType()) return v;
    bad(type.tensorType().str());
  }
  fail(loc, fmt::format("the annotation of {} must be a type (int, float, bool, str, a dtype or a "
                        "tensor type such as f32[B, S]), got {}", what, describeVal(type)));
}

Val Evaluator::callFunction(const FnDecl& fn, const std::shared_ptr<Instance>& self,
                            std::vector<ArgVal> args, Loc loc) {
  if (call_depth_ >= kMaxCallDepth)
    fail(loc, fmt::format("calls nest more than {} deep: is '{}' recursive without end?",
                          kMaxCallDepth, fn.name));
  auto fr = std::make_unique<Frame>();
  fr->kind = self ? FrameKind::Method : FrameKind::Function;
  fr->self = self;
  fr->fn_name = self ? self->decl->name + "." + fn.name : fn.name;
  fr->call_site = loc;
  if (self) {
    std::string p = self->path();
    if (p.empty()) p = irName(self->decl->name);
    fr->prefix = fn.name == "forward" ? p : p + "." + fn.name;
  } else {
    fr->prefix = irName(fn.name);
  }
  ++call_depth_;
  frames_.push_back(std::move(fr));
  FrameScope scope{frames_, call_depth_, nullptr};
  Frame& f = frame();
  bindArgs(f, fmt::format("'{}'", f.fn_name), fn.params, std::move(args), loc, false);
  execBlock(fn.body);
  if (f.failed) throw EvalAbort{};
  return f.ret;
}

Val Evaluator::instantiate(const ModuleDecl& m, std::vector<ArgVal> args, Loc loc) {
  if (call_depth_ >= kMaxCallDepth)
    fail(loc, fmt::format("module instantiations nest more than {} deep: does '{}' contain "
                          "itself?", kMaxCallDepth, m.name));
  auto inst = std::make_shared<Instance>();
  inst->decl = &m;
  auto fr = std::make_unique<Frame>();
  fr->kind = FrameKind::ModuleBody;
  fr->self = inst;
  fr->fn_name = m.name;
  fr->call_site = loc;
  ++call_depth_;
  ++no_tensors_;
  frames_.push_back(std::move(fr));
  FrameScope scope{frames_, call_depth_, &no_tensors_};
  Frame& f = frame();
  bindArgs(f, fmt::format("module '{}'", m.name), m.params, std::move(args), loc, true);
  execBlock(m.body);
  if (f.failed) throw EvalAbort{};
  Val v;
  v.k = VK::Inst;
  v.inst = inst;
  return v;
}

// ---- statements -----------------------------------------------------------------------------

void Evaluator::execBlock(const std::vector<StmtPtr>& body) {
  for (const auto& s : body) {
    try {
      execStmt(*s);
    } catch (const EvalAbort&) {
      frame().failed = true;
      poison(*s);
    }
    if (frame().returned) return;
  }
}

void Evaluator::poison(const Stmt& s) {
  if (s.kind != StmtKind::Let && s.kind != StmtKind::Assign) return;
  Frame& f = frame();
  for (const auto& n : s.names) {
    if (f.kind == FrameKind::ModuleBody) f.self->members[n] = Val::error();
    else if (f.kind == FrameKind::TopLevel) globals_[n] = Val::error();
    else f.locals[n] = Val::error();
  }
}

void Evaluator::nameInstances(const Val& v, const std::shared_ptr<Instance>& owner,
                              const std::string& local) {
  if (v.k == VK::Inst && !v.inst->named) {
    v.inst->named = true;
    v.inst->local = local;
    if (owner) {
      v.inst->owner = owner;
      v.inst->has_owner = true;
    }
  } else if (v.k == VK::List) {
    for (size_t i = 0; i < v.list->size(); ++i)
      nameInstances((*v.list)[i], owner, fmt::format("{}.{}", local, i));
  }
}

void Evaluator::nameValue(const Val& v, const std::string& name, size_t nodesBefore) {
  if (v.k != VK::Tensor || !g_ || let_named_.count(v.t)) return;
  Node* def = v.t->def();
  if (def->op() == OpKind::Input) return;
  const auto& nodes = g_->nodes();
  for (size_t i = nodesBefore; i < nodes.size(); ++i) {
    if (nodes[i].get() == def) {
      g_->renameValue(v.t, irName(name));
      let_named_.insert(v.t);
      return;
    }
  }
}

void Evaluator::bind(const std::string& name, Val v, Loc loc, bool isLet) {
  Frame& f = frame();
  switch (f.kind) {
    case FrameKind::ModuleBody: {
      if (f.self->methods.count(name))
        fail(loc, fmt::format("'{}' is already a method of module '{}'", name, f.self->decl->name));
      auto it = f.self->members.find(name);
      if (it != f.self->members.end() && it->second.k == VK::ParamRef)
        fail(loc, fmt::format("'{}' is already a parameter of module '{}'", name, f.self->decl->name));
      if (!isLet && it == f.self->members.end())
        fail(loc, fmt::format("cannot assign to '{}': it is not defined (use 'let {} = ...')", name, name));
      nameInstances(v, f.self, name);
      f.self->members[name] = toMemberForm(v);
      f.self->member_locs[name] = loc;
      return;
    }
    case FrameKind::TopLevel:
      nameInstances(v, nullptr, name);
      if (isLet) {
        defineGlobal(name, std::move(v), loc, "'let'");
        return;
      }
      fail(loc, fmt::format("cannot assign to global '{}'", name));
    default: break;
  }
  if (!isLet && !f.locals.count(name)) {
    if (f.self && (f.self->members.count(name) || f.self->methods.count(name)))
      fail(loc, fmt::format("cannot assign to '{}', a member of module '{}', inside a method", name,
                            f.self->decl->name));
    if (globals_.count(name)) fail(loc, fmt::format("cannot assign to global '{}'", name));
    fail(loc, fmt::format("cannot assign to '{}': it is not defined (use 'let {} = ...'){}", name,
                          name, didYouMean(name, visibleNames())));
  }
  nameInstances(v, nullptr, irName(name));
  f.locals[name] = std::move(v);
}

void Evaluator::execStmt(const Stmt& s) {
  DepthGuard guard(*this, s.loc);
  tick(s.loc);
  if (d_.full()) throw EvalFatal{};
  Frame& f = frame();
  switch (s.kind) {
    case StmtKind::Let:
    case StmtKind::Assign: {
      size_t before = g_ ? g_->size() : 0;
      Val v = eval(*s.value);
      if (v.k == VK::None)
        fail(s.value->loc, "this expression gives no value (the function has no 'return')");
      if (s.names.size() == 1) {
        nameValue(v, s.names[0], before);
        bind(s.names[0], std::move(v), s.name_locs[0], s.kind == StmtKind::Let);
        return;
      }
      if (v.k != VK::List || v.list->size() != s.names.size())
        fail(s.value->loc, fmt::format("cannot unpack {} into {} names", v.k == VK::List
                                           ? fmt::format("a list of {}", v.list->size())
                                           : describeVal(v), s.names.size()));
      for (size_t i = 0; i < s.names.size(); ++i) {
        nameValue((*v.list)[i], s.names[i], before);
        bind(s.names[i], (*v.list)[i], s.name_locs[i], true);
      }
      return;
    }
    case StmtKind::Return:
      if (f.kind != FrameKind::Function && f.kind != FrameKind::Method)
        fail(s.loc, "'return' is only allowed in a function or method");
      f.ret = s.value ? eval(*s.value) : Val::none();
      f.returned = true;
      return;
    case StmtKind::If: {
      Val c = eval(*s.cond);
      if (c.k == VK::Tensor)
        fail(s.cond->loc, "'if' needs a compile-time condition, but this is a tensor; use "
                          "where(cond, a, b) to choose elementwise");
      if (c.k != VK::Bool)
        fail(s.cond->loc, fmt::format("'if' condition must be a bool, got {}", describeVal(c)));
      execBlock(c.b ? s.body : s.else_body);
      return;
    }
    case StmtKind::For: {
      Val lo = eval(*s.value);
      if (s.hi) {
        // Ranges are counted, not materialized; the step budget bounds long loops.
        Val hi = eval(*s.hi);
        if (lo.k != VK::Int || hi.k != VK::Int)
          fail(s.value->loc, fmt::format("a range a..b needs two integers, got {} and {}",
                                         describeVal(lo), describeVal(hi)));
        for (int64_t i = lo.i; i < hi.i; ++i) {
          tick(s.loc);
          frame().locals[s.names[0]] = Val::integer(i);
          execBlock(s.body);
          if (frame().returned) return;
        }
        return;
      }
      std::vector<Val> seq = iterate(lo, nullptr, s.value->loc);
      for (Val& x : seq) {
        tick(s.loc);
        frame().locals[s.names[0]] = std::move(x);
        execBlock(s.body);
        if (frame().returned) return;
      }
      return;
    }
    case StmtKind::Param:
      if (f.kind != FrameKind::ModuleBody)
        fail(s.loc, "'param' declarations belong in a module body");
      declareParam(s);
      return;
    case StmtKind::Fn:
      if (f.kind != FrameKind::ModuleBody)
        fail(s.loc, "functions are defined at the top level of a file or as methods in a module "
                    "body");
      if (f.self->members.count(s.fn->name) || f.self->methods.count(s.fn->name))
        fail(s.fn->loc, fmt::format("'{}' is already defined in module '{}'", s.fn->name,
                                    f.self->decl->name));
      f.self->methods[s.fn->name] = s.fn.get();
      return;
    case StmtKind::Output: {
      if (f.kind != FrameKind::Graph) fail(s.loc, "'output' is only allowed in a graph body");
      const std::string& name = s.names[0];
      for (const auto& o : outputs_)
        if (o.name == name) fail(s.name_locs[0], fmt::format("output '{}' is defined twice", name));
      Val v = eval(*s.value);
      if (v.k != VK::Tensor)
        fail(s.value->loc, fmt::format("an output must be a tensor, got {}", describeVal(v)));
      if (name == "loss" && !(isFloat(v.t->type().dtype) && v.t->type().rank() == 0))
        fail(s.value->loc, fmt::format("the loss must be a float scalar, got {}", v.t->type().str()));
      if (v.t->def()->op() != OpKind::Input) {
        g_->renameValue(v.t, name);
        let_named_.insert(v.t);
      }
      outputs_.push_back(OutputDecl{name, v.t, s.loc});
      return;
    }
    case StmtKind::ExprStmt: {
      eval(*s.value);
      return;
    }
  }
}

void Evaluator::declareParam(const Stmt& s) {
  Frame& f = frame();
  const std::string& name = s.names[0];
  if (f.self->members.count(name) || f.self->methods.count(name))
    fail(s.name_locs[0], fmt::format("'{}' is already defined in module '{}'", name, f.self->decl->name));
  Val t = eval(*s.type);
  if (t.k != VK::Type)
    fail(s.type->loc, fmt::format("a parameter's type must be a tensor type such as "
                                  "f32[d_in, d_out], got {}", describeVal(t)));
  ParamSlot slot;
  slot.name = name;
  slot.type = t.tensorType();
  slot.loc = s.loc;
  if (!isFloat(slot.type.dtype))
    fail(s.type->loc, fmt::format("parameters are trainable, so their type must be a float type, "
                                  "got {}", slot.type.str()));
  static const std::vector<std::string> kinds = {"xavier_uniform", "xavier_normal", "normal",
                                                 "uniform", "zeros", "ones", "constant"};
  if (!s.value) {
    slot.init = slot.type.rank() >= 2 ? "xavier_uniform" : "zeros";
    slot.arg = slot.init == "xavier_uniform" ? 1.0 : 0.0;
  } else {
    const Expr& e = *s.value;
    const Expr* callee = e.kind == ExprKind::Call ? e.kids[0].get() : &e;
    if (callee->kind != ExprKind::Name)
      fail(e.loc, "a parameter initializer is one of xavier_uniform, xavier_normal, normal(std), "
                  "uniform(bound), zeros, ones or constant(value)");
    slot.init = callee->text;
    if (std::find(kinds.begin(), kinds.end(), slot.init) == kinds.end())
      fail(callee->loc, fmt::format("unknown initializer '{}'{} (known: xavier_uniform, "
                                    "xavier_normal, normal, uniform, zeros, ones, constant)",
                                    slot.init, didYouMean(slot.init, kinds)));
    bool takesArg = slot.init != "zeros" && slot.init != "ones";
    // Defaults: gain 1 for Xavier, std 1 for normal, 1/sqrt(fan_in) for uniform (as PyTorch's
    // Linear); constant needs its value.
    int64_t fanIn = slot.type.rank() >= 2 ? slot.type.shape[slot.type.shape.size() - 2]
                    : slot.type.rank() == 1 ? slot.type.shape[0] : 1;
    slot.arg = slot.init == "uniform" ? 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(fanIn, 1)))
                                      : slot.init.rfind("xavier", 0) == 0 || slot.init == "normal" ? 1.0 : 0.0;
    if (e.kind == ExprKind::Call) {
      if (!takesArg && !e.args.empty())
        fail(e.args[0].loc, fmt::format("'{}' takes no argument", slot.init));
      if (e.args.size() > 1) fail(e.args[1].loc, fmt::format("'{}' takes one argument", slot.init));
      if (!e.args.empty()) {
        Val a = eval(*e.args[0].value);
        if (!a.isNumber() || !std::isfinite(a.num()))
          fail(e.args[0].loc, fmt::format("the argument of '{}' must be a finite number, got {}",
                                          slot.init, a.isNumber() ? fmt::format("{}", a.num()) : describeVal(a)));
        slot.arg = a.num();
      } else if (slot.init == "constant") {
        fail(e.loc, "'constant' needs its value: constant(0.5)");
      }
    } else if (slot.init == "constant") {
      fail(e.loc, "'constant' needs its value: constant(0.5)");
    }
    if ((slot.init == "normal" || slot.init == "uniform") && slot.arg < 0)
      fail(e.loc, fmt::format("the argument of '{}' must not be negative", slot.init));
  }
  Val ref;
  ref.k = VK::ParamRef;
  ref.i = static_cast<int64_t>(f.self->params.size());
  f.self->params.push_back(std::move(slot));
  f.self->members[name] = ref;
  f.self->member_locs[name] = s.loc;
}

// ---- tensors --------------------------------------------------------------------------------

void Evaluator::requireTensorContext(Loc loc, const char* what) {
  if (!g_)
    fail(loc, fmt::format("tensor operation '{}' outside a graph: tensors exist only while a "
                          "graph is lowered", what));
  if (no_tensors_ > 0)
    fail(loc, fmt::format("tensor operation '{}' in a module body: a module body runs once, "
                          "outside any graph; compute tensors in a method", what));
}

std::string Evaluator::irName(const std::string& base) const {
  const std::string& p = frames_.back()->prefix;
  return p.empty() ? base : p + "." + base;
}

Val Evaluator::addNode(Loc loc, OpKind k, std::vector<Value*> operands, AttrMap attrs,
                       const std::string& name, std::optional<TensorType> declared) {
  requireTensorContext(loc, std::string(opName(k)).c_str());
  if (g_->size() >= kMaxGraphNodes) {
    d_.error(loc, fmt::format("the graph has more than {} nodes", kMaxGraphNodes));
    throw EvalFatal{};
  }
  try {
    std::vector<TensorType> decl;
    if (declared) decl.push_back(*declared);
    Node* n = g_->add(k, std::move(operands), std::move(attrs), {irName(name)}, decl);
    return Val::tensor(n->result());
  } catch (const IRError& e) {
    fail(loc, e.what());
  }
}

Value* Evaluator::constantScalar(DType dt, double v, Loc loc, const std::string& name) {
  return addNode(loc, OpKind::Constant, {}, {{"value", std::vector<double>{v}}}, name,
                 TensorType{dt, {}}).t;
}

Value* Evaluator::toOperand(const Val& v, DType peer, Loc loc) {
  if (v.k == VK::Tensor) return v.t;
  if (!v.isNumber() && v.k != VK::Bool)
    fail(loc, fmt::format("expected a tensor or a number, got {}", describeVal(v)));
  double x = v.k == VK::Bool ? (v.b ? 1.0 : 0.0) : v.num();
  // A number takes the dtype of the tensor it meets, so `x * 0.125` works on f32 and f64.
  if (isInteger(peer)) {
    bool fits = std::isfinite(x) && x == std::floor(x) &&
                (peer == DType::i64 ? std::abs(x) <= 9.007199254740992e15 : std::abs(x) <= 2147483647.0);
    if (!fits)
      fail(loc, fmt::format("the number {} cannot be an operand of type {} (the other operand's "
                            "dtype)", x, dtypeName(peer)));
  } else if (peer == DType::boolean && x != 0 && x != 1) {
    fail(loc, fmt::format("the number {} cannot be a bool operand", x));
  }
  return constantScalar(peer, x, loc);
}

Val Evaluator::tensorBinary(Op op, const Val& a, const Val& b, Loc loc) {
  OpKind k;
  switch (op) {
    case Op::Add: k = OpKind::Add; break;
    case Op::Sub: k = OpKind::Sub; break;
    case Op::Mul: k = OpKind::Mul; break;
    case Op::Div: k = OpKind::Div; break;
    case Op::Pow: k = OpKind::Pow; break;
    case Op::MatMul: k = OpKind::MatMul; break;
    case Op::Eq: k = OpKind::Eq; break;
    case Op::Ne: k = OpKind::Ne; break;
    case Op::Lt: k = OpKind::Lt; break;
    case Op::Le: k = OpKind::Le; break;
    case Op::Gt: k = OpKind::Gt; break;
    case Op::Ge: k = OpKind::Ge; break;
    default:
      fail(loc, fmt::format("operator '{}' is not defined on tensors", opSpelling(op)));
  }
  if (k == OpKind::MatMul && (a.k != VK::Tensor || b.k != VK::Tensor))
    fail(loc, fmt::format("'@' needs two tensors, got {} and {}", describeVal(a), describeVal(b)));
  DType peer = a.k == VK::Tensor ? a.t->type().dtype : b.t->type().dtype;
  Value* x = toOperand(a, peer, loc);
  Value* y = toOperand(b, peer, loc);
  return addNode(loc, k, {x, y}, {}, std::string(opName(k)));
}

Val Evaluator::paramValue(const std::shared_ptr<Instance>& inst, size_t slot, Loc loc) {
  const ParamSlot& p = inst->params.at(slot);
  if (!g_ || no_tensors_ > 0)
    fail(loc, fmt::format("parameter '{}' is a graph input: use it in a method, not in a module "
                          "body or at the top level", p.name));
  std::string path = inst->path();
  if (path.empty())
    fail(loc, fmt::format("parameter '{}' belongs to an instance of '{}' that has no name: bind "
                          "the instance with 'let name = {}(...)' first", p.name, inst->decl->name,
                          inst->decl->name));
  std::string full = path + "." + p.name;
  if (auto it = param_uses_.find(full); it != param_uses_.end()) {
    if (it->second.inst == inst && it->second.slot == slot) return Val::tensor(it->second.value);
    fail(loc, fmt::format("two different parameters are both named '{}'; bind the module "
                          "instances to distinct names", full));
  }
  // A parameter keeps its exact name (it is the checkpoint name): move any value in the way.
  if (Value* old = g_->findValue(full)) g_->renameValue(old, g_->uniqueName(full));
  Value* v;
  try {
    v = g_->add(OpKind::Input, {}, {{"role", std::string("param")}}, {full}, {p.type})->result();
  } catch (const IRError& e) {
    fail(loc, e.what());
  }
  param_uses_[full] = ParamUse{v, inst, slot};
  param_order_.push_back(v);
  ParamSlot named = p;
  named.name = full;
  param_slots_.push_back(std::move(named));
  return Val::tensor(v);
}

Val Evaluator::dropout(const Val& x, double p, Loc loc) {
  if (x.k != VK::Tensor) fail(loc, fmt::format("dropout needs a tensor, got {}", describeVal(x)));
  if (!(p >= 0 && p < 1)) fail(loc, fmt::format("dropout probability must be in [0, 1), got {}", p));
  requireTensorContext(loc, "dropout");
  if (!training_ || p == 0) return x;  // inference graphs have no dropout at all
  const TensorType& t = x.t->type();
  if (!isFloat(t.dtype)) fail(loc, fmt::format("dropout needs a float tensor, got {}", t.str()));
  int64_t n = t.numel();
  if (n > (int64_t{1} << 50) - dropout_elements_)
    fail(loc, "dropout masks of this graph exceed 2^50 elements");
  TensorType i64s{DType::i64, {}};
  if (!dropout_step_offset_) {
    // Each step draws a fresh counter range: offset = step * (elements per step) + site start.
    // The number of elements is known once the graph is lowered; it is patched in then.
    try {
      dropout_placeholder_ = g_->add(OpKind::Constant, {}, {{"value", std::vector<double>{0}}},
                                     {"dropout.elements_per_step"}, {i64s});
      dropout_step_offset_ = g_->add(OpKind::Mul, {step_, dropout_placeholder_->result()}, {},
                                     {"dropout.step_offset"})->result();
    } catch (const IRError& e) {
      fail(loc, e.what());
    }
  }
  Value* base = constantScalar(DType::i64, static_cast<double>(dropout_elements_), loc, "dropout.start");
  dropout_elements_ += n;
  Value* offset = addNode(loc, OpKind::Add, {dropout_step_offset_, base}, {}, "dropout.offset").t;
  Value* u = addNode(loc, OpKind::PhiloxUniform, {seed_, offset}, {}, "dropout.rand", t).t;
  Value* keep = addNode(loc, OpKind::Ge, {u, constantScalar(t.dtype, p, loc, "dropout.p")}, {}, "dropout.keep").t;
  Value* scaled = addNode(loc, OpKind::Mul, {x.t, constantScalar(t.dtype, 1.0 / (1.0 - p), loc, "dropout.inv_keep")},
                          {}, "dropout.scale").t;
  return addNode(loc, OpKind::Where, {keep, scaled, constantScalar(t.dtype, 0.0, loc, "dropout.zero")}, {},
                 "dropout");
}

// ---- top level ------------------------------------------------------------------------------

Val Evaluator::evalConst(const Expr& e) {
  ++no_tensors_;
  struct Restore {
    int& n;
    ~Restore() { --n; }
  } restore{no_tensors_};
  return eval(e);
}

void Evaluator::execTopLet(const Stmt& s) {
  ++no_tensors_;
  struct Restore {
    int& n;
    ~Restore() { --n; }
  } restore{no_tensors_};
  try {
    execStmt(s);
  } catch (const EvalAbort&) {
    for (const auto& n : s.names)
      if (!globals_.count(n)) defineGlobal(n, Val::error(), s.loc, "'let'");
  }
}

// Rebuilds the graph with its inputs first: data inputs in declaration order, then the
// parameters in first-use order; patches the dropout counter stride.
static std::unique_ptr<Graph> finishGraph(const Graph& g, const std::vector<Value*>& params,
                                          const Node* placeholder, int64_t dropoutElements) {
  auto out = std::make_unique<Graph>(g.name());
  out->setDims(g.dims());
  std::unordered_map<const Value*, Value*> map;
  auto copy = [&](const Node& n) {
    std::vector<Value*> ops;
    for (Value* o : n.operands()) ops.push_back(map.at(o));
    std::vector<std::string> names;
    std::vector<TensorType> types;
    for (size_t i = 0; i < n.numResults(); ++i) {
      names.push_back(n.result(i)->name());
      types.push_back(n.result(i)->type());
    }
    AttrMap attrs = n.attrs();
    if (&n == placeholder) attrs["value"] = std::vector<double>{static_cast<double>(dropoutElements)};
    Node* c = out->add(n.op(), ops, attrs, names, types);
    for (size_t i = 0; i < n.numResults(); ++i) map[n.result(i)] = c->result(i);
  };
  std::set<const Node*> isParam;
  for (Value* p : params) isParam.insert(p->def());
  for (const auto& n : g.nodes())
    if (n->op() == OpKind::Input && !isParam.count(n.get())) copy(*n);
  for (Value* p : params) copy(*p->def());
  for (const auto& n : g.nodes())
    if (n->op() != OpKind::Input) copy(*n);
  std::vector<Value*> outs;
  for (Value* o : g.outputs()) outs.push_back(map.at(o));
  out->setOutputs(std::move(outs));
  return out;
}

std::optional<LoweredGraph> Evaluator::lowerGraph(
    const GraphDecl& gd, const std::vector<std::pair<std::string, int64_t>>& dims) {
  size_t errorsBefore = d_.errorCount();
  auto graph = std::make_unique<Graph>(gd.name);
  std::set<std::string> usedBefore = dims_used_;  // by config, dims and top-level lets
  g_ = graph.get();
  training_ = gd.training;
  seed_ = step_ = nullptr;
  param_uses_.clear();
  param_order_.clear();
  param_slots_.clear();
  let_named_.clear();
  outputs_.clear();
  dropout_step_offset_ = nullptr;
  dropout_placeholder_ = nullptr;
  dropout_elements_ = 0;
  struct Reset {
    Evaluator& e;
    ~Reset() {
      e.g_ = nullptr;
      e.training_ = false;
    }
  } reset{*this};

  auto fr = std::make_unique<Frame>();
  fr->kind = FrameKind::Graph;
  fr->fn_name = gd.name;
  frames_.push_back(std::move(fr));
  struct Pop {
    std::vector<std::unique_ptr<Frame>>& f;
    ~Pop() { f.pop_back(); }
  } pop{frames_};

  try {
    for (const ParamDecl& p : gd.params) {
      try {
        if (p.def) fail(p.def->loc, "graph inputs cannot have default values");
        if (!p.type)
          fail(p.loc, fmt::format("graph input '{}' needs a tensor type, e.g. {}: f32[B, S, 512]",
                                  p.name, p.name));
        ++no_tensors_;
        Val t;
        try {
          t = eval(*p.type);
        } catch (...) {
          --no_tensors_;
          throw;
        }
        --no_tensors_;
        if (t.k != VK::Type)
          fail(p.type->loc, fmt::format("graph input '{}' needs a tensor type such as f32[B, S], got "
                                        "{}", p.name, describeVal(t)));
        if (gd.training && (p.name == "seed" || p.name == "step") &&
            t.tensorType() != TensorType{DType::i64, {}})
          fail(p.type->loc, fmt::format("'{}' of a training graph must be i64[]", p.name));
        Value* v = addNode(p.loc, OpKind::Input, {}, {}, p.name, t.tensorType()).t;
        frame().locals[p.name] = Val::tensor(v);
      } catch (const EvalAbort&) {
        frame().failed = true;
        frame().locals[p.name] = Val::error();
      }
    }
    if (gd.training) {
      // The dropout masks are keyed by (seed, step); both are inputs of every training graph.
      for (const char* n : {"seed", "step"}) {
        auto it = frame().locals.find(n);
        Value* v = it != frame().locals.end() && it->second.k == VK::Tensor ? it->second.t : nullptr;
        if (!v && it == frame().locals.end()) {
          v = addNode(gd.loc, OpKind::Input, {}, {}, n, TensorType{DType::i64, {}}).t;
          frame().locals[n] = Val::tensor(v);
        }
        (std::string(n) == "seed" ? seed_ : step_) = v;
      }
    }
    if (!frame().failed) execBlock(gd.body);
  } catch (const EvalFatal&) {
    return std::nullopt;
  }
  if (d_.errorCount() > errorsBefore || frame().failed) return std::nullopt;
  if (outputs_.empty()) {
    d_.error(gd.loc, fmt::format("graph '{}' has no outputs: add 'output name = value'", gd.name));
    return std::nullopt;
  }
  std::vector<std::pair<std::string, int64_t>> used;
  for (const auto& d : dims)
    if (dims_used_.count(d.first)) used.push_back(d);
  g_->setDims(std::move(used));
  dims_used_ = std::move(usedBefore);
  LoweredGraph r;
  for (size_t i = 0; i < outputs_.size(); ++i) {
    g_->addOutput(outputs_[i].value);
    r.output_names.push_back(outputs_[i].name);
    if (outputs_[i].name == "loss") r.loss_output = static_cast<int>(i);
  }
  if (gd.training && r.loss_output < 0) {
    d_.error(gd.loc, fmt::format("training graph '{}' needs an output named 'loss'", gd.name));
    return std::nullopt;
  }
  try {
    r.graph = finishGraph(*g_, param_order_, dropout_placeholder_, dropout_elements_);
  } catch (const IRError& e) {
    d_.error(gd.loc, fmt::format("internal error: cannot finish graph '{}': {}", gd.name, e.what()));
    return std::nullopt;
  }
  r.params = param_slots_;
  auto problems = verifyGraph(*r.graph);
  if (!problems.empty()) {
    d_.error(gd.loc, fmt::format("internal error: the lowered graph does not verify: {}", problems[0]));
    return std::nullopt;
  }
  return r;
}

}  // namespace tgc::fe
