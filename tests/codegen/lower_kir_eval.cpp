#include "lower_kir_eval.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

namespace tgc::test {

using namespace codegen::kir;

namespace {

struct Val {
  double f = 0;   // floats (bf16/f16 hold their exact value)
  int64_t i = 0;  // ints and bools
};

double roundTo(double v, DType t) {
  switch (t) {
    case DType::f32: return static_cast<float>(v);
    case DType::bf16: return bf16ToFloat(floatToBF16(static_cast<float>(v)));
    case DType::f16: return f16ToFloat(floatToF16(static_cast<float>(v)));
    default: return v;
  }
}

int64_t wrapTo(int64_t v, DType t) {
  if (t == DType::i32) return static_cast<int32_t>(static_cast<uint32_t>(v));
  if (t == DType::boolean) return v & 1;
  return v;
}

int64_t saturate(double v, DType t) {
  if (std::isnan(v)) return 0;
  double lo = t == DType::i32 ? -2147483648.0 : -9223372036854775808.0;
  double hi = t == DType::i32 ? 2147483647.0 : 9223372036854775807.0;
  if (v <= lo) return t == DType::i32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
  if (v >= hi) return t == DType::i32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(v);
}

double nanMax(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a < b ? b : a;
}
double nanMin(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return b < a ? b : a;
}

class Evaluator {
 public:
  Evaluator(const Kernel& k, void* const* buffers) : k_(k), buffers_(buffers), vars_(k.vars.size()) {}

  void run(int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      if (k_.parallelVar >= 0) vars_[k_.parallelVar].i = p;
      stmts(k_.body);
    }
  }

 private:
  void stmts(const std::vector<StmtP>& body) {
    for (const StmtP& s : body) stmt(*s);
  }

  void stmt(const Stmt& s) {
    switch (s.kind) {
      case StmtKind::Loop:
        for (int64_t v = 0; v < s.extent; ++v) {
          vars_[s.var].i = v;
          stmts(s.body);
        }
        return;
      case StmtKind::Store: {
        int64_t idx = expr(*s.args[0]).i;
        Val v = expr(*s.args[1]);
        write(s.buffer, idx, v);
        return;
      }
      case StmtKind::Assign: vars_[s.var] = expr(*s.args[0]); return;
      case StmtKind::If:
        if (expr(*s.args[0]).i)
          stmts(s.body);
        else
          stmts(s.elseBody);
        return;
    }
  }

  char* at(int b, int64_t idx) {
    const BufferDecl& d = k_.buffers.at(static_cast<size_t>(b));
    if (idx < 0 || idx >= d.numel)
      throw std::logic_error(fmt::format("kernel {}: index {} out of bounds of buffer {} ({} elements)",
                                         k_.name, idx, d.name, d.numel));
    return static_cast<char*>(buffers_[b]) + idx * static_cast<int64_t>(dtypeSize(d.dtype));
  }

  Val read(int b, int64_t idx) {
    char* p = at(b, idx);
    Val v;
    switch (k_.buffers[b].dtype) {
      case DType::f32: { float x; std::memcpy(&x, p, 4); v.f = x; break; }
      case DType::f64: std::memcpy(&v.f, p, 8); break;
      case DType::bf16: { uint16_t h; std::memcpy(&h, p, 2); v.f = bf16ToFloat(h); break; }
      case DType::f16: { uint16_t h; std::memcpy(&h, p, 2); v.f = f16ToFloat(h); break; }
      case DType::i32: { int32_t x; std::memcpy(&x, p, 4); v.i = x; break; }
      case DType::i64: std::memcpy(&v.i, p, 8); break;
      case DType::boolean: v.i = *reinterpret_cast<uint8_t*>(p) != 0; break;
    }
    return v;
  }

  void write(int b, int64_t idx, Val v) {
    char* p = at(b, idx);
    switch (k_.buffers[b].dtype) {
      case DType::f32: { float x = static_cast<float>(v.f); std::memcpy(p, &x, 4); break; }
      case DType::f64: std::memcpy(p, &v.f, 8); break;
      case DType::bf16: { uint16_t h = floatToBF16(static_cast<float>(v.f)); std::memcpy(p, &h, 2); break; }
      case DType::f16: { uint16_t h = floatToF16(static_cast<float>(v.f)); std::memcpy(p, &h, 2); break; }
      case DType::i32: { auto x = static_cast<int32_t>(v.i); std::memcpy(p, &x, 4); break; }
      case DType::i64: std::memcpy(p, &v.i, 8); break;
      case DType::boolean: *reinterpret_cast<uint8_t*>(p) = v.i != 0; break;
    }
  }

  Val expr(const Expr& e) {
    Val r;
    switch (e.kind) {
      case ExprKind::Const:
        if (isFloat(e.type)) r.f = roundTo(e.f, e.type);
        else r.i = e.i;
        return r;
      case ExprKind::Var: return vars_.at(static_cast<size_t>(e.var));
      case ExprKind::Load: return read(e.buffer, expr(*e.args[0]).i);
      case ExprKind::Unary: return unaryOp(e, expr(*e.args[0]));
      case ExprKind::Binary: return binaryOp(e, expr(*e.args[0]), expr(*e.args[1]));
      case ExprKind::Select: return expr(*e.args[0]).i ? expr(*e.args[1]) : expr(*e.args[2]);
      case ExprKind::Cast: return castOp(e.args[0]->type, e.type, expr(*e.args[0]));
    }
    throw std::logic_error("bad expression kind");
  }

  static Val unaryOp(const Expr& e, Val x) {
    DType t = e.type;
    Val r;
    if (isFloat(t)) {
      double v = x.f;
      switch (e.unary) {
        case UnaryOp::Neg: r.f = -v; break;
        case UnaryOp::Abs: r.f = std::fabs(v); break;
        case UnaryOp::Exp: r.f = std::exp(v); break;
        case UnaryOp::Log: r.f = std::log(v); break;
        case UnaryOp::Sqrt: r.f = std::sqrt(v); break;
        case UnaryOp::Rsqrt: r.f = 1.0 / std::sqrt(v); break;
        case UnaryOp::Tanh: r.f = std::tanh(v); break;
        case UnaryOp::Erf: r.f = std::erf(v); break;
        case UnaryOp::Not: throw std::logic_error("not of a float");
      }
      r.f = roundTo(r.f, t);
      return r;
    }
    switch (e.unary) {
      case UnaryOp::Neg: r.i = static_cast<int64_t>(0 - static_cast<uint64_t>(x.i)); break;
      case UnaryOp::Abs: r.i = x.i < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(x.i)) : x.i; break;
      case UnaryOp::Not: r.i = t == DType::boolean ? !x.i : ~x.i; break;
      default: throw std::logic_error("float unary op on an int");
    }
    r.i = wrapTo(r.i, t);
    return r;
  }

  static Val binaryOp(const Expr& e, Val a, Val b) {
    DType t = e.args[0]->type;
    Val r;
    if (isFloat(t)) {
      double x = a.f, y = b.f;
      switch (e.binary) {
        case BinaryOp::Add: r.f = x + y; break;
        case BinaryOp::Sub: r.f = x - y; break;
        case BinaryOp::Mul: r.f = x * y; break;
        case BinaryOp::Div: r.f = x / y; break;
        case BinaryOp::Pow: r.f = std::pow(x, y); break;
        case BinaryOp::Max: r.f = nanMax(x, y); break;
        case BinaryOp::Min: r.f = nanMin(x, y); break;
        case BinaryOp::Eq: r.i = x == y; return r;
        case BinaryOp::Ne: r.i = x != y; return r;
        case BinaryOp::Lt: r.i = x < y; return r;
        case BinaryOp::Le: r.i = x <= y; return r;
        case BinaryOp::Gt: r.i = x > y; return r;
        case BinaryOp::Ge: r.i = x >= y; return r;
        default: throw std::logic_error("int binary op on floats");
      }
      r.f = roundTo(r.f, t);
      return r;
    }
    int64_t x = a.i, y = b.i;
    auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    switch (e.binary) {
      case BinaryOp::Add: r.i = static_cast<int64_t>(u(x) + u(y)); break;
      case BinaryOp::Sub: r.i = static_cast<int64_t>(u(x) - u(y)); break;
      case BinaryOp::Mul: r.i = static_cast<int64_t>(u(x) * u(y)); break;
      case BinaryOp::Div:
        if (y == 0) throw std::logic_error("integer division by zero in a kernel");
        r.i = y == -1 ? static_cast<int64_t>(0 - u(x)) : x / y;
        break;
      case BinaryOp::Rem:
        if (y == 0) throw std::logic_error("integer remainder by zero in a kernel");
        r.i = y == -1 ? 0 : x % y;
        break;
      case BinaryOp::Max: r.i = std::max(x, y); break;
      case BinaryOp::Min: r.i = std::min(x, y); break;
      case BinaryOp::Eq: r.i = x == y; return r;
      case BinaryOp::Ne: r.i = x != y; return r;
      case BinaryOp::Lt: r.i = x < y; return r;
      case BinaryOp::Le: r.i = x <= y; return r;
      case BinaryOp::Gt: r.i = x > y; return r;
      case BinaryOp::Ge: r.i = x >= y; return r;
      case BinaryOp::And: r.i = x & y; break;
      case BinaryOp::Or: r.i = x | y; break;
      case BinaryOp::Xor: r.i = x ^ y; break;
      case BinaryOp::Shl: r.i = static_cast<int64_t>(u(x) << (y & 63)); break;
      case BinaryOp::Shr:
        r.i = t == DType::i32 ? static_cast<int64_t>(static_cast<uint32_t>(x) >> (y & 31))
                              : static_cast<int64_t>(u(x) >> (y & 63));
        break;
      case BinaryOp::Pow: throw std::logic_error("pow of ints");
    }
    r.i = wrapTo(r.i, t);
    return r;
  }

  static Val castOp(DType from, DType to, Val x) {
    Val r;
    bool ff = isFloat(from), tf = isFloat(to);
    if (ff && tf) r.f = roundTo(x.f, to);
    else if (ff && to == DType::boolean) r.i = x.f != 0;
    else if (ff) r.i = saturate(x.f, to);
    else if (tf) r.f = roundTo(to == DType::f32 ? static_cast<double>(static_cast<float>(x.i))
                                                : static_cast<double>(x.i), to);
    else if (to == DType::boolean) r.i = x.i != 0;
    else r.i = wrapTo(x.i, to);
    return r;
  }

  const Kernel& k_;
  void* const* buffers_;
  std::vector<Val> vars_;
};

}  // namespace

void evalKernel(const Kernel& k, void* const* buffers, int64_t begin, int64_t end) {
  Evaluator(k, buffers).run(begin, end);
}

}  // namespace tgc::test
