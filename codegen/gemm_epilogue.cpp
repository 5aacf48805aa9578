#include "codegen/gemm_epilogue.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "codegen/llvm_math.h"

namespace tgc::codegen {

std::string GemmEpilogue::tag() const {
  std::string t;
  auto add = [&](const char* s) {
    if (!t.empty()) t += '_';
    t += s;
  };
  if (bias) add("b");
  if (addend) add("a");
  switch (activation) {
    case GemmActivation::none: break;
    case GemmActivation::relu: add("relu"); break;
    case GemmActivation::gelu: add("gelu"); break;
    case GemmActivation::geluTanh: add("gelutanh"); break;
    case GemmActivation::silu: add("silu"); break;
  }
  if (scale != 1.0) add("s");
  switch (mask) {
    case GemmMask::none: break;
    case GemmMask::positive: add("mpos"); break;
    case GemmMask::nonzero: add("mnz"); break;
    case GemmMask::multiply: add("mmul"); break;
  }
  return t.empty() ? "id" : t;
}

int GemmEpilogue::variant() const {
  int v = bias ? 1 : 0;
  v = v * 2 + (addend ? 1 : 0);
  v = v * 5 + static_cast<int>(activation);
  v = v * 2 + (scale != 1.0 ? 1 : 0);
  v = v * 4 + static_cast<int>(mask);
  return v;
}

namespace {

// The stages on one element v of type `t` (float or double), as the interpreter computes
// them (ir/interpreter.cpp) and the generated kernels do (codegen/lower_expr.cpp).
class Stages {
 public:
  Stages(llvm::Module& m, llvm::IRBuilder<>& b, llvm::Type* t) : m_(m), b_(b), t_(t) {}

  llvm::Value* c(double v) { return llvm::ConstantFP::get(t_, v); }

  llvm::Value* activation(GemmActivation act, llvm::Value* x) {
    switch (act) {
      case GemmActivation::none: return x;
      case GemmActivation::relu:  // NaN fails x <= 0 and stays; -0 becomes +0
        return b_.CreateSelect(b_.CreateFCmpOLE(x, c(0)), c(0), x);
      case GemmActivation::gelu: {
        llvm::Value* inner = erf(b_.CreateFMul(x, c(0.70710678118654752440)));
        return b_.CreateFMul(b_.CreateFMul(c(0.5), x), b_.CreateFAdd(c(1), inner));
      }
      case GemmActivation::geluTanh: {
        llvm::Value* x3 = b_.CreateFMul(b_.CreateFMul(x, x), x);
        llvm::Value* arg = b_.CreateFAdd(x, b_.CreateFMul(c(0.044715), x3));
        llvm::Value* inner = tanh(b_.CreateFMul(c(0.7978845608028654), arg));
        return b_.CreateFMul(b_.CreateFMul(c(0.5), x), b_.CreateFAdd(c(1), inner));
      }
      case GemmActivation::silu:  // x / (1 + e^-x)
        return b_.CreateFDiv(x, b_.CreateFAdd(c(1), exp(b_.CreateFNeg(x))));
    }
    throw std::logic_error("gemm epilogue: unknown activation");
  }

 private:
  bool f32() const { return t_->isFloatTy(); }
  llvm::Value* erf(llvm::Value* x) { return f32() ? math::erfF32(b_, x) : libm("erf", x); }
  llvm::Value* tanh(llvm::Value* x) { return f32() ? math::tanhF32(b_, x) : libm("tanh", x); }
  llvm::Value* exp(llvm::Value* x) { return f32() ? math::expF32(b_, x) : libm("exp", x); }
  llvm::Value* libm(const char* name, llvm::Value* x) {
    auto callee = m_.getOrInsertFunction(name, llvm::FunctionType::get(t_, {t_}, false));
    if (auto* f = llvm::dyn_cast<llvm::Function>(callee.getCallee())) {
      f->addFnAttr(llvm::Attribute::NoUnwind);
      f->addFnAttr(llvm::Attribute::WillReturn);
    }
    return b_.CreateCall(callee, {x});
  }

  llvm::Module& m_;
  llvm::IRBuilder<>& b_;
  llvm::Type* t_;
};

}  // namespace

llvm::Function* emitGemmEpilogue(llvm::Module& module, const GemmEpilogue& epi, DType dtype,
                                 int lanes, std::string_view name) {
  if (dtype != DType::f32 && dtype != DType::f64)
    throw std::invalid_argument(
        fmt::format("gemm epilogue: dtype {} is not supported (f32 or f64)", dtypeName(dtype)));
  llvm::LLVMContext& ctx = module.getContext();
  llvm::IRBuilder<> b(ctx);
  llvm::Type* t = dtype == DType::f64 ? llvm::Type::getDoubleTy(ctx) : llvm::Type::getFloatTy(ctx);
  llvm::Type* i64 = b.getInt64Ty();
  llvm::Type* ptr = b.getPtrTy();
  auto* sig = llvm::FunctionType::get(b.getVoidTy(),
                                      {ptr, i64, i64, i64, ptr, ptr, i64, ptr, i64, t}, false);
  auto* fn = llvm::Function::Create(sig, llvm::Function::ExternalLinkage, std::string(name), module);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  for (unsigned a : {0u, 4u, 5u, 7u}) {
    fn->addParamAttr(a, llvm::Attribute::NoAlias);
    fn->addParamAttr(a, llvm::Attribute::NoCapture);
  }
  for (unsigned a : {4u, 5u, 7u}) fn->addParamAttr(a, llvm::Attribute::ReadOnly);
  auto* args = fn->arg_begin();
  llvm::Value* c = &args[0];
  llvm::Value* ldc = &args[1];
  llvm::Value* rows = &args[2];
  llvm::Value* cols = &args[3];
  llvm::Value* bias = &args[4];
  llvm::Value* addend = &args[5];
  llvm::Value* ldAddend = &args[6];
  llvm::Value* mask = &args[7];
  llvm::Value* ldMask = &args[8];
  llvm::Value* scale = &args[9];
  const char* names[] = {"c", "ldc", "rows", "cols", "bias", "addend", "ld.addend", "mask", "ld.mask", "scale"};
  for (unsigned i = 0; i < 10; ++i) args[i].setName(names[i]);

  // for (i < rows) for (j < cols) c[i*ldc + j] = stages(c[i*ldc + j]): plain scalar loops,
  // which LLVM's loop vectorizer turns into vector code (the inner loop is branch-free).
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", fn);
  auto* rowBB = llvm::BasicBlock::Create(ctx, "row", fn);
  auto* colBB = llvm::BasicBlock::Create(ctx, "col", fn);
  auto* rowEnd = llvm::BasicBlock::Create(ctx, "row.end", fn);
  auto* exit = llvm::BasicBlock::Create(ctx, "exit", fn);
  b.SetInsertPoint(entry);
  auto* zero = b.getInt64(0);
  b.CreateCondBr(b.CreateAnd(b.CreateICmpSGT(rows, zero), b.CreateICmpSGT(cols, zero)), rowBB, exit);

  b.SetInsertPoint(rowBB);
  auto* i = b.CreatePHI(i64, 2, "i");
  b.CreateBr(colBB);

  b.SetInsertPoint(colBB);
  auto* j = b.CreatePHI(i64, 2, "j");
  auto at = [&](llvm::Type* elem, llvm::Value* base, llvm::Value* ld) {
    return b.CreateInBoundsGEP(elem, base, b.CreateAdd(b.CreateMul(i, ld), j));
  };
  Stages st(module, b, t);
  llvm::Value* cp = at(t, c, ldc);
  llvm::Value* v = b.CreateLoad(t, cp, "v");
  if (epi.bias) v = b.CreateFAdd(v, b.CreateLoad(t, b.CreateInBoundsGEP(t, bias, j)));
  if (epi.addend) v = b.CreateFAdd(v, b.CreateLoad(t, at(t, addend, ldAddend)));
  v = st.activation(epi.activation, v);
  if (epi.scale != 1.0) v = b.CreateFMul(v, scale);
  switch (epi.mask) {
    case GemmMask::none: break;
    case GemmMask::positive: {
      llvm::Value* m = b.CreateLoad(t, at(t, mask, ldMask));
      v = b.CreateSelect(b.CreateFCmpOGT(m, st.c(0)), v, st.c(0));
      break;
    }
    case GemmMask::nonzero: {
      llvm::Value* m = b.CreateLoad(b.getInt8Ty(), at(b.getInt8Ty(), mask, ldMask));
      v = b.CreateSelect(b.CreateICmpNE(m, b.getInt8(0)), v, st.c(0));
      break;
    }
    case GemmMask::multiply: v = b.CreateFMul(v, b.CreateLoad(t, at(t, mask, ldMask))); break;
  }
  b.CreateStore(v, cp);
  auto* jNext = b.CreateAdd(j, b.getInt64(1), "j.next", true, true);
  auto* back = b.CreateCondBr(b.CreateICmpSLT(jNext, cols), colBB, rowEnd);
  // The driver calls this on blocks NR columns wide (two or so vectors): vectorize by one
  // register, not interleaved, or the vector body would need more columns than a block has
  // and every element would run in the scalar remainder loop.
  auto md = [&](const char* key, llvm::Metadata* value) {
    return llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, key), value});
  };
  auto* i32 = b.getInt32Ty();
  llvm::SmallVector<llvm::Metadata*, 4> loopMd = {
      nullptr,
      md("llvm.loop.vectorize.enable", llvm::ConstantAsMetadata::get(b.getTrue())),
      md("llvm.loop.vectorize.width", llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(i32, std::max(1, lanes)))),
      md("llvm.loop.interleave.count", llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(i32, 1)))};
  auto* loopId = llvm::MDNode::getDistinct(ctx, loopMd);
  loopId->replaceOperandWith(0, loopId);
  // (f64 erf and tanh are libm calls, which keep the loop scalar: no request to warn about.)
  const bool libmCalls = dtype == DType::f64 && epi.activation != GemmActivation::none &&
                         epi.activation != GemmActivation::relu;
  if (!libmCalls) back->setMetadata(llvm::LLVMContext::MD_loop, loopId);
  j->addIncoming(zero, rowBB);
  j->addIncoming(jNext, colBB);

  b.SetInsertPoint(rowEnd);
  auto* iNext = b.CreateAdd(i, b.getInt64(1), "i.next", true, true);
  b.CreateCondBr(b.CreateICmpSLT(iNext, rows), rowBB, exit);
  i->addIncoming(zero, entry);
  i->addIncoming(iNext, rowEnd);

  b.SetInsertPoint(exit);
  b.CreateRetVoid();
  return fn;
}

}  // namespace tgc::codegen
