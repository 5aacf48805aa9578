// Kernel IR: the loop-nest language between Graph IR and machine code.
//
// One Kernel is one launch: a function over a list of buffers, run by the runtime as
//     for p in [begin, end):  body            (p is the kernel's parallel variable)
// where the runtime splits [0, parallelExtent) into chunks over its threads. Inside, the
// body is a tree of statements: loops with constant trip counts (serial, vectorized,
// unrolled), stores to buffers, assignments to scalar locals (accumulators) and ifs.
// Expressions are immutable trees, shared freely: constants, variables, loads with index
// expressions (in practice affine in the loop variables), arithmetic, selects and casts.
//
// Shapes are static (docs/design.md), so every trip count is a constant and every index
// an ordinary i64 expression; the emitters (LLVM for the CPU, CUDA later) print the same
// tree. A group of several graph ops lowers to one kernel by composing expressions: the
// value of an elementwise op at an index is an expression of its operands at that index.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace tgc::codegen::kir {

struct Expr;
struct Stmt;
using ExprP = std::shared_ptr<const Expr>;
using StmtP = std::shared_ptr<Stmt>;

enum class ExprKind { Const, Var, Load, Unary, Binary, Select, Cast };

enum class UnaryOp {
  Neg, Abs, Exp, Log, Sqrt, Rsqrt, Tanh, Erf,  // floats (Neg, Abs also ints)
  Not,                                         // bool: logical not; ints: bitwise not
};

enum class BinaryOp {
  Add, Sub, Mul, Div,  // Div: floats; ints divide toward zero
  Rem,                 // ints: remainder with the sign of the dividend
  Pow,                 // floats
  Max, Min,            // NaN-propagating for floats (as the interpreter)
  Eq, Ne, Lt, Le, Gt, Ge,  // result bool
  And, Or, Xor,        // bool: logical; ints: bitwise
  Shl, Shr,            // ints; Shr is a logical (unsigned) shift
};

// Every expression has a dtype. In registers bool is one bit; in buffers it is one byte.
// bf16 and f16 are storage types: loads of them should be cast to f32 before arithmetic.
struct Expr {
  ExprKind kind;
  DType type;
  double f = 0;       // Const of a float type
  int64_t i = 0;      // Const of an int or bool type
  int var = -1;       // Var: index into Kernel::vars
  int buffer = -1;    // Load: index into Kernel::buffers
  UnaryOp unary = UnaryOp::Neg;
  BinaryOp binary = BinaryOp::Add;
  // Load: {index (i64, in elements)}; Unary: {x}; Binary: {a, b}; Select: {cond, a, b};
  // Cast: {x}.
  std::vector<ExprP> args;
};

enum class StmtKind { Loop, Store, Assign, If };

enum class LoopKind {
  Serial,
  Vector,  // iterations are independent: vectorize across them (the innermost loop)
  Unroll,  // unroll by `unroll`
};

struct Stmt {
  StmtKind kind;
  // Loop: for (var = 0; var < extent; ++var) body
  int var = -1;          // Loop: its i64 variable; Assign: the local assigned
  int64_t extent = 0;
  LoopKind loop = LoopKind::Serial;
  int unroll = 0;        // LoopKind::Unroll: the factor
  std::vector<StmtP> body;      // Loop body; If: then-branch
  std::vector<StmtP> elseBody;  // If: else-branch
  int buffer = -1;       // Store
  // Store: {index, value}; Assign: {value}; If: {cond}.
  std::vector<ExprP> args;
};

enum class Access { Read, Write, ReadWrite };

struct BufferDecl {
  std::string name;  // the graph value it holds (for dumps and errors)
  DType dtype;
  int64_t numel;
  Access access;
  // The runtime may place this written buffer on the memory of the read buffer with this
  // index (parameters updated in place) when every element is read before it is written
  // at the same index. The emitter then drops `noalias` from both; -1: never shared.
  int inPlaceOf = -1;
};

// Loop variables (i64) and scalar locals share one numbering. A local must be assigned
// before it is read; its value lives across loop iterations (accumulators).
struct VarDecl {
  std::string name;
  DType type;
};

struct Kernel {
  std::string name;  // a C identifier carrying provenance: "enc_2_attn_softmax"
  std::vector<BufferDecl> buffers;
  std::vector<VarDecl> vars;
  int parallelVar = -1;        // i64 variable bound to the parallel index p
  int64_t parallelExtent = 1;  // p ranges over [0, parallelExtent)
  // Rough cost of one parallel iteration (in scalar operations), so the runtime can keep
  // small kernels on one thread.
  int64_t costPerIteration = 1;
  // How many vector iterations of each LoopKind::Vector loop run side by side (LLVM's
  // interleave count; 0 leaves it to LLVM). For bodies that are one long dependency chain
  // (a Philox draw: ten rounds of multiply, shift, xor), independent chains fill the
  // vector units while one waits for its multiply.
  int vectorInterleave = 0;
  std::vector<StmtP> body;

  int addVar(std::string varName, DType type) {
    vars.push_back({std::move(varName), type});
    return static_cast<int>(vars.size()) - 1;
  }
  int addBuffer(std::string bufName, DType dtype, int64_t n, Access access) {
    buffers.push_back({std::move(bufName), dtype, n, access});
    return static_cast<int>(buffers.size()) - 1;
  }
};

// The C ABI every emitted CPU kernel has: buffers[i] points at Kernel::buffers[i].
using KernelFn = void (*)(void* const* buffers, int64_t begin, int64_t end);

// ---- Builders (kernel_ir.cpp). They check operand types and throw std::logic_error. ----
ExprP constInt(int64_t v, DType type = DType::i64);
ExprP constFloat(double v, DType type = DType::f32);
ExprP constBool(bool v);
ExprP varRef(const Kernel& k, int var);
ExprP load(const Kernel& k, int buffer, ExprP index);
ExprP unary(UnaryOp op, ExprP x);
ExprP binary(BinaryOp op, ExprP a, ExprP b);  // a and b of one type
ExprP select(ExprP cond, ExprP a, ExprP b);
ExprP cast(ExprP x, DType to);  // no-op when x already has type `to`

// i64 index arithmetic that folds constants (so printed kernels stay readable).
ExprP add(ExprP a, ExprP b);
ExprP mul(ExprP a, ExprP b);
ExprP mul(ExprP a, int64_t b);

StmtP loop(int var, int64_t extent, std::vector<StmtP> body, LoopKind kind = LoopKind::Serial,
           int unroll = 0);
StmtP store(int buffer, ExprP index, ExprP value);
StmtP assign(int var, ExprP value);
StmtP ifThen(ExprP cond, std::vector<StmtP> thenBody, std::vector<StmtP> elseBody = {});

// Checks types, variable and buffer references, stores only to writable buffers, and
// loop variables bound only by their loop; throws std::logic_error naming the kernel.
void verify(const Kernel& k);

// Readable text, for dumps (`tgc compile --emit=kernel`) and golden tests.
std::string print(const Kernel& k);

}  // namespace tgc::codegen::kir
