// Calls to builtins: every op of the op table (checked against its attribute specs, so new
// ops need no frontend change) and the few functions the language adds (dropout, ...).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "frontend/eval.h"
#include "frontend/sinusoidal_table.h"

namespace tgc::fe {
namespace {

std::string numStr(double v) { return fmt::format("{}", v); }

bool integral(double v) { return std::isfinite(v) && v == std::floor(v) && std::abs(v) < 9.0e18; }

const char* attrKindWant(AttrKind k) {
  switch (k) {
    case AttrKind::Bool: return "a bool";
    case AttrKind::Int: return "an int";
    case AttrKind::Float: return "a number";
    case AttrKind::String: return "a str";
    case AttrKind::Ints: return "a list of ints";
    case AttrKind::Floats: return "a list of numbers";
    case AttrKind::DTypeKind: return "a dtype (f32, i64, ...)";
  }
  return "?";
}

// Folds an elementwise op on compile-time numbers (sqrt(d_k), maximum(a, b), ...).
std::optional<double> foldUnary(OpKind k, double x) {
  switch (k) {
    case OpKind::Neg: return -x;
    case OpKind::Abs: return std::abs(x);
    case OpKind::Exp: return std::exp(x);
    case OpKind::Log: return std::log(x);
    case OpKind::Sqrt: return std::sqrt(x);
    case OpKind::Rsqrt: return 1.0 / std::sqrt(x);
    case OpKind::Tanh: return std::tanh(x);
    case OpKind::Erf: return std::erf(x);
    case OpKind::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case OpKind::Silu: return x / (1.0 + std::exp(-x));
    case OpKind::Relu: return x > 0 ? x : 0.0;
    default: return std::nullopt;
  }
}

}  // namespace

Val Evaluator::callOp(OpKind k, std::vector<ArgVal> args, Loc loc) {
  const OpInfo& info = opInfo(k);
  std::string name(info.name);
  std::vector<std::pair<Val, Loc>> operands;
  AttrMap attrs;
  std::optional<TensorType> declared;
  size_t nextAttr = 0;

  auto toAttr = [&](const AttrSpec& spec, const Val& v, Loc at) -> Attr {
    std::string bad = fmt::format("attribute '{}' of {} must be {}, got {}", spec.name, name,
                                  attrKindWant(spec.kind), describeVal(v));
    auto asInt = [&](const Val& x) -> int64_t {
      if (x.k == VK::Int) return x.i;
      if (x.k == VK::Float && integral(x.f)) return static_cast<int64_t>(x.f);
      fail(at, bad);
    };
    switch (spec.kind) {
      case AttrKind::Bool:
        if (v.k != VK::Bool) fail(at, bad);
        return v.b;
      case AttrKind::Int: return asInt(v);
      case AttrKind::Float:
        if (!v.isNumber()) fail(at, bad);
        return v.num();
      case AttrKind::String:
        if (v.k != VK::Str) fail(at, bad);
        return v.s;
      case AttrKind::DTypeKind:
        if (v.k != VK::DType) fail(at, bad);
        return v.dt;
      case AttrKind::Ints: {
        if (v.k == VK::Int) return std::vector<int64_t>{v.i};  // axes=-1 means [-1]
        if (v.k != VK::List) fail(at, bad);
        std::vector<int64_t> r;
        for (const Val& x : *v.list) r.push_back(asInt(x));
        return r;
      }
      case AttrKind::Floats: {
        if (v.isNumber()) return std::vector<double>{v.num()};
        if (v.k != VK::List) fail(at, bad);
        std::vector<double> r;
        for (const Val& x : *v.list) {
          if (!x.isNumber()) fail(at, bad);
          r.push_back(x.num());
        }
        return r;
      }
    }
    fail(at, bad);
  };

  auto isOperandLike = [](const Val& v) { return v.k == VK::Tensor || v.isNumber() || v.k == VK::Bool; };
  for (auto& a : args) {
    if (!a.name.empty()) continue;
    if (a.v.k == VK::Type) {
      if (!info.isSource())
        fail(a.loc, fmt::format("{} does not take a result type; only source ops (constant, iota, "
                                "philox_uniform) do", name));
      if (declared) fail(a.loc, fmt::format("{} takes one result type", name));
      declared = a.v.tensorType();
      continue;
    }
    int n = static_cast<int>(operands.size());
    bool variadic = info.max_operands < 0;
    if (variadic && a.v.k == VK::List && nextAttr == 0 &&
        std::all_of(a.v.list->begin(), a.v.list->end(), [](const Val& x) { return x.k == VK::Tensor; })) {
      for (const Val& x : *a.v.list) operands.push_back({x, a.loc});  // concat([a, b], axis=0)
      continue;
    }
    if (nextAttr == 0 && (n < info.min_operands ||
                          (variadic && a.v.k == VK::Tensor) ||
                          (n < info.max_operands && isOperandLike(a.v)))) {
      operands.push_back({a.v, a.loc});
      continue;
    }
    if (nextAttr >= info.attrs.size())
      fail(a.loc, fmt::format("too many arguments to {}: it takes {} operand{}{}", name,
                              info.min_operands, info.min_operands == 1 ? "" : "s",
                              info.attrs.empty() ? " and no attributes" : ""));
    const AttrSpec& spec = info.attrs[nextAttr++];
    attrs[spec.name] = toAttr(spec, a.v, a.loc);
  }
  for (auto& a : args) {
    if (a.name.empty()) continue;
    const AttrSpec* spec = info.findAttr(a.name);
    if (!spec) {
      std::vector<std::string> known;
      for (const auto& s : info.attrs) known.push_back(s.name);
      std::string list;
      for (const auto& s : known) list += (list.empty() ? "" : ", ") + s;
      fail(a.loc, fmt::format("{} has no attribute '{}'{} (attributes: {})", name, a.name,
                              didYouMean(a.name, known), list.empty() ? "none" : list));
    }
    if (attrs.count(a.name)) fail(a.loc, fmt::format("attribute '{}' of {} is given twice", a.name, name));
    attrs[a.name] = toAttr(*spec, a.v, a.loc);
  }
  for (const auto& s : info.attrs)
    if (!s.default_value && !attrs.count(s.name))
      fail(loc, fmt::format("{} needs the attribute '{}' ({}), e.g. {}={}", name, s.name,
                            attrKindName(s.kind), s.name,
                            s.kind == AttrKind::Ints ? "[-1]" : s.kind == AttrKind::DTypeKind ? "f32" : "0"));
  int n = static_cast<int>(operands.size());
  if (n < info.min_operands || (info.max_operands >= 0 && n > info.max_operands)) {
    if (info.min_operands == info.max_operands)
      fail(loc, fmt::format("{} takes {} operand{}, got {}", name, info.min_operands,
                            info.min_operands == 1 ? "" : "s", n));
    fail(loc, fmt::format("{} takes at least {} operand{}, got {}", name, info.min_operands,
                          info.min_operands == 1 ? "" : "s", n));
  }
  if (info.isSource() && !declared)
    fail(loc, fmt::format("{} needs its result type as an argument, e.g. {}(f32[4, 4], ...)", name, name));

  // All operands are compile-time numbers: fold what we can (sqrt(d_k) is a number).
  bool anyTensor = std::any_of(operands.begin(), operands.end(),
                               [](const auto& o) { return o.first.k == VK::Tensor; });
  if (!anyTensor && !operands.empty()) {
    for (const auto& o : operands)
      if (!o.first.isNumber())
        fail(o.second, fmt::format("{} needs a tensor or a number, got {}", name, describeVal(o.first)));
    const Val& a = operands[0].first;
    if (operands.size() == 1) {
      if ((k == OpKind::Neg || k == OpKind::Abs || k == OpKind::Relu) && a.k == VK::Int) {
        if (k == OpKind::Neg) return unaryOp(Op::Neg, a, loc);
        return Val::integer(k == OpKind::Relu ? std::max<int64_t>(a.i, 0)
                                              : a.i < 0 ? -a.i : a.i);
      }
      if (auto r = foldUnary(k, a.num())) return Val::number(*r);
    } else if (operands.size() == 2) {
      const Val& b = operands[1].first;
      switch (k) {
        case OpKind::Add: return foldNumbers(Op::Add, a, b, loc);
        case OpKind::Sub: return foldNumbers(Op::Sub, a, b, loc);
        case OpKind::Mul: return foldNumbers(Op::Mul, a, b, loc);
        case OpKind::Div: return foldNumbers(Op::Div, a, b, loc);
        case OpKind::Pow: return Val::number(std::pow(a.num(), b.num()));
        case OpKind::Maximum: case OpKind::Minimum: {
          bool takeA = k == OpKind::Maximum ? a.num() >= b.num() : a.num() <= b.num();
          return takeA ? a : b;
        }
        case OpKind::Eq: return foldNumbers(Op::Eq, a, b, loc);
        case OpKind::Ne: return foldNumbers(Op::Ne, a, b, loc);
        case OpKind::Lt: return foldNumbers(Op::Lt, a, b, loc);
        case OpKind::Le: return foldNumbers(Op::Le, a, b, loc);
        case OpKind::Gt: return foldNumbers(Op::Gt, a, b, loc);
        case OpKind::Ge: return foldNumbers(Op::Ge, a, b, loc);
        default: break;
      }
    }
    fail(loc, fmt::format("{} needs at least one tensor operand", name));
  }

  // Numbers become constants of the dtype of the tensors they meet (where's condition is
  // bool, so the branches decide; otherwise the first non-bool tensor).
  DType peer = DType::f32;
  bool havePeer = false;
  for (size_t i = 0; i < operands.size(); ++i) {
    const Val& v = operands[i].first;
    if (v.k != VK::Tensor || (k == OpKind::Where && i == 0)) continue;
    if (!havePeer || (peer == DType::boolean && v.t->type().dtype != DType::boolean)) {
      peer = v.t->type().dtype;
      havePeer = true;
    }
  }
  if (!havePeer) {
    if (k == OpKind::Where)
      fail(loc, "where needs a tensor in one of its branches to know their dtype");
    for (const auto& o : operands)
      if (o.first.k == VK::Tensor) {
        peer = o.first.t->type().dtype;
        break;
      }
  }
  std::vector<Value*> ops;
  for (const auto& [v, at] : operands) ops.push_back(toOperand(v, peer, at));

  requireTensorContext(loc, name.c_str());
  try {
    // reshape and slice go through the builder for -1 sizes and Python-style bounds.
    if (k == OpKind::Reshape) {
      Builder b(*g_);
      if (g_->size() >= kMaxGraphNodes) fail(loc, "the graph has too many nodes");
      return Val::tensor(b.reshape(ops[0], std::get<std::vector<int64_t>>(attrs.at("shape")),
                                   irName("reshape")));
    }
    if (k == OpKind::Slice) {
      Builder b(*g_);
      auto get = [&](const char* a, int64_t d) {
        auto it = attrs.find(a);
        return it == attrs.end() ? d : std::get<int64_t>(it->second);
      };
      return Val::tensor(b.slice(ops[0], get("axis", 0), get("start", 0), get("end", 0),
                                 get("step", 1), irName("slice")));
    }
  } catch (const IRError& e) {
    fail(loc, e.what());
  }
  return addNode(loc, k, std::move(ops), std::move(attrs), name, declared);
}

Val Evaluator::callBuiltin(const Val& b, std::vector<ArgVal> args, Loc loc) {
  if (b.k == VK::Builtin && b.builtin == BuiltinId::Op)
    return callOp(static_cast<OpKind>(b.i), std::move(args), loc);
  if (b.k != VK::Builtin) fail(loc, fmt::format("{} cannot be called", describeVal(b)));

  // Matches arguments to named parameters; the first `required` ones must be given.
  auto match = [&](const char* fname, std::vector<std::string> params,
                   size_t required) -> std::vector<std::optional<ArgVal>> {
    std::vector<std::optional<ArgVal>> out(params.size());
    size_t pos = 0;
    for (auto& a : args) {
      size_t idx;
      if (a.name.empty()) {
        if (pos >= params.size())
          fail(a.loc, fmt::format("{} takes at most {} argument{}", fname, params.size(),
                                  params.size() == 1 ? "" : "s"));
        idx = pos++;
      } else {
        auto it = std::find(params.begin(), params.end(), a.name);
        if (it == params.end())
          fail(a.loc, fmt::format("{} has no parameter '{}'{}", fname, a.name, didYouMean(a.name, params)));
        idx = static_cast<size_t>(it - params.begin());
        if (out[idx]) fail(a.loc, fmt::format("argument '{}' is given twice", a.name));
      }
      out[idx] = a;
    }
    for (size_t i = 0; i < required; ++i)
      if (!out[i]) fail(loc, fmt::format("{} needs the argument '{}'", fname, params[i]));
    return out;
  };
  auto number = [&](const std::optional<ArgVal>& a, const char* what) -> double {
    if (!a->v.isNumber())
      fail(a->loc, fmt::format("{} must be a number, got {}", what, describeVal(a->v)));
    return a->v.num();
  };
  auto typeArg = [&](const std::optional<ArgVal>& a, const char* fname) -> TensorType {
    if (a->v.k != VK::Type)
      fail(a->loc, fmt::format("{} needs a tensor type such as f32[2, 3], got {}", fname,
                               describeVal(a->v)));
    return a->v.tensorType();
  };
  auto splat = [&](TensorType t, double v, const char* fname) {
    if (t.dtype == DType::boolean && v != 0 && v != 1)
      fail(loc, fmt::format("{}: {} is not a bool value", fname, numStr(v)));
    if (isInteger(t.dtype) && !integral(v))
      fail(loc, fmt::format("{}: {} is not an integer", fname, numStr(v)));
    return addNode(loc, OpKind::Constant, {}, {{"value", std::vector<double>{v}}}, fname, t);
  };

  switch (b.builtin) {
    case BuiltinId::Op: break;
    case BuiltinId::Dropout: {
      auto a = match("dropout", {"x", "p"}, 2);
      double p = number(a[1], "the dropout probability");
      if (inference_) {
        // ModelOptions::inference: dropout's checks, then x itself, as outside training graphs.
        struct Restore {
          bool& flag;
          bool saved;
          ~Restore() { flag = saved; }
        } restore{training_, training_};
        training_ = false;
        return dropout(a[0]->v, p, loc);
      }
      return dropout(a[0]->v, p, loc);
    }
    case BuiltinId::SinusoidalTable: {
      auto a = match("sinusoidal_table", {"length", "d", "dtype"}, 2);
      if (a[0]->v.k != VK::Int || a[1]->v.k != VK::Int || a[0]->v.i < 1 || a[1]->v.i < 1)
        fail(loc, "sinusoidal_table needs a positive integer length and width");
      int64_t len = a[0]->v.i, d = a[1]->v.i;
      if (len > kMaxConstantElements / d)
        fail(loc, fmt::format("sinusoidal_table({}, {}) is too large", len, d));
      DType dt = DType::f32;
      if (a[2]) {
        if (a[2]->v.k != VK::DType || !isFloat(a[2]->v.dt))
          fail(a[2]->loc, "the dtype of sinusoidal_table must be a float dtype");
        dt = a[2]->v.dt;
      }
      std::vector<double> v = sinusoidalTable(len, d);  // a constant of the graph
      return addNode(loc, OpKind::Constant, {}, {{"value", std::move(v)}}, "positions",
                     TensorType{dt, {len, d}});
    }
    case BuiltinId::Zeros: {
      auto a = match("zeros", {"type"}, 1);
      return splat(typeArg(a[0], "zeros"), 0.0, "zeros");
    }
    case BuiltinId::Ones: {
      auto a = match("ones", {"type"}, 1);
      return splat(typeArg(a[0], "ones"), 1.0, "ones");
    }
    case BuiltinId::Full: {
      auto a = match("full", {"type", "value"}, 2);
      return splat(typeArg(a[0], "full"), number(a[1], "the fill value"), "full");
    }
    case BuiltinId::Len: {
      auto a = match("len", {"x"}, 1);
      if (a[0]->v.k == VK::List) return Val::integer(static_cast<int64_t>(a[0]->v.list->size()));
      if (a[0]->v.k == VK::Str) return Val::integer(static_cast<int64_t>(a[0]->v.s.size()));
      fail(a[0]->loc, fmt::format("len needs a list or a str, got {}", describeVal(a[0]->v)));
    }
    case BuiltinId::Min:
    case BuiltinId::Max: {
      const char* fname = b.builtin == BuiltinId::Min ? "min" : "max";
      std::vector<Val> xs;
      for (const auto& a : args) {
        if (!a.name.empty()) fail(a.loc, fmt::format("{} takes no keyword arguments", fname));
        if (a.v.k == VK::List) xs.insert(xs.end(), a.v.list->begin(), a.v.list->end());
        else xs.push_back(a.v);
      }
      if (xs.empty()) fail(loc, fmt::format("{} needs at least one number", fname));
      Val best = xs[0];
      for (const Val& x : xs) {
        if (!x.isNumber())
          fail(loc, fmt::format("{} compares numbers (use minimum/maximum for tensors), got {}",
                                fname, describeVal(x)));
        if (b.builtin == BuiltinId::Min ? x.num() < best.num() : x.num() > best.num()) best = x;
      }
      return best;
    }
    case BuiltinId::ToInt:
    case BuiltinId::Floor:
    case BuiltinId::Ceil: {
      const char* fname = b.builtin == BuiltinId::ToInt ? "int" : b.builtin == BuiltinId::Floor ? "floor" : "ceil";
      auto a = match(fname, {"x"}, 1);
      const Val& v = a[0]->v;
      if (v.k == VK::Int) return v;
      if (v.k == VK::Bool) return Val::integer(v.b ? 1 : 0);
      if (v.k != VK::Float) fail(a[0]->loc, fmt::format("{} needs a number, got {}", fname, describeVal(v)));
      double r = b.builtin == BuiltinId::ToInt ? std::trunc(v.f)
                 : b.builtin == BuiltinId::Floor ? std::floor(v.f) : std::ceil(v.f);
      if (!integral(r)) fail(a[0]->loc, fmt::format("{} cannot convert {} to an int", fname, numStr(v.f)));
      return Val::integer(static_cast<int64_t>(r));
    }
    case BuiltinId::ToFloat: {
      auto a = match("float", {"x"}, 1);
      return Val::number(number(a[0], "the argument of float"));
    }
    case BuiltinId::ToStr: {
      auto a = match("str", {"x"}, 1);
      const Val& v = a[0]->v;
      switch (v.k) {
        case VK::Int: return Val::str(std::to_string(v.i));
        case VK::Float: return Val::str(numStr(v.f));
        case VK::Bool: return Val::str(v.b ? "true" : "false");
        case VK::Str: return v;
        case VK::DType: return Val::str(std::string(dtypeName(v.dt)));
        case VK::Type: return Val::str(v.tensorType().str());
        case VK::Tensor:
          read_at_compile_time_.insert(v.t->def());
          return Val::str(v.t->type().str());
        default: fail(a[0]->loc, fmt::format("str cannot convert {}", describeVal(v)));
      }
    }
    case BuiltinId::Assert: {
      auto a = match("assert", {"cond", "message"}, 1);
      if (a[0]->v.k != VK::Bool)
        fail(a[0]->loc, fmt::format("assert needs a compile-time bool, got {}", describeVal(a[0]->v)));
      if (a[1] && a[1]->v.k != VK::Str) fail(a[1]->loc, "the message of assert must be a str");
      if (!a[0]->v.b) fail(loc, a[1] ? "assertion failed: " + a[1]->v.s : std::string("assertion failed"));
      return Val::none();
    }
    case BuiltinId::Fail: {
      auto a = match("error", {"message"}, 1);
      if (a[0]->v.k != VK::Str) fail(a[0]->loc, "the message of error must be a str");
      fail(loc, a[0]->v.s);
    }
  }
  fail(loc, "internal error: unknown builtin");
}

}  // namespace tgc::fe
