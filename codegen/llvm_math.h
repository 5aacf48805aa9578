// Inline, branch-free LLVM IR for f32 transcendental functions, so that loops calling
// them vectorize (a libm call would keep them scalar). Each works on float or on vectors
// of float, propagates NaN and is exact at the IEEE edges (+-inf, +-0, overflow to inf,
// gradual underflow); errors are a few ulp (tests/codegen/emitter_math_test.cpp).
#pragma once

#include <llvm/IR/IRBuilder.h>

namespace tgc::codegen::math {

llvm::Value* expF32(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* logF32(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* tanhF32(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* erfF32(llvm::IRBuilder<>& b, llvm::Value* x);

}  // namespace tgc::codegen::math
