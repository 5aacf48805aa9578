// The LLVM emitter: kernels compiled and run against the interpreter's semantics (every
// unary and binary op on every dtype, casts between all dtypes, loops of every kind,
// locals, ifs, split parallel ranges, in-place buffers), the IR it hands to LLVM, and the
// object cache.
#include <gtest/gtest.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "codegen/llvm_emitter.h"
#include "ir/tensor.h"

namespace tgc::codegen {
namespace {

using namespace kir;
namespace fs = std::filesystem;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

JitOptions noCache() {
  JitOptions o;
  o.useCache = false;
  return o;
}

Jit& sharedJit() {
  static Jit jit(noCache());
  return jit;
}

// Compiles k under a name unique in the shared JIT.
KernelFn compile(Kernel& k) {
  static int counter = 0;
  k.name += "_" + std::to_string(counter++);
  return compileKernels(sharedJit(), {&k})[0];
}

void run(KernelFn fn, const std::vector<Tensor*>& tensors, int64_t begin, int64_t end) {
  std::vector<void*> ptrs;
  for (Tensor* t : tensors) ptrs.push_back(t->data());
  fn(ptrs.data(), begin, end);
}

Tensor tensorOf(DType t, const std::vector<double>& v) {
  return Tensor(TensorType{t, {static_cast<int64_t>(v.size())}}, v);
}

// Same value: both NaN, or equal (with the sign of zero when `signedZero`).
bool sameValue(double got, double want, bool signedZero = true) {
  if (std::isnan(want)) return std::isnan(got);
  if (got != want) return false;
  return !signedZero || want != 0 || std::signbit(got) == std::signbit(want);
}

// Units in the last place of `v` in dtype t (f32 or f64), subnormal spacing below.
double ulpOf(double v, DType t) {
  const int mant = t == DType::f32 ? 23 : 52;
  const int minExp = t == DType::f32 ? -126 : -1022;
  int e = 0;
  std::frexp(v, &e);
  return std::ldexp(1.0, std::max(e - 1, minExp) - mant);
}

const std::vector<double>& floatInputs() {
  static const std::vector<double> v = {0.0,   -0.0,   1.0,   -1.0,   0.5,   -0.5,   2.5,    -3.75,
                                        0.1,   7.0,    100.0, -100.0, 1e-3,  1e-40,  -1e-42, 1e30,
                                        -1e30, 3.4e38, 88.7,  89.5,   -87.0, -104.0, 0.625,  0.9,
                                        1.5,   3.9,    10.0,  kInf,   -kInf, kNaN,   -kNaN};
  return v;
}

// ---- unary ----------------------------------------------------------------------------------

// An elementwise kernel over n elements, body(i): with i the parallel variable (one element
// per parallel iteration, scalar code) or, when `vectorLoop`, the variable of a vector loop
// inside one parallel iteration (the vectorized code and its scalar remainder).
void elementwise(Kernel& k, int64_t n, bool vectorLoop,
                 const std::function<std::vector<StmtP>(ExprP)>& body) {
  k.parallelVar = k.addVar("p", DType::i64);
  if (!vectorLoop) {
    k.parallelExtent = n;
    k.body = body(varRef(k, k.parallelVar));
    return;
  }
  k.parallelExtent = 1;
  int i = k.addVar("i", DType::i64);
  k.body = {loop(i, n, body(varRef(k, i)), LoopKind::Vector)};
}

struct UnaryCase {
  UnaryOp op;
  double (*ref)(double);
  int ulpsF32;  // allowed error of f32 results (f64 ones must be exact: libm or IEEE)
};

// y[p] = op(x[p]) for every input.
Tensor runUnary(UnaryOp op, DType t, const Tensor& x, bool vectorLoop) {
  Kernel k;
  k.name = "unary";
  const int n = static_cast<int>(x.numel());
  int xb = k.addBuffer("x", t, n, Access::Read);
  int yb = k.addBuffer("y", t, n, Access::Write);
  elementwise(k, n, vectorLoop,
              [&](ExprP i) { return std::vector<StmtP>{store(yb, i, unary(op, load(k, xb, i)))}; });
  KernelFn fn = compile(k);
  Tensor in = x;
  Tensor out(x.type());
  run(fn, {&in, &out}, 0, k.parallelExtent);
  return out;
}

// Every op test runs twice: scalar code (the parallel loop) and vectorized code (a vector
// loop; its inputs are long enough for full vectors and a remainder).
class EmitterOps : public ::testing::TestWithParam<bool> {};

INSTANTIATE_TEST_SUITE_P(Code, EmitterOps, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return std::string(p.param ? "VectorLoop" : "Scalar");
                         });

template <class T>
std::vector<T> repeated(const std::vector<T>& v, int times) {
  std::vector<T> r;
  for (int i = 0; i < times; ++i) r.insert(r.end(), v.begin(), v.end());
  return r;
}

TEST_P(EmitterOps, UnaryFloat) {
  const UnaryCase cases[] = {
      {UnaryOp::Neg, [](double x) { return -x; }, 0},
      {UnaryOp::Abs, [](double x) { return std::fabs(x); }, 0},
      {UnaryOp::Exp, [](double x) { return std::exp(x); }, 2},
      {UnaryOp::Log, [](double x) { return std::log(x); }, 2},
      {UnaryOp::Sqrt, [](double x) { return std::sqrt(x); }, 0},
      {UnaryOp::Rsqrt, [](double x) { return 1.0 / std::sqrt(x); }, 1},
      {UnaryOp::Tanh, [](double x) { return std::tanh(x); }, 2},
      {UnaryOp::Erf, [](double x) { return std::erf(x); }, 2},
  };
  for (DType t : {DType::f32, DType::f64}) {
    Tensor x = tensorOf(t, floatInputs());
    for (const UnaryCase& c : cases) {
      Tensor y = runUnary(c.op, t, x, GetParam());
      for (int64_t i = 0; i < x.numel(); ++i) {
        Tensor want(TensorType{t, {1}});
        want.setF(0, c.ref(x.getF(i)));  // computed in double, rounded once: the interpreter
        double w = want.getF(0), g = y.getF(i);
        const int ulps = t == DType::f32 ? c.ulpsF32 : 0;
        bool ok = ulps == 0 || std::isnan(w) || std::isinf(w)
                      ? sameValue(g, w, c.op != UnaryOp::Rsqrt)
                      : std::fabs(g - w) <= ulps * ulpOf(w, t);
        EXPECT_TRUE(ok) << dtypeName(t) << " op " << static_cast<int>(c.op) << " of " << x.getF(i)
                        << ": got " << g << ", want " << w;
      }
    }
  }
}

TEST_P(EmitterOps, UnaryIntAndBool) {
  const std::vector<double> vals =
      repeated<double>({0, 1, -1, 7, -13, 2147483647.0, -2147483648.0}, 5);
  for (DType t : {DType::i32, DType::i64}) {
    Tensor x = tensorOf(t, vals);
    x.setI(x.numel() - 1, t == DType::i32 ? INT32_MIN : INT64_MIN);
    Tensor neg = runUnary(UnaryOp::Neg, t, x, GetParam());
    Tensor abs = runUnary(UnaryOp::Abs, t, x, GetParam());
    Tensor inv = runUnary(UnaryOp::Not, t, x, GetParam());
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t v = x.getI(i);
      auto wrap = [&](uint64_t r) {
        return t == DType::i32 ? static_cast<int64_t>(static_cast<int32_t>(r))
                               : static_cast<int64_t>(r);
      };
      int64_t negv = wrap(0 - static_cast<uint64_t>(v));
      EXPECT_EQ(neg.getI(i), negv) << v;
      EXPECT_EQ(abs.getI(i), v < 0 ? negv : v) << v;  // abs(MIN) wraps to MIN
      EXPECT_EQ(inv.getI(i), wrap(~static_cast<uint64_t>(v))) << v;
    }
  }
  Tensor b = tensorOf(DType::boolean, repeated<double>({0, 1, 1, 0}, 20));
  Tensor nb = runUnary(UnaryOp::Not, DType::boolean, b, GetParam());
  for (int64_t i = 0; i < b.numel(); ++i) {
    EXPECT_EQ(nb.getI(i), b.getI(i) ? 0 : 1);
    EXPECT_EQ(nb.as<uint8_t>()[i], b.getI(i) ? 0 : 1) << "bool bytes are 0 or 1";
  }
}

// ---- binary ---------------------------------------------------------------------------------

// out[p] = a[p] op b[p] over all pairs of `vals`.
struct BinaryRun {
  Tensor a, b, out;
};

BinaryRun runBinary(BinaryOp op, DType t, bool vectorLoop, const std::vector<double>& vals,
                    bool intInputs = false, const std::vector<int64_t>& ints = {}) {
  const size_t m = intInputs ? ints.size() : vals.size();
  const int64_t n = static_cast<int64_t>(m * m);
  BinaryRun r{Tensor(TensorType{t, {n}}), Tensor(TensorType{t, {n}}), Tensor()};
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < m; ++j) {
      int64_t e = static_cast<int64_t>(i * m + j);
      if (intInputs) {
        r.a.setI(e, ints[i]);
        r.b.setI(e, ints[j]);
      } else {
        r.a.setF(e, vals[i]);
        r.b.setF(e, vals[j]);
      }
    }
  Kernel k;
  k.name = "binary";
  int ab = k.addBuffer("a", t, n, Access::Read);
  int bb = k.addBuffer("b", t, n, Access::Read);
  const bool compare = op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt ||
                       op == BinaryOp::Le || op == BinaryOp::Gt || op == BinaryOp::Ge;
  const DType rt = compare ? DType::boolean : t;
  int ob = k.addBuffer("out", rt, n, Access::Write);
  elementwise(k, n, vectorLoop, [&](ExprP i) {
    return std::vector<StmtP>{store(ob, i, binary(op, load(k, ab, i), load(k, bb, i)))};
  });
  r.out = Tensor(TensorType{rt, {n}});
  KernelFn fn = compile(k);
  run(fn, {&r.a, &r.b, &r.out}, 0, k.parallelExtent);
  return r;
}

double nanMax(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? kNaN : (a < b ? b : a);
}
double nanMin(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? kNaN : (b < a ? b : a);
}

TEST_P(EmitterOps, BinaryFloat) {
  const std::vector<BinaryOp> ops = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div,
                                     BinaryOp::Pow, BinaryOp::Max, BinaryOp::Min, BinaryOp::Eq,
                                     BinaryOp::Ne,  BinaryOp::Lt,  BinaryOp::Le,  BinaryOp::Gt,
                                     BinaryOp::Ge};
  const std::vector<double> vals = {0.0,  -0.0, 1.0,   -2.0, 0.5,   3.0,
                                    -2.5, 1e30, 1e-40, kInf, -kInf, kNaN};
  for (DType t : {DType::f32, DType::f64}) {
    for (BinaryOp op : ops) {
      BinaryRun r = runBinary(op, t, GetParam(), vals);
      for (int64_t e = 0; e < r.out.numel(); ++e) {
        double x = r.a.getF(e), y = r.b.getF(e), w = 0;
        switch (op) {
          case BinaryOp::Add:
            w = x + y;
            break;
          case BinaryOp::Sub:
            w = x - y;
            break;
          case BinaryOp::Mul:
            w = x * y;
            break;
          case BinaryOp::Div:
            w = x / y;
            break;
          case BinaryOp::Pow:
            w = std::pow(x, y);
            break;
          case BinaryOp::Max:
            w = nanMax(x, y);
            break;
          case BinaryOp::Min:
            w = nanMin(x, y);
            break;
          case BinaryOp::Eq:
            w = x == y;
            break;
          case BinaryOp::Ne:
            w = x != y;
            break;
          case BinaryOp::Lt:
            w = x < y;
            break;
          case BinaryOp::Le:
            w = x <= y;
            break;
          case BinaryOp::Gt:
            w = x > y;
            break;
          case BinaryOp::Ge:
            w = x >= y;
            break;
          default:
            FAIL();
        }
        Tensor want(r.out.type());
        want.setF(0, w);
        // max/min of +0 and -0 may give either zero.
        const bool signedZero = op != BinaryOp::Max && op != BinaryOp::Min;
        EXPECT_TRUE(sameValue(r.out.getF(e), want.getF(0), signedZero))
            << dtypeName(t) << " op " << static_cast<int>(op) << "(" << x << ", " << y << "): got "
            << r.out.getF(e) << ", want " << want.getF(0);
      }
    }
  }
}

TEST_P(EmitterOps, BinaryInt) {
  const std::vector<BinaryOp> ops = {
      BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Rem, BinaryOp::Max,
      BinaryOp::Min, BinaryOp::Eq,  BinaryOp::Ne,  BinaryOp::Lt,  BinaryOp::Le,  BinaryOp::Gt,
      BinaryOp::Ge,  BinaryOp::And, BinaryOp::Or,  BinaryOp::Xor, BinaryOp::Shl, BinaryOp::Shr};
  for (DType t : {DType::i32, DType::i64}) {
    const int bits = t == DType::i32 ? 32 : 64;
    const int64_t mn = t == DType::i32 ? INT32_MIN : INT64_MIN;
    const int64_t mx = t == DType::i32 ? INT32_MAX : INT64_MAX;
    const std::vector<int64_t> ints = {0, 1, -1, 2, -7, 13, 31, 32, 63, 64, mn, mx};
    auto wrap = [&](uint64_t r) {
      return t == DType::i32 ? static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(r)))
                             : static_cast<int64_t>(r);
    };
    for (BinaryOp op : ops) {
      BinaryRun r = runBinary(op, t, GetParam(), {}, true, ints);
      for (int64_t e = 0; e < r.out.numel(); ++e) {
        int64_t x = r.a.getI(e), y = r.b.getI(e), w = 0;
        auto ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
        switch (op) {
          case BinaryOp::Add:
            w = wrap(ux + uy);
            break;
          case BinaryOp::Sub:
            w = wrap(ux - uy);
            break;
          case BinaryOp::Mul:
            w = wrap(ux * uy);
            break;
          case BinaryOp::Div:
            w = y == 0 ? 0 : y == -1 ? wrap(0 - ux) : x / y;
            break;
          case BinaryOp::Rem:
            w = y == 0 || y == -1 ? 0 : x % y;
            break;
          case BinaryOp::Max:
            w = std::max(x, y);
            break;
          case BinaryOp::Min:
            w = std::min(x, y);
            break;
          case BinaryOp::Eq:
            w = x == y;
            break;
          case BinaryOp::Ne:
            w = x != y;
            break;
          case BinaryOp::Lt:
            w = x < y;
            break;
          case BinaryOp::Le:
            w = x <= y;
            break;
          case BinaryOp::Gt:
            w = x > y;
            break;
          case BinaryOp::Ge:
            w = x >= y;
            break;
          case BinaryOp::And:
            w = x & y;
            break;
          case BinaryOp::Or:
            w = x | y;
            break;
          case BinaryOp::Xor:
            w = x ^ y;
            break;
          case BinaryOp::Shl:
            w = y < 0 || y >= bits ? 0 : wrap(ux << y);
            break;
          case BinaryOp::Shr: {
            uint64_t mask = bits == 32 ? 0xFFFFFFFFull : ~0ull;
            w = y < 0 || y >= bits ? 0 : wrap((ux & mask) >> y);
            break;
          }
          default:
            FAIL();
        }
        EXPECT_EQ(r.out.getI(e), w)
            << dtypeName(t) << " op " << static_cast<int>(op) << "(" << x << ", " << y << ")";
      }
    }
  }
}

TEST_P(EmitterOps, BinaryBool) {
  const std::vector<BinaryOp> ops = {BinaryOp::Eq,  BinaryOp::Ne, BinaryOp::Lt,
                                     BinaryOp::Le,  BinaryOp::Gt, BinaryOp::Ge,
                                     BinaryOp::And, BinaryOp::Or, BinaryOp::Xor};
  for (BinaryOp op : ops) {
    BinaryRun r = runBinary(op, DType::boolean, GetParam(), {}, true, {0, 1, 1, 0, 1, 0, 0, 1});
    for (int64_t e = 0; e < r.out.numel(); ++e) {
      bool x = r.a.getI(e) != 0, y = r.b.getI(e) != 0, w = false;
      switch (op) {
        case BinaryOp::Eq:
          w = x == y;
          break;
        case BinaryOp::Ne:
          w = x != y;
          break;
        case BinaryOp::Lt:
          w = x < y;
          break;
        case BinaryOp::Le:
          w = x <= y;
          break;
        case BinaryOp::Gt:
          w = x > y;
          break;
        case BinaryOp::Ge:
          w = x >= y;
          break;
        case BinaryOp::And:
          w = x && y;
          break;
        case BinaryOp::Or:
          w = x || y;
          break;
        case BinaryOp::Xor:
          w = x != y;
          break;
        default:
          FAIL();
      }
      EXPECT_EQ(r.out.as<uint8_t>()[e], w ? 1 : 0)
          << "op " << static_cast<int>(op) << "(" << x << ", " << y << ")";
    }
  }
}

// pow(x, 2) is emitted as x * x; pow of negative bases with integer exponents.
TEST(EmitterBinary, PowSpecialCases) {
  Kernel k;
  k.name = "pow_cases";
  const std::vector<double> xs = {-3.0, -0.5, 0.0, -0.0, 2.0, 1.7, -kInf, kNaN, 1e20, 1e-30};
  const int n = static_cast<int>(xs.size());
  int xb = k.addBuffer("x", DType::f32, n, Access::Read);
  int sq = k.addBuffer("sq", DType::f32, n, Access::Write);
  int cube = k.addBuffer("cube", DType::f32, n, Access::Write);
  int half = k.addBuffer("half", DType::f32, n, Access::Write);
  k.parallelVar = k.addVar("p", DType::i64);
  k.parallelExtent = n;
  auto p = varRef(k, k.parallelVar);
  auto x = load(k, xb, p);
  k.body = {store(sq, p, binary(BinaryOp::Pow, x, constFloat(2))),
            store(cube, p, binary(BinaryOp::Pow, x, constFloat(3))),
            store(half, p, binary(BinaryOp::Pow, x, constFloat(0.5)))};
  KernelFn fn = compile(k);
  Tensor tx = tensorOf(DType::f32, xs), tsq(TensorType{DType::f32, {n}}), tc = tsq, th = tsq;
  run(fn, {&tx, &tsq, &tc, &th}, 0, n);
  for (int i = 0; i < n; ++i) {
    double x0 = tx.getF(i);
    for (auto [t, e] : {std::pair{&tsq, 2.0}, std::pair{&tc, 3.0}, std::pair{&th, 0.5}}) {
      Tensor want(TensorType{DType::f32, {1}});
      want.setF(0, std::pow(x0, e));
      EXPECT_TRUE(sameValue(t->getF(i), want.getF(0)))
          << "pow(" << x0 << ", " << e << ") = " << t->getF(i);
    }
  }
}

// ---- casts ----------------------------------------------------------------------------------

// The interpreter's cast (ir/interpreter.cpp castKernel), element by element.
void referenceCast(const Tensor& x, Tensor& out) {
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (isFloat(x.dtype()))
      out.setF(i, x.getF(i));
    else if (out.dtype() == DType::f32)
      out.setF(i, static_cast<float>(x.getI(i)));
    else if (isFloat(out.dtype()))
      out.setF(i, static_cast<double>(x.getI(i)));
    else
      out.setI(i, x.getI(i));
  }
}

TEST_P(EmitterOps, CastAllPairs) {
  const std::vector<double> floatVals =
      repeated<double>({0.0,          -0.0,    1.0,     -1.0,       0.5,       -1.5, 2.5,   1e-3,
                        3.1415926535, 65504.0, 65520.0, 1e5,        -7e9,      3e9,  1e19,  -1e19,
                        1e-7,         6e-8,    1e-40,   1.00390625, 1.0078125, kInf, -kInf, kNaN},
                       3);
  const int64_t twoTo53Plus1 = (int64_t{1} << 53) + 1;  // not exact in f64
  const std::vector<int64_t> intVals =
      repeated<int64_t>({0, 1, -1, 2, 255, -256, 65504, 16777217, INT32_MAX, INT32_MIN,
                         twoTo53Plus1, INT64_MAX, INT64_MIN},
                        5);
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      const int64_t n = static_cast<int64_t>(isFloat(from) ? floatVals.size() : intVals.size());
      Tensor x(TensorType{from, {n}});
      for (int64_t i = 0; i < n; ++i) {
        if (isFloat(from))
          x.setF(i, floatVals[i]);
        else
          x.setI(i, intVals[i]);
      }
      Kernel k;
      k.name = "cast";
      int xb = k.addBuffer("x", from, n, Access::Read);
      int yb = k.addBuffer("y", to, n, Access::Write);
      elementwise(k, n, GetParam(), [&](ExprP i) {
        return std::vector<StmtP>{store(yb, i, cast(load(k, xb, i), to))};
      });
      KernelFn fn = compile(k);
      Tensor got(TensorType{to, {n}}), want(TensorType{to, {n}});
      run(fn, {&x, &got}, 0, k.parallelExtent);
      referenceCast(x, want);
      const size_t sz = dtypeSize(to);
      for (int64_t i = 0; i < n; ++i) {
        bool bothNaN = isFloat(to) && std::isnan(got.getF(i)) && std::isnan(want.getF(i));
        bool same = std::memcmp(got.as<uint8_t>() + i * sz, want.as<uint8_t>() + i * sz, sz) == 0;
        EXPECT_TRUE(bothNaN || same) << dtypeName(from) << " -> " << dtypeName(to) << " of "
                                     << (isFloat(from) ? x.getF(i) : static_cast<double>(x.getI(i)))
                                     << ": got " << got.getF(i) << ", want " << want.getF(i);
      }
    }
  }
}

// bf16 and f16 storage: load, compute in f32, store rounded to nearest even.
TEST_P(EmitterOps, HalfStorageRoundTrip) {
  for (DType t : {DType::bf16, DType::f16}) {
    const int n = 100;
    Tensor x(TensorType{t, {n}});
    for (int i = 0; i < n; ++i) x.setF(i, (i - 50) * 0.37);
    Kernel k;
    k.name = "half_scale";
    int xb = k.addBuffer("x", t, n, Access::Read);
    int yb = k.addBuffer("y", t, n, Access::Write);
    elementwise(k, n, GetParam(), [&](ExprP i) {
      auto v = cast(load(k, xb, i), DType::f32);
      auto r = binary(BinaryOp::Add, binary(BinaryOp::Mul, v, constFloat(1.5)), constFloat(0.25));
      return std::vector<StmtP>{store(yb, i, cast(r, t))};
    });
    KernelFn fn = compile(k);
    Tensor y(TensorType{t, {n}});
    run(fn, {&x, &y}, 0, k.parallelExtent);
    for (int i = 0; i < n; ++i) {
      Tensor want(TensorType{t, {1}});
      want.setF(0, static_cast<float>(static_cast<float>(x.getF(i)) * 1.5f) + 0.25f);
      EXPECT_EQ(y.as<uint16_t>()[i], want.as<uint16_t>()[0]) << dtypeName(t) << " element " << i;
    }
  }
}

// ---- loops, locals, ifs, parallel chunks ----------------------------------------------------

// For each row p of an R x E matrix: y[p, j] = x[p, j] * 2 + p and s[p] = sum_j x[p, j],
// m[p] = max_j x[p, j], with the inner loops of the given kind.
constexpr int64_t kRows = 5;

Kernel rowKernel(int64_t e, LoopKind kind, int unroll) {
  Kernel k;
  k.name = "rows";
  int xb = k.addBuffer("x", DType::f32, kRows * e, Access::Read);
  int yb = k.addBuffer("y", DType::f32, kRows * e, Access::Write);
  int sb = k.addBuffer("s", DType::f32, kRows, Access::Write);
  int mb = k.addBuffer("m", DType::f32, kRows, Access::Write);
  k.parallelVar = k.addVar("p", DType::i64);
  k.parallelExtent = kRows;
  int j = k.addVar("j", DType::i64);
  int j2 = k.addVar("j2", DType::i64);
  int acc = k.addVar("acc", DType::f32);
  int mx = k.addVar("mx", DType::f32);
  auto p = varRef(k, k.parallelVar);
  auto at = [&](int var) { return load(k, xb, add(mul(p, e), varRef(k, var))); };
  auto pf = cast(p, DType::f32);
  k.body = {
      loop(j, e,
           {store(yb, add(mul(p, e), varRef(k, j)),
                  binary(BinaryOp::Add, binary(BinaryOp::Mul, at(j), constFloat(2)), pf))},
           kind, unroll),
      assign(acc, constFloat(0)),
      assign(mx, constFloat(-kInf)),
      loop(j2, e,
           {assign(acc, binary(BinaryOp::Add, varRef(k, acc), at(j2))),
            assign(mx, binary(BinaryOp::Max, varRef(k, mx), at(j2)))},
           kind, unroll),
      store(sb, p, varRef(k, acc)),
      store(mb, p, varRef(k, mx)),
  };
  return k;
}

TEST(EmitterLoops, EveryKindAndExtentWithSplitRanges) {
  for (int64_t e : {1, 7, 8, 9, 1000}) {
    for (auto [kind, unroll] : {std::pair{LoopKind::Serial, 0}, std::pair{LoopKind::Vector, 0},
                                std::pair{LoopKind::Unroll, 4}}) {
      Kernel k = rowKernel(e, kind, unroll);
      KernelFn fn = compile(k);
      const int64_t r = kRows;
      Tensor x(TensorType{DType::f32, {r * e}});
      for (int64_t i = 0; i < r * e; ++i) x.setF(i, std::sin(static_cast<double>(i)) * 10);
      if (e > 8) x.setF(2 * e + 8, kNaN);  // row 2's max is NaN, its sum too
      Tensor y(x.type()), s(TensorType{DType::f32, {r}}), m(s.type());
      // Two chunks of the parallel range, as the runtime's threads would run them.
      run(fn, {&x, &y, &s, &m}, 0, 2);
      run(fn, {&x, &y, &s, &m}, 2, r);
      for (int64_t p = 0; p < r; ++p) {
        double sum = 0, mx = -kInf;
        for (int64_t j = 0; j < e; ++j) {
          double v = x.getF(p * e + j);
          EXPECT_TRUE(sameValue(y.getF(p * e + j), static_cast<float>(static_cast<float>(v * 2) +
                                                                      static_cast<float>(p))))
              << "extent " << e << " kind " << static_cast<int>(kind) << " at " << p << "," << j;
          sum += v;
          mx = nanMax(mx, v);
        }
        if (std::isnan(sum)) {
          EXPECT_TRUE(std::isnan(s.getF(p)));
        } else {
          EXPECT_NEAR(s.getF(p), sum, 1e-5 * (std::fabs(sum) + 10 * static_cast<double>(e)))
              << "extent " << e << " kind " << static_cast<int>(kind) << " row " << p;
        }
        EXPECT_TRUE(sameValue(m.getF(p), mx)) << "max of row " << p << " extent " << e;
      }
    }
  }
}

// A three-deep nest with every loop kind, and an empty loop (extent 0) that must not run.
TEST(EmitterLoops, NestsAndEmptyLoops) {
  Kernel k;
  k.name = "nest";
  const int64_t a = 3, b = 5, c = 9;
  int yb = k.addBuffer("y", DType::i64, a * b * c, Access::Write);
  int zb = k.addBuffer("z", DType::i64, 1, Access::ReadWrite);
  int i = k.addVar("i", DType::i64), j = k.addVar("j", DType::i64), l = k.addVar("l", DType::i64);
  int none = k.addVar("none", DType::i64);
  auto idx = add(mul(add(mul(varRef(k, i), b), varRef(k, j)), c), varRef(k, l));
  auto val = add(mul(varRef(k, i), 100), add(mul(varRef(k, j), 10), varRef(k, l)));
  k.body = {loop(i, a,
                 {loop(j, b, {loop(l, c, {store(yb, idx, val)}, LoopKind::Vector)},
                       LoopKind::Unroll, 2)}),
            loop(none, 0, {store(zb, constInt(0), constInt(42))})};
  KernelFn fn = compile(k);
  Tensor y(TensorType{DType::i64, {a * b * c}}), z(TensorType{DType::i64, {1}});
  z.setI(0, 7);
  run(fn, {&y, &z}, 0, 1);
  for (int64_t x = 0; x < a * b * c; ++x)
    EXPECT_EQ(y.getI(x), (x / (b * c)) * 100 + (x / c % b) * 10 + x % c);
  EXPECT_EQ(z.getI(0), 7);
  // An empty parallel range runs nothing.
  z.setI(0, 7);
  run(fn, {&y, &z}, 3, 3);
  EXPECT_EQ(z.getI(0), 7);
}

// if/else inside a loop, on a condition computed from the loop variable (p % 3).
TEST(EmitterControl, IfElse) {
  Kernel k;
  k.name = "ifelse";
  const int64_t n = 1000;
  int xb = k.addBuffer("x", DType::f64, n, Access::Read);
  int yb = k.addBuffer("y", DType::f64, n, Access::Write);
  int cb = k.addBuffer("count", DType::i32, 1, Access::Write);
  int cnt = k.addVar("cnt", DType::i32);
  int i = k.addVar("i", DType::i64);
  auto vi = varRef(k, i);
  auto x = load(k, xb, vi);
  k.body = {
      assign(cnt, constInt(0, DType::i32)),
      loop(i, n,
           {ifThen(binary(BinaryOp::Eq, binary(BinaryOp::Rem, vi, constInt(3)), constInt(0)),
                   {store(yb, vi, unary(UnaryOp::Neg, x)),
                    assign(cnt, binary(BinaryOp::Add, varRef(k, cnt), constInt(1, DType::i32)))},
                   {store(yb, vi, binary(BinaryOp::Mul, x, x))}),
            ifThen(binary(BinaryOp::Gt, vi, constInt(n + 5)),
                   {store(yb, constInt(0), constFloat(99, DType::f64))})}),
      store(cb, constInt(0), varRef(k, cnt))};
  KernelFn fn = compile(k);
  Tensor tx(TensorType{DType::f64, {n}}), ty = tx, tc(TensorType{DType::i32, {1}});
  for (int64_t v = 0; v < n; ++v) tx.setF(v, 0.5 * static_cast<double>(v) - 3);
  run(fn, {&tx, &ty, &tc}, 0, 1);
  for (int64_t v = 0; v < n; ++v) {
    double xv = tx.getF(v);
    EXPECT_EQ(ty.getF(v), v % 3 == 0 ? -xv : xv * xv) << v;
  }
  EXPECT_EQ(tc.getI(0), (n + 2) / 3);
}

// select, locals of every scalar type, and int/bool buffers.
TEST(EmitterControl, LocalsOfEveryType) {
  Kernel k;
  k.name = "locals";
  const int64_t n = 37;
  int xb = k.addBuffer("x", DType::i32, n, Access::Read);
  int ob = k.addBuffer("out", DType::i64, 4, Access::Write);
  int fb = k.addBuffer("fout", DType::f64, 1, Access::Write);
  int bb = k.addBuffer("any", DType::boolean, 1, Access::Write);
  int si = k.addVar("sum32", DType::i32), sl = k.addVar("sum64", DType::i64),
      sf = k.addVar("sumf", DType::f64);
  int any = k.addVar("anyneg", DType::boolean), mn = k.addVar("mn", DType::i64),
      i = k.addVar("i", DType::i64);
  auto x = load(k, xb, varRef(k, i));
  auto x64 = cast(x, DType::i64);
  k.body = {assign(si, constInt(0, DType::i32)),
            assign(sl, constInt(0)),
            assign(sf, constFloat(0, DType::f64)),
            assign(any, constBool(false)),
            assign(mn, constInt(INT64_MAX)),
            loop(i, n,
                 {assign(si, binary(BinaryOp::Add, varRef(k, si), x)),
                  assign(sl, binary(BinaryOp::Add, varRef(k, sl), x64)),
                  assign(sf, binary(BinaryOp::Add, varRef(k, sf), cast(x, DType::f64))),
                  assign(any, binary(BinaryOp::Or, varRef(k, any),
                                     binary(BinaryOp::Lt, x, constInt(0, DType::i32)))),
                  assign(mn, select(binary(BinaryOp::Lt, x64, varRef(k, mn)), x64, varRef(k, mn)))},
                 LoopKind::Vector),
            store(ob, constInt(0), cast(varRef(k, si), DType::i64)),
            store(ob, constInt(1), varRef(k, sl)),
            store(ob, constInt(2), varRef(k, mn)),
            store(fb, constInt(0), varRef(k, sf)),
            store(bb, constInt(0), varRef(k, any))};
  KernelFn fn = compile(k);
  Tensor tx(TensorType{DType::i32, {n}}), to(TensorType{DType::i64, {4}}),
      tf(TensorType{DType::f64, {1}}), tb(TensorType{DType::boolean, {1}});
  int64_t s = 0, m = INT64_MAX;
  for (int64_t v = 0; v < n; ++v) {
    int64_t val = (v * 7919) % 1000 - 300;
    tx.setI(v, val);
    s += val;
    m = std::min(m, val);
  }
  run(fn, {&tx, &to, &tf, &tb}, 0, 1);
  EXPECT_EQ(to.getI(0), s);
  EXPECT_EQ(to.getI(1), s);
  EXPECT_EQ(to.getI(2), m);
  EXPECT_EQ(tf.getF(0), static_cast<double>(s));
  EXPECT_EQ(tb.as<uint8_t>()[0], 1);
}

// w = w - lr * g with w written in place of its input (one pointer passed for both).
TEST(EmitterBuffers, InPlaceUpdate) {
  Kernel k;
  k.name = "sgd";
  const int64_t n = 1003;
  int w = k.addBuffer("w", DType::f32, n, Access::Read);
  int g = k.addBuffer("g", DType::f32, n, Access::Read);
  int wout = k.addBuffer("w_new", DType::f32, n, Access::Write);
  k.buffers[wout].inPlaceOf = w;
  k.parallelVar = k.addVar("p", DType::i64);
  k.parallelExtent = 1;
  int i = k.addVar("i", DType::i64);
  auto vi = varRef(k, i);
  k.body = {loop(i, n,
                 {store(wout, vi,
                        binary(BinaryOp::Sub, load(k, w, vi),
                               binary(BinaryOp::Mul, constFloat(0.1), load(k, g, vi))))},
                 LoopKind::Vector)};

  // The in-place output is stored through w's pointer, so every argument keeps noalias
  // and w, now written, loses readonly.
  llvm::LLVMContext ctx;
  llvm::Module mod("sgd", ctx);
  emitKernel(k, mod, 256);
  llvm::Function* body = mod.getFunction("sgd.body");
  ASSERT_NE(body, nullptr);
  for (unsigned a : {0u, 1u, 2u}) EXPECT_TRUE(body->hasParamAttribute(a, llvm::Attribute::NoAlias));
  EXPECT_FALSE(body->hasParamAttribute(0, llvm::Attribute::ReadOnly));
  EXPECT_TRUE(body->hasParamAttribute(1, llvm::Attribute::ReadOnly));
  EXPECT_EQ(body->getParamAlign(1).valueOrOne().value(), 64u);
  EXPECT_EQ(body->getParamDereferenceableBytes(1), static_cast<uint64_t>(n) * 4);

  // Hence a vector loop without a runtime overlap check (with one, the pair always
  // overlaps and the scalar loop runs).
  TargetSpec target = TargetSpec::host();
  std::string ir = kernelLLVMIR(k, target);
  EXPECT_NE(ir.find("<" + std::to_string(target.vectorBits() / 32) + " x float>"),
            std::string::npos) << ir;
  EXPECT_EQ(ir.find("vector.memcheck"), std::string::npos) << ir;

  KernelFn fn = compile(k);
  Tensor tw(TensorType{DType::f32, {n}}), tg = tw;
  for (int64_t v = 0; v < n; ++v) {
    tw.setF(v, static_cast<double>(v));
    tg.setF(v, static_cast<double>(n - v));
  }
  Tensor orig = tw;
  run(fn, {&tw, &tg, &tw}, 0, 1);
  // `contract` may fuse the multiply and subtract: either result is right.
  for (int64_t v = 0; v < n; ++v) {
    auto w0 = static_cast<float>(orig.getF(v)), g0 = static_cast<float>(tg.getF(v));
    float unfused = w0 - 0.1f * g0, fused = std::fma(-0.1f, g0, w0);
    EXPECT_TRUE(tw.getF(v) == unfused || tw.getF(v) == fused) << v;
  }
}

// ---- the IR handed to LLVM ------------------------------------------------------------------

// Loop metadata from the loop kinds.
TEST(EmitterIR, LoopMetadata) {
  Kernel k = rowKernel(64, LoopKind::Vector, 0);
  llvm::LLVMContext ctx;
  llvm::Module mod("rows", ctx);
  emitKernel(k, mod, 256);
  std::string text;
  llvm::raw_string_ostream os(text);
  mod.print(os, nullptr);
  EXPECT_NE(text.find("!\"llvm.loop.vectorize.enable\", i1 true"), std::string::npos) << text;
  EXPECT_NE(text.find("!\"llvm.loop.vectorize.width\", i32 8"), std::string::npos)
      << text;  // 256 / f32
  EXPECT_NE(text.find("fadd reassoc contract float"), std::string::npos) << text;
  EXPECT_EQ(text.find("nnan"), std::string::npos);
  EXPECT_EQ(text.find("ninf"), std::string::npos);

  Kernel u = rowKernel(64, LoopKind::Unroll, 4);
  llvm::Module mod2("rows_u", ctx);
  emitKernel(u, mod2);
  text.clear();
  mod2.print(os, nullptr);
  EXPECT_NE(text.find("!\"llvm.loop.unroll.count\", i32 4"), std::string::npos) << text;
}

// exp over a vector loop becomes vector code with no libm call; the dumps work.
TEST(EmitterIR, ExpLoopVectorizesAndDumps) {
  Kernel k;
  k.name = "vexp";
  const int64_t n = 1024;
  int xb = k.addBuffer("x", DType::f32, n, Access::Read);
  int yb = k.addBuffer("y", DType::f32, n, Access::Write);
  int i = k.addVar("i", DType::i64);
  for (UnaryOp op : {UnaryOp::Exp, UnaryOp::Log, UnaryOp::Tanh, UnaryOp::Erf}) {
    k.body = {loop(i, n, {store(yb, varRef(k, i), unary(op, load(k, xb, varRef(k, i))))},
                   LoopKind::Vector)};
    TargetSpec target = TargetSpec::host();
    std::string ir = kernelLLVMIR(k, target);
    const int lanes = target.vectorBits() / 32;
    EXPECT_NE(ir.find("<" + std::to_string(lanes) + " x float>"), std::string::npos) << ir;
    for (const char* f : {"@expf", "@logf", "@tanhf", "@erff", "@exp(", "@log("})
      EXPECT_EQ(ir.find(f), std::string::npos) << "op " << static_cast<int>(op) << " calls " << f;
    std::string asmText = kernelAssembly(k, target);
    EXPECT_NE(asmText.find("vexp:"), std::string::npos);
  }
}

// Code for an AVX-512 CPU (generated, not run, on any x86-64 host): 16-lane f32 vectors in
// zmm registers.
TEST(EmitterIR, Avx512Target) {
  TargetSpec t = TargetSpec::host();
  if (t.triple.rfind("x86_64", 0) != 0) GTEST_SKIP() << "not an x86-64 host";
  t.cpu = "skylake-avx512";
  t.features = "+avx,+avx2,+fma,+f16c,+avx512f,+avx512vl,+avx512bw,+avx512dq";
  ASSERT_EQ(t.vectorBits(), 512);
  Kernel k;
  k.name = "zexp";
  int xb = k.addBuffer("x", DType::f32, 4096, Access::Read);
  int yb = k.addBuffer("y", DType::f32, 4096, Access::Write);
  int i = k.addVar("i", DType::i64);
  k.body = {loop(i, 4096, {store(yb, varRef(k, i), unary(UnaryOp::Exp, load(k, xb, varRef(k, i))))},
                 LoopKind::Vector)};
  EXPECT_NE(kernelLLVMIR(k, t).find("<16 x float>"), std::string::npos);
  EXPECT_NE(kernelAssembly(k, t).find("zmm"), std::string::npos);
}

TEST(EmitterIR, RejectsBadKernelsAndDuplicateNames) {
  Kernel k;
  k.name = "bad";
  int xb = k.addBuffer("x", DType::f32, 4, Access::Read);
  k.body = {store(xb, constInt(0), constFloat(1))};
  llvm::LLVMContext ctx;
  llvm::Module mod("bad", ctx);
  EXPECT_THROW(emitKernel(k, mod), std::logic_error);

  Kernel a;
  a.name = "twice";
  Kernel b = a;
  EXPECT_THROW(compileKernels(sharedJit(), {&a, &b}), std::logic_error);
  // A name already defined in the JIT by an earlier call.
  Jit jit(noCache());
  compileKernels(jit, {&a});
  EXPECT_THROW(compileKernels(jit, {&b}), JitError);
}

// Expressions are shared DAGs: 60 doublings of x are 60 nodes, not 2^60 tree paths, for
// the verifier and the emitter alike.
TEST(EmitterIR, SharedExpressionDag) {
  Kernel k;
  k.name = "dag";
  int xb = k.addBuffer("x", DType::f64, 4, Access::Read);
  int yb = k.addBuffer("y", DType::f64, 4, Access::Write);
  k.parallelVar = k.addVar("p", DType::i64);
  k.parallelExtent = 4;
  auto p = varRef(k, k.parallelVar);
  ExprP e = load(k, xb, p);
  for (int i = 0; i < 60; ++i) e = binary(BinaryOp::Add, e, e);
  k.body = {store(yb, p, e)};
  KernelFn fn = compile(k);
  Tensor x = tensorOf(DType::f64, {1, -2, 0.5, 3}), y(x.type());
  run(fn, {&x, &y}, 0, 4);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(y.getF(i), std::ldexp(x.getF(i), 60));
}

// TGC_PERF_MAP=1: the JIT lists the kernel's wrapper and body in perf's map file.
TEST(EmitterIR, PerfMapNamesKernels) {
  const std::string map = "/tmp/perf-" + std::to_string(getpid()) + ".map";
  std::error_code ec;
  fs::remove(map, ec);
  setenv("TGC_PERF_MAP", "1", 1);
  Jit jit(noCache());
  unsetenv("TGC_PERF_MAP");
  Kernel k = rowKernel(16, LoopKind::Vector, 0);
  k.name = "perf_mapped_rows";
  compileKernels(jit, {&k});
  std::ifstream in(map);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(" perf_mapped_rows\n"), std::string::npos) << text;
  EXPECT_NE(text.find(" perf_mapped_rows.body\n"), std::string::npos) << text;
  fs::remove(map, ec);
}

// ---- the object cache -----------------------------------------------------------------------

TEST(EmitterCache, SecondCompileInFreshJitHitsTheCache) {
  std::string tmpl = (fs::temp_directory_path() / "tgc-emitter-cache-XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  JitOptions o;
  o.useCache = true;
  o.cacheDir = dir;
  Kernel k = rowKernel(9, LoopKind::Vector, 0);
  k.name = "cached_rows";
  Kernel k2 = rowKernel(9, LoopKind::Serial, 0);
  k2.name = "cached_rows_serial";
  auto check = [&](KernelFn fn) {
    Tensor x(TensorType{DType::f32, {5 * 9}}), y(x.type()), s(TensorType{DType::f32, {5}}),
        m(s.type());
    for (int64_t i = 0; i < 45; ++i) x.setF(i, static_cast<double>(i));
    run(fn, {&x, &y, &s, &m}, 0, 5);
    EXPECT_EQ(s.getF(4), 36 + 37 + 38 + 39 + 40 + 41 + 42 + 43 + 44);
  };
  {
    Jit jit(o);
    auto fns = compileKernels(jit, {&k, &k2});
    EXPECT_EQ(jit.stats().compiles, 2);
    EXPECT_EQ(jit.stats().cacheHits, 0);
    check(fns[0]);
  }
  {
    Jit jit(o);
    auto fns = compileKernels(jit, {&k, &k2});
    EXPECT_EQ(jit.stats().cacheHits, 2);
    EXPECT_TRUE(jit.stats().lastHitCache);
    check(fns[0]);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace tgc::codegen
