#include "codegen/llvm_math.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Intrinsics.h>

#include <initializer_list>
#include <limits>

namespace tgc::codegen::math {

namespace {

// Builds on float or <N x float> values alike: constants splat to the operand's shape.
// No fast-math flags anywhere: the range reductions rely on exact IEEE rounding.
class F32 {
 public:
  F32(llvm::IRBuilder<>& b, llvm::Value* x) : b_(b), ft_(x->getType()) {
    auto* i32 = llvm::Type::getInt32Ty(b.getContext());
    if (auto* vt = llvm::dyn_cast<llvm::VectorType>(ft_))
      it_ = llvm::VectorType::get(i32, vt->getElementCount());
    else
      it_ = i32;
  }

  llvm::Value* c(double v) { return llvm::ConstantFP::get(ft_, v); }
  llvm::Value* ci(int64_t v) { return llvm::ConstantInt::get(it_, static_cast<uint64_t>(v), true); }
  llvm::Value* bits(llvm::Value* x) { return b_.CreateBitCast(x, it_); }
  llvm::Value* fromBits(llvm::Value* i) { return b_.CreateBitCast(i, ft_); }
  llvm::Value* fma(llvm::Value* a, llvm::Value* m, llvm::Value* add) {
    return b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {ft_}, {a, m, add});
  }
  llvm::Value* add(llvm::Value* a, llvm::Value* b) { return b_.CreateFAdd(a, b); }
  llvm::Value* sub(llvm::Value* a, llvm::Value* b) { return b_.CreateFSub(a, b); }
  llvm::Value* mul(llvm::Value* a, llvm::Value* b) { return b_.CreateFMul(a, b); }
  llvm::Value* div(llvm::Value* a, llvm::Value* b) { return b_.CreateFDiv(a, b); }
  llvm::Value* abs(llvm::Value* x) { return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x); }
  llvm::Value* copySign(llvm::Value* mag, llvm::Value* sign) {
    return b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, mag, sign);
  }
  // Polynomial in x with coefficients from the highest degree down (Horner, fused).
  llvm::Value* horner(llvm::Value* x, std::initializer_list<double> coeffs) {
    auto it = coeffs.begin();
    llvm::Value* p = c(*it++);
    for (; it != coeffs.end(); ++it) p = fma(p, x, c(*it));
    return p;
  }
  // select(x OP k, then, else); ordered compares are false for NaN.
  llvm::Value* sel(llvm::CmpInst::Predicate pred, llvm::Value* x, double k, llvm::Value* then,
                   llvm::Value* otherwise) {
    return b_.CreateSelect(b_.CreateFCmp(pred, x, c(k)), then, otherwise);
  }

  llvm::IRBuilder<>& b_;
  llvm::Type* ft_;
  llvm::Type* it_;
};

using P = llvm::CmpInst::Predicate;

}  // namespace

// exp(x) = 2^n * e^r, n = round(x / ln2), |r| <= ln2/2, e^r by Cephes' degree-6 polynomial
// (~1 ulp). 2^n is applied as two factors 2^(n/2) * 2^(n - n/2), so results that overflow
// or are subnormal round exactly once. x is clamped to [-105, 89] (exp is 0 resp. inf
// beyond; the clamp keeps NaN, whose compares are false).
llvm::Value* expF32(llvm::IRBuilder<>& b, llvm::Value* x) {
  F32 m(b, x);
  llvm::Value* xc = m.sel(P::FCMP_OGT, x, 89.0, m.c(89.0), x);
  xc = m.sel(P::FCMP_OLT, xc, -105.0, m.c(-105.0), xc);
  // Adding 1.5 * 2^23 rounds x/ln2 to an integer held in the low mantissa bits.
  constexpr double kShift = 12582912.0;  // 0x1.8p23, bits 0x4B400000
  llvm::Value* t = m.fma(xc, m.c(1.4426950408889634), m.c(kShift));
  llvm::Value* n = m.sub(t, m.c(kShift));
  llvm::Value* ni = b.CreateSub(m.bits(t), m.ci(0x4B400000));
  // r = x - n * ln2 in two parts (Cody-Waite); n * 0.693359375 is exact.
  llvm::Value* r = m.fma(n, m.c(-0.693359375), xc);
  r = m.fma(n, m.c(2.12194440e-4), r);
  llvm::Value* p = m.horner(r, {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3, 4.1665795894E-2,
                                1.6666665459E-1, 5.0000001201E-1});
  llvm::Value* y = m.add(m.fma(p, m.mul(r, r), r), m.c(1.0));
  llvm::Value* n1 = b.CreateAShr(ni, m.ci(1));
  llvm::Value* n2 = b.CreateSub(ni, n1);
  auto pow2 = [&](llvm::Value* e) {
    return m.fromBits(b.CreateShl(b.CreateAdd(e, m.ci(127)), m.ci(23)));
  };
  return m.mul(m.mul(y, pow2(n1)), pow2(n2));
}

// log(x) = k ln2 + log(m), m in [sqrt(1/2), sqrt(2)) taken from the bits (subnormals scaled
// by 2^23 first), log(1 + f) by Cephes' degree-9 polynomial (~1 ulp). Specials by select:
// log(+inf) = +inf, log(+-0) = -inf, log(x < 0) = log(NaN) = NaN.
llvm::Value* logF32(llvm::IRBuilder<>& b, llvm::Value* x) {
  F32 m(b, x);
  llvm::Value* tiny = b.CreateFCmp(P::FCMP_OLT, x, m.c(0x1p-126));
  llvm::Value* xs = b.CreateSelect(tiny, m.mul(x, m.c(0x1p23)), x);
  llvm::Value* kAdj = b.CreateSelect(tiny, m.ci(-23), m.ci(0));
  llvm::Value* ix = m.bits(xs);
  llvm::Value* tmp = b.CreateSub(ix, m.ci(0x3f3504f3));  // bits of sqrt(1/2)
  llvm::Value* k = b.CreateAShr(tmp, m.ci(23));
  llvm::Value* mant = m.fromBits(b.CreateSub(ix, b.CreateShl(k, m.ci(23))));
  llvm::Value* f = m.sub(mant, m.c(1.0));
  llvm::Value* kf = b.CreateSIToFP(b.CreateAdd(k, kAdj), m.ft_);
  llvm::Value* z = m.mul(f, f);
  llvm::Value* p = m.horner(
      f, {7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1, 1.4249322787E-1,
          -1.6668057665E-1, 2.0000714765E-1, -2.4999993993E-1, 3.3333331174E-1});
  llvm::Value* y = m.mul(m.mul(p, f), z);
  y = m.fma(kf, m.c(-2.12194440e-4), y);
  y = m.fma(z, m.c(-0.5), y);
  llvm::Value* r = m.fma(kf, m.c(0.693359375), m.add(f, y));
  const double inf = std::numeric_limits<double>::infinity();
  r = m.sel(P::FCMP_OEQ, x, inf, m.c(inf), r);
  r = m.sel(P::FCMP_OEQ, x, 0.0, m.c(-inf), r);
  return m.sel(P::FCMP_ULT, x, 0.0, m.c(std::numeric_limits<double>::quiet_NaN()), r);
}

// tanh: |x| < 0.625 by Cephes' odd polynomial x + x^3 P(x^2); beyond, 1 - 2 / (e^2|x| + 1)
// with the sign of x (e^2|x| overflowing to inf gives exactly +-1).
llvm::Value* tanhF32(llvm::IRBuilder<>& b, llvm::Value* x) {
  F32 m(b, x);
  llvm::Value* a = m.abs(x);
  llvm::Value* z = m.mul(x, x);
  llvm::Value* p = m.horner(z, {-5.70498872745E-3, 2.06390887954E-2, -5.37397155531E-2,
                                1.33314422036E-1, -3.33332819422E-1});
  llvm::Value* small = m.fma(m.mul(p, z), x, x);
  llvm::Value* e = expF32(b, m.add(a, a));
  llvm::Value* large = m.sub(m.c(1.0), m.div(m.c(2.0), m.add(e, m.c(1.0))));
  // tanh is odd; the sign also makes tanh(-0) = -0, which the polynomial loses.
  return m.copySign(m.sel(P::FCMP_OLT, a, 0.625, small, large), x);
}

// erf: |x| < 1 by x P(x^2) = x + x q(x^2); beyond, 1 - e^(-x^2) R(1/|x|), |x| clamped to 4 where erf
// rounds to 1. P and R are least-squares fits on Chebyshev nodes (relative error of R
// 3e-8 on [1, 4]), rounded to f32.
llvm::Value* erfF32(llvm::IRBuilder<>& b, llvm::Value* x) {
  F32 m(b, x);
  llvm::Value* a = m.abs(x);
  // x + x q(x^2), q = P - 1: the leading x is exact, so the rounding error is that of the
  // small correction (2/sqrt(pi) itself is not an f32).
  llvm::Value* q =
      m.horner(m.mul(x, x), {7.847259257687256e-05, -0.0008008189033716917, 0.005188099108636379,
                             -0.026853691786527634, 0.1128358244895935, -0.3761262595653534,
                             0.12837916612625122});
  llvm::Value* small = m.fma(x, q, x);
  llvm::Value* ac = m.sel(P::FCMP_OGT, a, 4.0, m.c(4.0), a);
  llvm::Value* u = m.div(m.c(1.0), ac);
  llvm::Value* r = m.horner(
      u, {0.03206583485007286, -0.18719515204429626, 0.4562140107154846, -0.5615038871765137,
          0.25932660698890686, 0.2187654823064804, -0.37169361114501953, 0.019603915512561798,
          0.5618857145309448, 0.00011466929572634399});
  llvm::Value* e = expF32(b, b.CreateFNeg(m.mul(ac, ac)));
  llvm::Value* large = m.copySign(m.sub(m.c(1.0), m.mul(e, r)), x);
  return m.sel(P::FCMP_OLT, a, 1.0, small, large);
}

}  // namespace tgc::codegen::math
