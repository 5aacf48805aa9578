#include "codegen/cuda/cuda_emitter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "codegen/cuda/cuda_analysis.h"

namespace tgc::codegen::cuda {

namespace {

using kir::BinaryOp;
using kir::Expr;
using kir::ExprKind;
using kir::Stmt;
using kir::StmtKind;
using kir::UnaryOp;

constexpr const char* kPreamble =
#include "codegen/cuda/cuda_preamble.cu.inc"
    ;

bool isComputeFloat(DType t) { return t == DType::f32 || t == DType::f64; }
bool isStorageFloat(DType t) { return t == DType::bf16 || t == DType::f16; }

// C++ types: in registers, and of a buffer's elements.
const char* regType(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::bf16:
    case DType::f16: return "unsigned short";
    case DType::i32: return "int";
    case DType::i64: return "long long";
    case DType::boolean: return "bool";
  }
  throw std::logic_error("bad dtype");
}

const char* memType(DType t) { return t == DType::boolean ? "unsigned char" : regType(t); }

// Shortest text that reads back as the same float/double, as a C++ literal.
std::string floatLiteral(double v, DType t) {
  const bool f32 = t == DType::f32;
  if (std::isnan(v)) return f32 ? "__int_as_float(0x7fc00000)" : "__longlong_as_double(0x7ff8000000000000LL)";
  if (std::isinf(v)) {
    if (f32) return v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
    return v > 0 ? "__longlong_as_double(0x7ff0000000000000LL)"
                 : "__longlong_as_double((long long)0xfff0000000000000ULL)";
  }
  std::string s = f32 ? fmt::format("{}", static_cast<float>(v)) : fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return f32 ? s + "f" : s;
}

std::string intLiteral(int64_t v, DType t) {
  if (t == DType::i32) {
    auto x = static_cast<int32_t>(v);
    if (x == std::numeric_limits<int32_t>::min()) return "(-2147483647 - 1)";
    return fmt::format("{}", x);
  }
  if (v == std::numeric_limits<int64_t>::min()) return "(-9223372036854775807LL - 1)";
  return fmt::format("{}LL", v);
}

// A C identifier from a value or variable name ("enc.0.attn" -> "enc_0_attn").
std::string identifier(const std::string& name) {
  std::string out;
  for (char ch : name)
    out += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') ? ch : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "v" + out;
  return out;
}

bool reservedName(const std::string& s) {
  static const std::set<std::string> words{
      "auto",   "bool",   "break", "case",     "char",     "const",  "continue", "default",
      "do",     "double", "else",  "enum",     "extern",   "float",  "for",      "goto",
      "if",     "int",    "long",  "register", "return",   "short",  "signed",   "sizeof",
      "static", "struct", "switch", "typedef", "union",    "unsigned", "void",   "volatile",
      "while",  "true",   "false", "begin",    "end",      "new",    "delete",   "this",
      "class",  "template", "namespace", "operator", "private", "public", "friend", "asm",
      "inline", "try",    "catch", "throw",    "using",    "virtual", "mutable", "export"};
  // b<digit>... and t<digits> are the buffer parameters' and temporaries' names.
  auto digitAt = [&](size_t i) { return s.size() > i && std::isdigit(static_cast<unsigned char>(s[i])); };
  const bool tempLike = s.size() > 1 && s[0] == 't' &&
                        s.find_first_not_of("0123456789", 1) == std::string::npos;
  return words.count(s) > 0 || s.starts_with("tgc_") || s.starts_with("__") || s == "p_" || s == "f_" || s == "n_" ||
         (s[0] == 'b' && digitAt(1)) || tempLike;
}

class Printer {
 public:
  explicit Printer(const kir::Kernel& k) : k_(k), a_(analyze(k)) {}

  std::string run(LaunchGeometry* launch);

 private:
  // ---- statements ----
  void line(const std::string& text) {
    out_.append(static_cast<size_t>(indent_) * 2, ' ');
    out_ += text;
    out_ += '\n';
    if (text != "__syncthreads();") synced_ = false;
  }
  void open(const std::string& text) {
    line(text + " {");
    ++indent_;
    synced_ = false;
  }
  void close() {
    --indent_;
    line("}");
    synced_ = false;
  }
  void sync() {
    if (!synced_) line("__syncthreads();");
    synced_ = true;
  }

  void flatKernel(const std::string& p);
  void flatNest(const KernelAnalysis::FlatNest& nest);
  void stmts(const std::vector<kir::StmtP>& body);
  void stmt(const Stmt& s);
  void loop(const Stmt& s);
  void spreadLoop(const Stmt& s, const SpreadLoop& info);
  void storeStmt(const Stmt& s);
  bool uniform() const { return a_.mapping == Mapping::BlockPerIteration && !inSpread_; }

  // ---- expressions ----
  void bindShared(const Stmt& s);
  std::string expr(const Expr& e, bool index = false);
  std::string exprUncached(const Expr& e, bool index);
  std::string unary(const Expr& e, bool index);
  std::string binary(const Expr& e, bool index);
  std::string cast(const std::string& x, DType from, DType to);
  std::string var(int v) const { return varNames_[v]; }
  std::string buf(int b) const { return bufNames_[b]; }

  void nameEverything();

  const kir::Kernel& k_;
  KernelAnalysis a_;
  std::string out_;
  int indent_ = 0;
  bool synced_ = false;   // the last line printed is a __syncthreads()
  bool inSpread_ = false;  // inside a loop spread over the block's threads
  std::vector<std::string> varNames_, bufNames_;
  std::set<std::string> taken_;
  std::unordered_map<const Expr*, std::string> temps_;  // the current statement's shared values
  int nextTemp_ = 0;
};

void Printer::nameEverything() {
  for (size_t i = 0; i < k_.buffers.size(); ++i) {
    bufNames_.push_back(fmt::format("b{}_{}", i, identifier(k_.buffers[i].name)));
    taken_.insert(bufNames_.back());
  }
  for (size_t v = 0; v < k_.vars.size(); ++v) {
    std::string n = identifier(k_.vars[v].name);
    if (reservedName(n) || taken_.count(n)) n = fmt::format("{}_{}", n, v);
    while (taken_.count(n)) n += "_";
    taken_.insert(n);
    varNames_.push_back(n);
  }
}

std::string Printer::run(LaunchGeometry* launch) {
  nameEverything();
  if (launch) *launch = a_.launch;
  std::vector<bool> shared(k_.buffers.size(), false);
  for (size_t i = 0; i < k_.buffers.size(); ++i)
    if (int src = k_.buffers[i].inPlaceOf; src >= 0) shared[i] = shared[src] = true;

  const bool block = a_.mapping == Mapping::BlockPerIteration;
  const bool flat = a_.mapping == Mapping::ThreadPerElement;
  out_ += fmt::format(
      "// kernel {}: parallel [0, {}), {}, {} threads per block\n", k_.name, k_.parallelExtent,
      block ? "one block per iteration"
            : flat ? fmt::format("one thread per element ({} per iteration)",
                                 a_.launch.elementsPerIteration)
                   : "one thread per iteration",
      a_.launch.blockThreads);
  out_ += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}(\n",
                      a_.launch.blockThreads, k_.name);
  for (size_t i = 0; i < k_.buffers.size(); ++i) {
    const kir::BufferDecl& d = k_.buffers[i];
    out_ += fmt::format("    {}{}* {}{},  // {} {}[{}]\n",
                        d.access == kir::Access::Read ? "const " : "", memType(d.dtype),
                        shared[i] ? "" : "__restrict__ ", buf(static_cast<int>(i)), d.name,
                        dtypeName(d.dtype), d.numel);
  }
  out_ += "    long long begin, long long end) {\n";
  indent_ = 1;
  // Locals (accumulators and temporaries) live across loop iterations, so they are
  // declared once per thread; the zero only keeps the compiler from warning.
  for (size_t v = 0; v < k_.vars.size(); ++v)
    if (a_.isLocal[v])
      line(fmt::format("{} {} = {};", regType(k_.vars[v].type), var(static_cast<int>(v)),
                       k_.vars[v].type == DType::boolean ? "false" : "0"));
  const std::string p = k_.parallelVar >= 0 ? var(k_.parallelVar) : "p_";
  if (flat) {
    flatKernel(p);
    indent_ = 0;
    out_ += "}\n";
    return out_;
  }
  if (block)
    open(fmt::format("for (long long {0} = begin + blockIdx.x; {0} < end; {0} += gridDim.x)", p));
  else
    open(fmt::format(
        "for (long long {0} = begin + (long long)blockIdx.x * blockDim.x + threadIdx.x; {0} < "
        "end; {0} += (long long)gridDim.x * blockDim.x)",
        p));
  stmts(k_.body);
  close();
  indent_ = 0;
  out_ += "}\n";
  return out_;
}

// One grid-stride index f_ over every element of [begin, end) x the nest's loops; the
// parallel index and each loop variable are its digits, the innermost fastest.
void Printer::flatKernel(const std::string& p) {
  const int64_t inner = a_.launch.elementsPerIteration;
  line(fmt::format("const long long n_ = (end - begin) * {}LL;", inner));
  open("for (long long f_ = (long long)blockIdx.x * blockDim.x + threadIdx.x; f_ < n_; f_ += "
       "(long long)gridDim.x * blockDim.x)");
  // Digits nothing reads are left out (NVRTC warns about unused variables).
  if (k_.parallelVar >= 0 && a_.isRead[k_.parallelVar])
    line(fmt::format("const long long {} = begin + f_ / {}LL;", p, inner));
  if (!a_.flatIf) {
    flatNest(a_.flat[0]);
  } else {
    bindShared(*a_.flatIf);
    open(fmt::format("if ({})", expr(*a_.flatIf->args[0])));
    flatNest(a_.flat[0]);
    --indent_;
    line("} else {");
    ++indent_;
    flatNest(a_.flat[1]);
    close();
  }
  close();
}

// A nest's loop variables as digits of f_ (each level as wide as the widest nest's), the
// nest's statements guarded where its loops are shorter.
void Printer::flatNest(const KernelAnalysis::FlatNest& nest) {
  int64_t stride = a_.launch.elementsPerIteration;
  std::string guard;
  for (size_t d = 0; d < nest.loops.size(); ++d) {
    const Stmt& l = *nest.loops[d];
    stride /= a_.flatExtents[d];
    const std::string quotient = stride == 1 ? "f_" : fmt::format("f_ / {}LL", stride);
    const std::string digit = fmt::format("{} % {}LL", quotient, a_.flatExtents[d]);
    if (a_.isRead[l.var]) line(fmt::format("const long long {} = {};", var(l.var), digit));
    if (l.extent < a_.flatExtents[d])
      guard += fmt::format("{}{} < {}", guard.empty() ? "" : " && ",
                           a_.isRead[l.var] ? var(l.var) : "(" + digit + ")", l.extent);
  }
  if (guard.empty()) return stmts(*nest.body);
  open(fmt::format("if ({})", guard));
  stmts(*nest.body);
  close();
}

void Printer::stmts(const std::vector<kir::StmtP>& body) {
  for (const auto& s : body) stmt(*s);
}

void Printer::stmt(const Stmt& s) {
  switch (s.kind) {
    case StmtKind::Loop:
      if (auto it = a_.spread.find(&s); it != a_.spread.end() && uniform())
        return spreadLoop(s, it->second);
      return loop(s);
    case StmtKind::If:
      bindShared(s);
      open(fmt::format("if ({})", expr(*s.args[0])));
      stmts(s.body);
      if (!s.elseBody.empty()) {
        --indent_;
        line("} else {");
        ++indent_;
        synced_ = false;
        stmts(s.elseBody);
      }
      close();
      return;
    case StmtKind::Store:
      return storeStmt(s);
    case StmtKind::Assign:
      bindShared(s);
      line(fmt::format("{} = {};", var(s.var), expr(*s.args[0])));
      return;
  }
}

void Printer::loop(const Stmt& s) {
  if (s.extent == 0) return;
  const std::string v = var(s.var);
  if (s.loop == kir::LoopKind::Unroll && s.unroll > 1) line(fmt::format("#pragma unroll {}", s.unroll));
  open(fmt::format("for (long long {0} = 0; {0} < {1}; ++{0})", v, s.extent));
  stmts(s.body);
  close();
}

// The loop's iterations divided among the block's threads; each reduction accumulates a
// per-thread share from the identity, then the block combines the shares.
void Printer::spreadLoop(const Stmt& s, const SpreadLoop& info) {
  if (s.extent == 0) return;
  if (info.syncBefore) sync();
  std::vector<std::string> saved;
  for (const Reduction& r : info.reductions) {
    saved.push_back(varNames_[r.var]);
    std::string part = var(r.var) + "_part";
    while (taken_.count(part)) part += "_";
    taken_.insert(part);
    line(fmt::format("{} {} = {};", regType(k_.vars[r.var].type), part,
                     reductionIdentity(r.op, k_.vars[r.var].type)));
    varNames_[r.var] = part;
  }
  const std::string v = var(s.var);
  open(fmt::format("for (long long {0} = threadIdx.x; {0} < {1}; {0} += blockDim.x)", v, s.extent));
  inSpread_ = true;
  stmts(s.body);
  inSpread_ = false;
  close();
  for (size_t i = 0; i < info.reductions.size(); ++i) {
    const Reduction& r = info.reductions[i];
    const std::string part = varNames_[r.var];
    varNames_[r.var] = saved[i];
    const char* functor = r.op == BinaryOp::Add   ? "tgc_op_add"
                          : r.op == BinaryOp::Mul ? "tgc_op_mul"
                          : r.op == BinaryOp::Max ? "tgc_op_max"
                                                  : "tgc_op_min";
    line(fmt::format("{0} = {1}()({0}, tgc_block_reduce({2}, {1}()));", var(r.var), functor, part));
  }
  if (info.syncAfter) sync();
}

void Printer::storeStmt(const Stmt& s) {
  const bool guarded = uniform();
  const bool fence = guarded && a_.storeNeedsSync(s.buffer);
  if (fence) sync();
  if (guarded) open("if (threadIdx.x == 0)");
  bindShared(s);
  std::string value = expr(*s.args[1]);
  if (k_.buffers[s.buffer].dtype == DType::boolean) value = fmt::format("(unsigned char){}", value);
  line(fmt::format("{}[{}] = {};", buf(s.buffer), expr(*s.args[0], /*index=*/true), value));
  if (guarded) close();
  if (fence) sync();
}

// A value used more than once in a statement becomes `const T tN = ...;` before it, so
// fused kernels print in linear size. Leaves and i64 index arithmetic stay inline.
void Printer::bindShared(const Stmt& s) {
  temps_.clear();
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
    const bool leaf = e.kind == ExprKind::Const || e.kind == ExprKind::Var;
    if (uses[&e] > 1 && !leaf && e.type != DType::i64) {
      std::string name = fmt::format("t{}", nextTemp_++);
      line(fmt::format("const {} {} = {};", regType(e.type), name, expr(e)));
      temps_[&e] = std::move(name);
    }
  };
  for (const auto& a : s.args) bind(*a);
}

std::string Printer::expr(const Expr& e, bool index) {
  if (auto it = temps_.find(&e); it != temps_.end()) return it->second;
  return exprUncached(e, index);
}

std::string Printer::exprUncached(const Expr& e, bool index) {
  switch (e.kind) {
    case ExprKind::Const:
      switch (e.type) {
        case DType::f32:
        case DType::f64:
          return floatLiteral(e.f, e.type);
        case DType::bf16:
          return fmt::format("(unsigned short)0x{:04x}", floatToBF16(static_cast<float>(e.f)));
        case DType::f16:
          return fmt::format("(unsigned short)0x{:04x}", floatToF16(static_cast<float>(e.f)));
        case DType::i32:
        case DType::i64:
          return intLiteral(e.i, e.type);
        case DType::boolean:
          return e.i ? "true" : "false";
      }
      throw std::logic_error("bad dtype");
    case ExprKind::Var:
      return var(e.var);
    case ExprKind::Load: {
      std::string load = fmt::format("{}[{}]", buf(e.buffer), expr(*e.args[0], /*index=*/true));
      // Bool bytes other than 0 read as true, as in the interpreter.
      return e.type == DType::boolean ? fmt::format("({} != 0)", load) : load;
    }
    case ExprKind::Unary:
      return unary(e, index);
    case ExprKind::Binary:
      return binary(e, index);
    case ExprKind::Select:
      return fmt::format("({} ? {} : {})", expr(*e.args[0]), expr(*e.args[1], index),
                         expr(*e.args[2], index));
    case ExprKind::Cast:
      return cast(expr(*e.args[0]), e.args[0]->type, e.type);
  }
  throw std::logic_error("bad expression kind");
}

std::string Printer::unary(const Expr& e, bool index) {
  const DType t = e.type;
  const bool f32 = t == DType::f32;
  const std::string x = expr(*e.args[0], index);
  switch (e.unary) {
    case UnaryOp::Neg:
      if (isComputeFloat(t)) return fmt::format("(-{})", x);
      return index ? fmt::format("(-{})", x) : fmt::format("tgc_neg({})", x);
    case UnaryOp::Abs:
      return isComputeFloat(t) ? fmt::format("{}({})", f32 ? "fabsf" : "fabs", x)
                               : fmt::format("tgc_iabs({})", x);  // abs(MIN) = MIN
    case UnaryOp::Exp:
      return fmt::format("{}({})", f32 ? "expf" : "exp", x);
    case UnaryOp::Log:
      return fmt::format("{}({})", f32 ? "logf" : "log", x);
    case UnaryOp::Sqrt:
      return fmt::format("{}({})", f32 ? "sqrtf" : "sqrt", x);
    case UnaryOp::Rsqrt:  // 1 / sqrt(x), both correctly rounded, as on the CPU
      return f32 ? fmt::format("(1.0f / sqrtf({}))", x) : fmt::format("(1.0 / sqrt({}))", x);
    case UnaryOp::Tanh:
      return fmt::format("{}({})", f32 ? "tanhf" : "tanh", x);
    case UnaryOp::Erf:
      return fmt::format("{}({})", f32 ? "erff" : "erf", x);
    case UnaryOp::Not:
      return t == DType::boolean ? fmt::format("(!{})", x) : fmt::format("(~{})", x);
  }
  throw std::logic_error("bad unary op");
}

std::string Printer::binary(const Expr& e, bool index) {
  const DType t = e.args[0]->type;
  const bool fl = isComputeFloat(t);
  const bool isBool = t == DType::boolean;
  const std::string a = expr(*e.args[0], index);
  const std::string b = expr(*e.args[1], index);
  auto infix = [&](const char* op) { return fmt::format("({} {} {})", a, op, b); };
  auto call = [&](const char* fn) { return fmt::format("{}({}, {})", fn, a, b); };
  // Index arithmetic cannot overflow in a valid kernel (the CPU emitter's nsw), so it
  // prints as plain C++; other integer arithmetic wraps.
  const bool plainInt = index && t == DType::i64;
  const Expr& rhs = *e.args[1];
  const bool positiveConst = rhs.kind == ExprKind::Const && !fl && rhs.i > 0;
  switch (e.binary) {
    case BinaryOp::Add:
      return fl || plainInt ? infix("+") : call("tgc_add");
    case BinaryOp::Sub:
      return fl || plainInt ? infix("-") : call("tgc_sub");
    case BinaryOp::Mul:
      return fl || plainInt ? infix("*") : call("tgc_mul");
    case BinaryOp::Div:
      return fl || positiveConst ? infix("/") : call("tgc_div");
    case BinaryOp::Rem:
      return positiveConst ? infix("%") : call("tgc_rem");
    case BinaryOp::Pow:
      if (rhs.kind == ExprKind::Const && rhs.f == 2.0) return fmt::format("tgc_sq({})", a);
      return e.type == DType::f64 ? call("pow") : call("tgc_powf");
    case BinaryOp::Max:
      return call("tgc_max");
    case BinaryOp::Min:
      return call("tgc_min");
    // Float compares: C++'s are ordered except != (true with NaN), as the CPU emitter's.
    case BinaryOp::Eq: return infix("==");
    case BinaryOp::Ne: return infix("!=");
    case BinaryOp::Lt: return infix("<");
    case BinaryOp::Le: return infix("<=");
    case BinaryOp::Gt: return infix(">");
    case BinaryOp::Ge: return infix(">=");
    case BinaryOp::And:
      return infix(isBool ? "&&" : "&");
    case BinaryOp::Or:
      return infix(isBool ? "||" : "|");
    case BinaryOp::Xor:
      return infix(isBool ? "!=" : "^");
    case BinaryOp::Shl:
      return call("tgc_shl");
    case BinaryOp::Shr:
      return call("tgc_shr");
  }
  throw std::logic_error("bad binary op");
}

// The interpreter's casts (see the CPU emitter): float -> int truncates and saturates with
// NaN giving 0 (cvt.rzi, the __*2*_rz intrinsics); anything -> bool is != 0 (NaN is
// true); int -> f32 rounds once; int -> bf16/f16 goes through f64; int -> int wraps.
std::string Printer::cast(const std::string& x, DType from, DType to) {
  if (from == to) return x;
  if (isStorageFloat(from)) {
    std::string f = fmt::format("{}({})", from == DType::bf16 ? "tgc_bf16_to_f32" : "tgc_f16_to_f32", x);
    return cast(f, DType::f32, to);
  }
  if (isStorageFloat(to)) {
    const char* fn = to == DType::bf16 ? "tgc_f32_to_bf16" : "tgc_f32_to_f16";
    if (from == DType::f32) return fmt::format("{}({})", fn, x);
    if (from == DType::f64) return fmt::format("{}((float){})", fn, x);
    return cast(cast(x, from, DType::f64), DType::f64, to);
  }
  if (to == DType::boolean)
    return fmt::format("({} != {})", x, isComputeFloat(from) ? floatLiteral(0.0, from) : "0");
  if (from == DType::boolean)
    return isComputeFloat(to) ? fmt::format("({} ? {} : {})", x, floatLiteral(1.0, to), floatLiteral(0.0, to))
                              : fmt::format("({}){}", regType(to), x);
  if (isComputeFloat(from) && isComputeFloat(to)) return fmt::format("({}){}", regType(to), x);
  if (isComputeFloat(from)) {
    const char* src = from == DType::f32 ? "float" : "double";
    const char* dst = to == DType::i32 ? "int" : "ll";
    return fmt::format("__{}2{}_rz({})", src, dst, x);
  }
  return fmt::format("({}){}", regType(to), x);
}

}  // namespace

int64_t LaunchGeometry::gridBlocks(int64_t iterations) const {
  int64_t threads = iterations;
  if (mapping == Mapping::ThreadPerElement) threads *= elementsPerIteration;
  int64_t blocks = mapping == Mapping::BlockPerIteration
                       ? iterations
                       : (threads + blockThreads - 1) / blockThreads;
  return std::clamp<int64_t>(blocks, 1, kMaxGridBlocks);
}

std::string cudaPreamble() { return kPreamble; }

std::string kernelFunction(const kir::Kernel& k, LaunchGeometry* launch) {
  kir::verify(k);
  return Printer(k).run(launch);
}

CudaKernel emitCudaKernel(const kir::Kernel& k) {
  CudaKernel out;
  out.name = k.name;
  out.parallelExtent = k.parallelExtent;
  out.source = cudaPreamble() + "\n" + kernelFunction(k, &out.launch);
  return out;
}

}  // namespace tgc::codegen::cuda
