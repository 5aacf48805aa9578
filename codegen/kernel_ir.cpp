#include "codegen/kernel_ir.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace tgc::codegen::kir {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::logic_error("kernel IR: " + what); }

bool isStorageFloat(DType t) { return t == DType::bf16 || t == DType::f16; }
bool isComputeFloat(DType t) { return t == DType::f32 || t == DType::f64; }
bool isArith(DType t) { return isComputeFloat(t) || isInteger(t); }

std::string_view unaryName(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg:
      return "neg";
    case UnaryOp::Abs:
      return "abs";
    case UnaryOp::Exp:
      return "exp";
    case UnaryOp::Log:
      return "log";
    case UnaryOp::Sqrt:
      return "sqrt";
    case UnaryOp::Rsqrt:
      return "rsqrt";
    case UnaryOp::Tanh:
      return "tanh";
    case UnaryOp::Erf:
      return "erf";
    case UnaryOp::Not:
      return "not";
  }
  return "?";
}

std::string_view binaryName(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add:
      return "+";
    case BinaryOp::Sub:
      return "-";
    case BinaryOp::Mul:
      return "*";
    case BinaryOp::Div:
      return "/";
    case BinaryOp::Rem:
      return "%";
    case BinaryOp::Pow:
      return "pow";
    case BinaryOp::Max:
      return "max";
    case BinaryOp::Min:
      return "min";
    case BinaryOp::Eq:
      return "==";
    case BinaryOp::Ne:
      return "!=";
    case BinaryOp::Lt:
      return "<";
    case BinaryOp::Le:
      return "<=";
    case BinaryOp::Gt:
      return ">";
    case BinaryOp::Ge:
      return ">=";
    case BinaryOp::And:
      return "&";
    case BinaryOp::Or:
      return "|";
    case BinaryOp::Xor:
      return "^";
    case BinaryOp::Shl:
      return "<<";
    case BinaryOp::Shr:
      return ">>";
  }
  return "?";
}

// The result type of `op x`, or a message saying why x's type is not allowed.
DType unaryResult(UnaryOp op, DType t) {
  auto bad = [&](std::string_view needs) -> DType {
    fail(fmt::format("{} needs {}, got {}", unaryName(op), needs, dtypeName(t)));
  };
  if (isStorageFloat(t))
    fail(fmt::format("{} of {}: {} is a storage type, cast it to f32 first", unaryName(op),
                     dtypeName(t), dtypeName(t)));
  switch (op) {
    case UnaryOp::Neg:
    case UnaryOp::Abs:
      return isArith(t) ? t : bad("f32, f64, i32 or i64");
    case UnaryOp::Exp:
    case UnaryOp::Log:
    case UnaryOp::Sqrt:
    case UnaryOp::Rsqrt:
    case UnaryOp::Tanh:
    case UnaryOp::Erf:
      return isComputeFloat(t) ? t : bad("f32 or f64");
    case UnaryOp::Not:
      return isInteger(t) || t == DType::boolean ? t : bad("bool, i32 or i64");
  }
  return t;
}

DType binaryResult(BinaryOp op, DType a, DType b) {
  if (a != b)
    fail(fmt::format("operands of {} differ in type: {} and {}", binaryName(op), dtypeName(a),
                     dtypeName(b)));
  auto bad = [&](std::string_view needs) -> DType {
    fail(fmt::format("{} needs {}, got {}", binaryName(op), needs, dtypeName(a)));
  };
  if (isStorageFloat(a))
    fail(fmt::format("{} of {}: {} is a storage type, cast it to f32 first", binaryName(op),
                     dtypeName(a), dtypeName(a)));
  switch (op) {
    case BinaryOp::Add:
    case BinaryOp::Sub:
    case BinaryOp::Mul:
    case BinaryOp::Div:
    case BinaryOp::Max:
    case BinaryOp::Min:
      return isArith(a) ? a : bad("f32, f64, i32 or i64");
    case BinaryOp::Rem:
    case BinaryOp::Shl:
    case BinaryOp::Shr:
      return isInteger(a) ? a : bad("i32 or i64");
    case BinaryOp::Pow:
      return isComputeFloat(a) ? a : bad("f32 or f64");
    case BinaryOp::Eq:
    case BinaryOp::Ne:
    case BinaryOp::Lt:
    case BinaryOp::Le:
    case BinaryOp::Gt:
    case BinaryOp::Ge:
      return DType::boolean;
    case BinaryOp::And:
    case BinaryOp::Or:
    case BinaryOp::Xor:
      return isInteger(a) || a == DType::boolean ? a : bad("bool, i32 or i64");
  }
  return a;
}

void need(const ExprP& e, std::string_view what) {
  if (!e) fail(fmt::format("{}: null expression", what));
}

Expr blank(ExprKind kind, DType type) {
  Expr e;
  e.kind = kind;
  e.type = type;
  return e;
}

ExprP make(Expr e) { return std::make_shared<const Expr>(std::move(e)); }

bool isConstInt(const ExprP& e, int64_t v) { return e->kind == ExprKind::Const && e->i == v; }

int64_t wrapAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wrapMul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// Keeps an i32 constant's value in range (i32 arithmetic wraps).
int64_t normalizeInt(int64_t v, DType t) {
  if (t == DType::i32) return static_cast<int32_t>(static_cast<uint32_t>(v));
  return v;
}

void checkIndexType(const ExprP& index, std::string_view what) {
  need(index, what);
  if (index->type != DType::i64)
    fail(fmt::format("{}: the index must be i64, got {}", what, dtypeName(index->type)));
}

}  // namespace

// ---- builders ---------------------------------------------------------------------------

ExprP constInt(int64_t v, DType type) {
  if (!isInteger(type) && type != DType::boolean)
    fail(fmt::format("constInt of type {}: needs i32, i64 or bool", dtypeName(type)));
  if (type == DType::i32 &&
      (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()))
    fail(fmt::format("constInt {} does not fit in i32", v));
  if (type == DType::boolean && v != 0 && v != 1)
    fail(fmt::format("constInt {} of type bool: needs 0 or 1", v));
  Expr e = blank(ExprKind::Const, type);
  e.i = v;
  return make(std::move(e));
}

ExprP constFloat(double v, DType type) {
  if (!isFloat(type))
    fail(fmt::format("constFloat of type {}: needs a float type", dtypeName(type)));
  Expr e = blank(ExprKind::Const, type);
  e.f = v;
  return make(std::move(e));
}

ExprP constBool(bool v) { return constInt(v ? 1 : 0, DType::boolean); }

ExprP varRef(const Kernel& k, int var) {
  if (var < 0 || var >= static_cast<int>(k.vars.size()))
    fail(fmt::format("variable {} out of range in kernel {} ({} variables)", var, k.name,
                     k.vars.size()));
  Expr e = blank(ExprKind::Var, k.vars[var].type);
  e.var = var;
  return make(std::move(e));
}

ExprP load(const Kernel& k, int buffer, ExprP index) {
  if (buffer < 0 || buffer >= static_cast<int>(k.buffers.size()))
    fail(fmt::format("load from buffer {} out of range in kernel {} ({} buffers)", buffer, k.name,
                     k.buffers.size()));
  checkIndexType(index, "load from " + k.buffers[buffer].name);
  Expr e = blank(ExprKind::Load, k.buffers[buffer].dtype);
  e.buffer = buffer;
  e.args = {std::move(index)};
  return make(std::move(e));
}

ExprP unary(UnaryOp op, ExprP x) {
  need(x, unaryName(op));
  Expr e = blank(ExprKind::Unary, unaryResult(op, x->type));
  e.unary = op;
  e.args = {std::move(x)};
  return make(std::move(e));
}

ExprP binary(BinaryOp op, ExprP a, ExprP b) {
  need(a, binaryName(op));
  need(b, binaryName(op));
  Expr e = blank(ExprKind::Binary, binaryResult(op, a->type, b->type));
  e.binary = op;
  e.args = {std::move(a), std::move(b)};
  return make(std::move(e));
}

ExprP select(ExprP cond, ExprP a, ExprP b) {
  need(cond, "select");
  need(a, "select");
  need(b, "select");
  if (cond->type != DType::boolean)
    fail(fmt::format("select condition must be bool, got {}", dtypeName(cond->type)));
  if (a->type != b->type)
    fail(fmt::format("select arms differ in type: {} and {}", dtypeName(a->type),
                     dtypeName(b->type)));
  Expr e = blank(ExprKind::Select, a->type);
  e.args = {std::move(cond), std::move(a), std::move(b)};
  return make(std::move(e));
}

ExprP cast(ExprP x, DType to) {
  need(x, "cast");
  if (x->type == to) return x;
  Expr e = blank(ExprKind::Cast, to);
  e.args = {std::move(x)};
  return make(std::move(e));
}

// add/mul keep constants on the right and fold (x + c1) + c2 and (x * c1) * c2, so that
// index expressions built step by step print as `i * 64 + j + 3`.
ExprP add(ExprP a, ExprP b) {
  need(a, "add");
  need(b, "add");
  binaryResult(BinaryOp::Add, a->type, b->type);
  if (!isInteger(a->type)) return binary(BinaryOp::Add, std::move(a), std::move(b));
  const DType t = a->type;
  if (a->kind == ExprKind::Const && b->kind == ExprKind::Const)
    return constInt(normalizeInt(wrapAdd(a->i, b->i), t), t);
  if (a->kind == ExprKind::Const) std::swap(a, b);
  if (isConstInt(b, 0)) return a;
  if (b->kind == ExprKind::Const && a->kind == ExprKind::Binary && a->binary == BinaryOp::Add &&
      a->args[1]->kind == ExprKind::Const)
    return add(a->args[0], constInt(normalizeInt(wrapAdd(a->args[1]->i, b->i), t), t));
  return binary(BinaryOp::Add, std::move(a), std::move(b));
}

ExprP mul(ExprP a, ExprP b) {
  need(a, "mul");
  need(b, "mul");
  binaryResult(BinaryOp::Mul, a->type, b->type);
  if (!isInteger(a->type)) return binary(BinaryOp::Mul, std::move(a), std::move(b));
  const DType t = a->type;
  if (a->kind == ExprKind::Const && b->kind == ExprKind::Const)
    return constInt(normalizeInt(wrapMul(a->i, b->i), t), t);
  if (a->kind == ExprKind::Const) std::swap(a, b);
  if (isConstInt(b, 1)) return a;
  if (isConstInt(b, 0)) return b;
  if (b->kind == ExprKind::Const && a->kind == ExprKind::Binary && a->binary == BinaryOp::Mul &&
      a->args[1]->kind == ExprKind::Const)
    return mul(a->args[0], constInt(normalizeInt(wrapMul(a->args[1]->i, b->i), t), t));
  return binary(BinaryOp::Mul, std::move(a), std::move(b));
}

ExprP mul(ExprP a, int64_t b) { return mul(std::move(a), constInt(b, DType::i64)); }

StmtP loop(int var, int64_t extent, std::vector<StmtP> body, LoopKind kind, int unroll) {
  if (extent < 0) fail(fmt::format("loop extent {} is negative", extent));
  if (kind == LoopKind::Unroll && unroll < 1)
    fail(fmt::format("unrolled loop needs an unroll factor >= 1, got {}", unroll));
  if (kind != LoopKind::Unroll && unroll != 0)
    fail("an unroll factor is only for LoopKind::Unroll loops");
  auto s = std::make_shared<Stmt>();
  s->kind = StmtKind::Loop;
  s->var = var;
  s->extent = extent;
  s->loop = kind;
  s->unroll = unroll;
  s->body = std::move(body);
  return s;
}

StmtP store(int buffer, ExprP index, ExprP value) {
  checkIndexType(index, "store");
  need(value, "store");
  auto s = std::make_shared<Stmt>();
  s->kind = StmtKind::Store;
  s->buffer = buffer;
  s->args = {std::move(index), std::move(value)};
  return s;
}

StmtP assign(int var, ExprP value) {
  need(value, "assign");
  auto s = std::make_shared<Stmt>();
  s->kind = StmtKind::Assign;
  s->var = var;
  s->args = {std::move(value)};
  return s;
}

StmtP ifThen(ExprP cond, std::vector<StmtP> thenBody, std::vector<StmtP> elseBody) {
  need(cond, "if");
  if (cond->type != DType::boolean)
    fail(fmt::format("if condition must be bool, got {}", dtypeName(cond->type)));
  auto s = std::make_shared<Stmt>();
  s->kind = StmtKind::If;
  s->body = std::move(thenBody);
  s->elseBody = std::move(elseBody);
  s->args = {std::move(cond)};
  return s;
}

// ---- verify -----------------------------------------------------------------------------

namespace {

bool isIdentifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

class Verifier {
 public:
  explicit Verifier(const Kernel& k)
      : k_(k), role_(k.vars.size(), Role::Unused), assigned_(k.vars.size(), false) {}

  void run() {
    if (!isIdentifier(k_.name)) bad(fmt::format("the name '{}' is not a C identifier", k_.name));
    for (size_t b = 0; b < k_.buffers.size(); ++b) checkBuffer(static_cast<int>(b));
    if (k_.parallelExtent < 0)
      bad(fmt::format("parallel extent {} is negative", k_.parallelExtent));
    if (k_.costPerIteration < 0) bad("costPerIteration is negative");
    if (k_.vectorInterleave < 0) bad("vectorInterleave is negative");
    if (k_.parallelVar != -1) {
      checkVarIndex(k_.parallelVar, "the parallel variable");
      if (k_.vars[k_.parallelVar].type != DType::i64)
        bad(fmt::format("the parallel variable {} must be i64", k_.vars[k_.parallelVar].name));
      role_[k_.parallelVar] = Role::Loop;
      bound_.push_back(k_.parallelVar);
    }
    // First pass: which variables are loop variables and which are locals.
    classify(k_.body);
    stmts(k_.body);
  }

 private:
  enum class Role { Unused, Loop, Local };

  [[noreturn]] void bad(const std::string& what) const {
    fail(fmt::format("kernel {}: {}", k_.name, what));
  }

  void checkVarIndex(int v, std::string_view what) const {
    if (v < 0 || v >= static_cast<int>(k_.vars.size()))
      bad(fmt::format("{} refers to variable {} ({} declared)", what, v, k_.vars.size()));
  }
  void checkBufferIndex(int b, std::string_view what) const {
    if (b < 0 || b >= static_cast<int>(k_.buffers.size()))
      bad(fmt::format("{} refers to buffer {} ({} declared)", what, b, k_.buffers.size()));
  }
  const std::string& varName(int v) const { return k_.vars[v].name; }

  void checkBuffer(int b) const {
    const BufferDecl& d = k_.buffers[b];
    if (d.numel < 0) bad(fmt::format("buffer {} has a negative size", d.name));
    if (d.inPlaceOf == -1) return;
    checkBufferIndex(d.inPlaceOf, "buffer " + d.name + "'s inPlaceOf");
    const BufferDecl& src = k_.buffers[d.inPlaceOf];
    if (d.inPlaceOf == b) bad(fmt::format("buffer {} is in place of itself", d.name));
    if (d.access == Access::Read)
      bad(fmt::format("buffer {} is read-only but in place of {}", d.name, src.name));
    if (src.dtype != d.dtype || src.numel != d.numel)
      bad(fmt::format("buffer {} ({}[{}]) is in place of {} ({}[{}]) of another type or size",
                      d.name, dtypeName(d.dtype), d.numel, src.name, dtypeName(src.dtype),
                      src.numel));
  }

  void classify(const std::vector<StmtP>& body) {
    for (const StmtP& s : body) {
      if (!s) bad("null statement");
      switch (s->kind) {
        case StmtKind::Loop:
          checkVarIndex(s->var, "a loop");
          if (role_[s->var] == Role::Local)
            bad(fmt::format("variable {} is both a loop variable and an assigned local",
                            varName(s->var)));
          role_[s->var] = Role::Loop;
          classify(s->body);
          break;
        case StmtKind::Assign:
          checkVarIndex(s->var, "an assignment");
          if (role_[s->var] == Role::Loop)
            bad(fmt::format("assignment to loop variable {}", varName(s->var)));
          role_[s->var] = Role::Local;
          break;
        case StmtKind::Store:
          break;
        case StmtKind::If:
          classify(s->body);
          classify(s->elseBody);
          break;
      }
    }
  }

  void stmts(const std::vector<StmtP>& body) {
    for (const StmtP& s : body) stmt(*s);
  }

  void stmt(const Stmt& s) {
    checked_.clear();
    switch (s.kind) {
      case StmtKind::Loop: {
        if (k_.vars[s.var].type != DType::i64)
          bad(fmt::format("loop variable {} must be i64, got {}", varName(s.var),
                          dtypeName(k_.vars[s.var].type)));
        if (isBound(s.var))
          bad(fmt::format("loop variable {} is bound twice in one nest", varName(s.var)));
        if (s.extent < 0) bad(fmt::format("loop over {} has a negative extent", varName(s.var)));
        if (s.loop == LoopKind::Unroll && s.unroll < 1)
          bad(fmt::format("loop over {} is unrolled by {}", varName(s.var), s.unroll));
        bound_.push_back(s.var);
        stmts(s.body);
        bound_.pop_back();
        return;
      }
      case StmtKind::Store: {
        checkBufferIndex(s.buffer, "a store");
        const BufferDecl& d = k_.buffers[s.buffer];
        if (s.args.size() != 2) bad("a store needs {index, value}");
        if (d.access == Access::Read) bad(fmt::format("store to read-only buffer {}", d.name));
        indexExpr(s.args[0], "store to " + d.name);
        DType t = expr(s.args[1]);
        if (t != d.dtype)
          bad(fmt::format("store of {} to buffer {} of {}", dtypeName(t), d.name,
                          dtypeName(d.dtype)));
        return;
      }
      case StmtKind::Assign: {
        if (s.args.size() != 1) bad("an assignment needs {value}");
        DType t = expr(s.args[0]);
        if (t != k_.vars[s.var].type)
          bad(fmt::format("assignment of {} to {} of {}", dtypeName(t), varName(s.var),
                          dtypeName(k_.vars[s.var].type)));
        assigned_[s.var] = true;
        return;
      }
      case StmtKind::If: {
        if (s.args.size() != 1) bad("an if needs {cond}");
        if (expr(s.args[0]) != DType::boolean) bad("if condition is not bool");
        stmts(s.body);
        stmts(s.elseBody);
        return;
      }
    }
  }

  bool isBound(int v) const {
    for (int b : bound_)
      if (b == v) return true;
    return false;
  }

  void indexExpr(const ExprP& e, const std::string& what) {
    if (expr(e) != DType::i64) bad(what + ": the index is not i64");
  }

  void arity(const Expr& e, size_t n, std::string_view what) const {
    if (e.args.size() != n)
      bad(fmt::format("{} needs {} operand(s), has {}", what, n, e.args.size()));
  }

  // Expressions are DAGs: each node is checked once per statement (what a check depends
  // on, the loop variables in scope and the locals assigned, is fixed within one).
  DType expr(const ExprP& ep) {
    if (!ep) bad("null expression");
    if (checked_.contains(ep.get())) return ep->type;
    DType t = exprUncached(*ep);
    checked_.insert(ep.get());
    return t;
  }

  DType exprUncached(const Expr& e) {
    DType t = e.type;
    switch (e.kind) {
      case ExprKind::Const:
        arity(e, 0, "a constant");
        break;
      case ExprKind::Var:
        arity(e, 0, "a variable");
        checkVarIndex(e.var, "an expression");
        if (k_.vars[e.var].type != t)
          bad(fmt::format("variable {} read with the wrong type", varName(e.var)));
        if (role_[e.var] == Role::Loop && !isBound(e.var))
          bad(fmt::format("loop variable {} used outside its loop", varName(e.var)));
        if (role_[e.var] != Role::Loop && !assigned_[e.var])
          bad(fmt::format("local {} read before it is assigned", varName(e.var)));
        break;
      case ExprKind::Load: {
        arity(e, 1, "a load");
        checkBufferIndex(e.buffer, "a load");
        const BufferDecl& d = k_.buffers[e.buffer];
        if (t != d.dtype) bad(fmt::format("load from {} typed {}", d.name, dtypeName(t)));
        indexExpr(e.args[0], "load from " + d.name);
        break;
      }
      case ExprKind::Unary:
        arity(e, 1, unaryName(e.unary));
        if (unaryResult(e.unary, expr(e.args[0])) != t)
          bad(fmt::format("{} has the wrong type", unaryName(e.unary)));
        break;
      case ExprKind::Binary: {
        arity(e, 2, binaryName(e.binary));
        DType a = expr(e.args[0]);
        DType b = expr(e.args[1]);
        if (binaryResult(e.binary, a, b) != t)
          bad(fmt::format("{} has the wrong type", binaryName(e.binary)));
        break;
      }
      case ExprKind::Select:
        arity(e, 3, "select");
        if (expr(e.args[0]) != DType::boolean) bad("select condition is not bool");
        if (expr(e.args[1]) != t || expr(e.args[2]) != t)
          bad("select arms do not have the select's type");
        break;
      case ExprKind::Cast:
        arity(e, 1, "cast");
        expr(e.args[0]);
        break;
    }
    return t;
  }

  const Kernel& k_;
  std::vector<Role> role_;
  std::vector<int> bound_;      // loop variables in scope, outermost first
  std::vector<bool> assigned_;  // locals assigned so far in program order
  std::unordered_set<const Expr*> checked_;
};

}  // namespace

void verify(const Kernel& k) {
  try {
    Verifier(k).run();
  } catch (const std::logic_error& e) {
    std::string msg = e.what();
    // Builder checks reused by the verifier name no kernel; add it.
    if (msg.find("kernel " + k.name) == std::string::npos)
      msg.insert(std::string_view("kernel IR: ").size(), fmt::format("kernel {}: ", k.name));
    throw std::logic_error(msg);
  }
}

// ---- print ------------------------------------------------------------------------------

namespace {

std::string_view accessName(Access a) {
  switch (a) {
    case Access::Read:
      return "read";
    case Access::Write:
      return "write";
    case Access::ReadWrite:
      return "readwrite";
  }
  return "?";
}

// Binding strength for parenthesizing infix operators.
int precedence(const Expr& e) {
  if (e.kind != ExprKind::Binary) return 100;
  switch (e.binary) {
    case BinaryOp::Mul:
    case BinaryOp::Div:
    case BinaryOp::Rem:
      return 10;
    case BinaryOp::Add:
    case BinaryOp::Sub:
      return 9;
    case BinaryOp::Shl:
    case BinaryOp::Shr:
      return 8;
    case BinaryOp::Lt:
    case BinaryOp::Le:
    case BinaryOp::Gt:
    case BinaryOp::Ge:
      return 7;
    case BinaryOp::Eq:
    case BinaryOp::Ne:
      return 6;
    case BinaryOp::And:
      return 5;
    case BinaryOp::Xor:
      return 4;
    case BinaryOp::Or:
      return 3;
    case BinaryOp::Pow:
    case BinaryOp::Max:
    case BinaryOp::Min:
      return 100;  // printed as calls
  }
  return 100;
}

class Printer {
 public:
  explicit Printer(const Kernel& k) : k_(k) {}

  std::string run() {
    out_ += fmt::format("kernel {}(", k_.name);
    for (size_t b = 0; b < k_.buffers.size(); ++b) {
      const BufferDecl& d = k_.buffers[b];
      out_ += fmt::format("{}{}: {}[{}] {}", b ? ", " : "", d.name, dtypeName(d.dtype), d.numel,
                          accessName(d.access));
      if (d.inPlaceOf >= 0 && d.inPlaceOf < static_cast<int>(k_.buffers.size()))
        out_ += " inplace(" + k_.buffers[d.inPlaceOf].name + ")";
    }
    out_ += fmt::format(") cost {}", k_.costPerIteration);
    if (k_.vectorInterleave > 0) out_ += fmt::format(" interleave {}", k_.vectorInterleave);
    out_ += " {\n";
    for (size_t v = 0; v < k_.vars.size(); ++v) {
      if (static_cast<int>(v) == k_.parallelVar || isLoopVar(k_.body, static_cast<int>(v)))
        continue;
      out_ += fmt::format("  local {}: {}\n", k_.vars[v].name, dtypeName(k_.vars[v].type));
    }
    out_ += fmt::format("  parallel {} in [0, {}) {{\n",
                        k_.parallelVar >= 0 ? var(k_.parallelVar) : "_", k_.parallelExtent);
    stmts(k_.body, 2);
    out_ += "  }\n}\n";
    return std::move(out_);
  }

 private:
  static bool isLoopVar(const std::vector<StmtP>& body, int v) {
    for (const StmtP& s : body) {
      if (s->kind == StmtKind::Loop && (s->var == v || isLoopVar(s->body, v))) return true;
      if (s->kind == StmtKind::If && (isLoopVar(s->body, v) || isLoopVar(s->elseBody, v)))
        return true;
    }
    return false;
  }

  std::string var(int v) const {
    if (v >= 0 && v < static_cast<int>(k_.vars.size())) return k_.vars[v].name;
    return fmt::format("v{}", v);
  }
  std::string buf(int b) const {
    if (b >= 0 && b < static_cast<int>(k_.buffers.size())) return k_.buffers[b].name;
    return fmt::format("b{}", b);
  }

  void stmts(const std::vector<StmtP>& body, int depth) {
    for (const StmtP& s : body) stmt(*s, depth);
  }

  void stmt(const Stmt& s, int depth) {
    std::string pad(2 * depth, ' ');
    bindShared(s, pad);
    switch (s.kind) {
      case StmtKind::Loop: {
        std::string kind;
        switch (s.loop) {
          case LoopKind::Serial:
            break;
          case LoopKind::Vector:
            kind = "vector ";
            break;
          case LoopKind::Unroll:
            kind = fmt::format("unroll({}) ", s.unroll);
            break;
        }
        out_ += fmt::format("{}{}for {} in [0, {}) {{\n", pad, kind, var(s.var), s.extent);
        stmts(s.body, depth + 1);
        out_ += pad + "}\n";
        return;
      }
      case StmtKind::Store:
        out_ +=
            fmt::format("{}{}[{}] = {}\n", pad, buf(s.buffer), expr(*s.args[0]), expr(*s.args[1]));
        return;
      case StmtKind::Assign:
        out_ += fmt::format("{}{} = {}\n", pad, var(s.var), expr(*s.args[0]));
        return;
      case StmtKind::If:
        out_ += fmt::format("{}if {} {{\n", pad, expr(*s.args[0]));
        stmts(s.body, depth + 1);
        if (!s.elseBody.empty()) {
          out_ += pad + "} else {\n";
          stmts(s.elseBody, depth + 1);
        }
        out_ += pad + "}\n";
        return;
    }
  }

  // An operand of an infix operator, parenthesized when it binds more loosely (or equally
  // on the right, since - and / are not associative).
  std::string operand(const Expr& e, int prec, bool right) {
    std::string s = expr(e);
    int p = names_.contains(&e) ? 100 : precedence(e);
    return p < prec || (right && p == prec) ? "(" + s + ")" : s;
  }

  static std::string floatText(double v, DType t) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    std::string s =
        t == DType::f64 ? fmt::format("{}", v) : fmt::format("{}", static_cast<float>(v));
    if (s.find_first_of(".en") == std::string::npos) s += ".0";
    return s;
  }

  // A value computed once and used more than once in a statement (expressions are DAGs)
  // prints as `let tN = ...` before it, so fused kernels print in linear size. Index
  // arithmetic (i64) and leaves stay inline, where they read best.
  void bindShared(const Stmt& s, const std::string& pad) {
    names_.clear();
    std::unordered_map<const Expr*, int> uses;
    std::function<void(const Expr&)> count = [&](const Expr& e) {
      if (uses[&e]++ > 0) return;
      for (const auto& a : e.args) count(*a);
    };
    for (const auto& a : s.args) count(*a);
    std::unordered_set<const Expr*> done;
    std::function<void(const Expr&)> bind = [&](const Expr& e) {
      if (!done.insert(&e).second) return;
      for (const auto& a : e.args) bind(*a);
      const bool leaf =
          e.kind == ExprKind::Const || e.kind == ExprKind::Var || e.kind == ExprKind::Load;
      if (uses[&e] > 1 && !leaf && e.type != DType::i64) {
        std::string name = fmt::format("t{}", nextLet_++);
        out_ += fmt::format("{}let {} = {}\n", pad, name, expr(e));
        names_[&e] = std::move(name);
      }
    };
    for (const auto& a : s.args) bind(*a);
  }

  std::string expr(const Expr& e) {
    if (auto it = names_.find(&e); it != names_.end()) return it->second;
    switch (e.kind) {
      case ExprKind::Const:
        if (e.type == DType::f32) return floatText(e.f, e.type);
        if (isFloat(e.type)) return floatText(e.f, e.type) + std::string(dtypeName(e.type));
        if (e.type == DType::boolean) return e.i ? "true" : "false";
        return e.type == DType::i64 ? fmt::format("{}", e.i)
                                    : fmt::format("{}{}", e.i, dtypeName(e.type));
      case ExprKind::Var:
        return var(e.var);
      case ExprKind::Load:
        return fmt::format("{}[{}]", buf(e.buffer), expr(*e.args[0]));
      case ExprKind::Unary:
        return fmt::format("{}({})", unaryName(e.unary), expr(*e.args[0]));
      case ExprKind::Binary: {
        const Expr& a = *e.args[0];
        const Expr& b = *e.args[1];
        int p = precedence(e);
        if (p == 100) return fmt::format("{}({}, {})", binaryName(e.binary), expr(a), expr(b));
        return fmt::format("{} {} {}", operand(a, p, false), binaryName(e.binary),
                           operand(b, p, true));
      }
      case ExprKind::Select:
        return fmt::format("select({}, {}, {})", expr(*e.args[0]), expr(*e.args[1]),
                           expr(*e.args[2]));
      case ExprKind::Cast:
        return fmt::format("{}({})", dtypeName(e.type), expr(*e.args[0]));
    }
    return "?";
  }

  const Kernel& k_;
  std::string out_;
  std::unordered_map<const Expr*, std::string> names_;  // the current statement's lets
  int nextLet_ = 0;
};

}  // namespace

std::string print(const Kernel& k) { return Printer(k).run(); }

}  // namespace tgc::codegen::kir
