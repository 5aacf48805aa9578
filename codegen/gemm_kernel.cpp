#include "codegen/gemm_kernel.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <fmt/format.h>

#include <stdexcept>
#include <vector>

#include "codegen/jit.h"

namespace tgc::codegen {

GemmKernelConfig GemmKernelConfig::forTarget(const TargetSpec& target, DType dtype) {
  GemmKernelConfig c;
  c.dtype = dtype;
  const int bits = target.vectorBits();
  c.lanes = bits / (dtype == DType::f64 ? 64 : 32);
  c.fma = target.hasFeature("fma") || target.hasFeature("avx512f");
  if (bits == 512) {
    // 24 accumulators of the 32 zmm registers, 2 for B, the A broadcasts folded into FMAs.
    c.mr = 12;
    c.nr = 2 * c.lanes;
  } else {
    // 12 accumulators, 2 registers of B and 1 broadcast of A: 15 of the 16 registers.
    c.mr = 6;
    c.nr = 2 * c.lanes;
  }
  c.kUnroll = 4;
  // B sliver kc x nr as large as L1 (32 KiB: 512 x 16 floats with AVX2, 256 x 32 with
  // AVX-512), A block mc x kc in L2 (288 KiB of 512 on Zen 3). Fewer K blocks mean fewer
  // passes over C; on Zen 3 kc 512 measured 2-5% faster than 256 on one thread.
  c.kc = std::min<int64_t>(512, 32768 / (c.nr * c.elementBytes()));
  c.mc = c.mr * 24;
  c.nc = c.nr * (4096 / c.nr);
  c.directAMaxN = 8 * c.nr;
  return c;
}

void GemmKernelConfig::validate() const {
  auto bad = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("invalid GEMM kernel config {}: {}", name(), why));
  };
  if (dtype != DType::f32 && dtype != DType::f64) bad("dtype must be f32 or f64");
  if (lanes < 1 || lanes > 64) bad("lanes must be in 1..64");
  if (mr < 1 || mr > 64) bad("mr must be in 1..64");
  if (nr < 1 || nr % lanes != 0) bad("nr must be a positive multiple of lanes");
  if (kUnroll < 1 || kUnroll > 16) bad("kUnroll must be in 1..16");
  if (directAMaxN < 0) bad("directAMaxN must be >= 0");
  if (kc < 1 || mc < mr || mc % mr != 0 || nc < nr || nc % nr != 0)
    bad("need kc >= 1, mc a multiple of mr, nc a multiple of nr");
}

std::string GemmKernelConfig::name() const {
  return fmt::format("{}_{}x{}_v{}_u{}{}", dtypeName(dtype), mr, nr, lanes, kUnroll,
                     fma ? "" : "_nofma");
}

namespace {

// Builds the kernel body; one instance per emitted function.
class MicroKernelEmitter {
 public:
  MicroKernelEmitter(llvm::Module& m, const GemmKernelConfig& cfg, GemmAForm form)
      : m_(m), ctx_(m.getContext()), cfg_(cfg), form_(form), b_(ctx_) {
    elemTy_ = cfg.dtype == DType::f64 ? llvm::Type::getDoubleTy(ctx_) : llvm::Type::getFloatTy(ctx_);
    vecTy_ = llvm::FixedVectorType::get(elemTy_, cfg.lanes);
    i64_ = llvm::Type::getInt64Ty(ctx_);
    ptrTy_ = llvm::PointerType::get(ctx_, 0);
    nvec_ = cfg.nr / cfg.lanes;
  }

  // The kernel `name`: a loop over the MR-row slivers of a block of rows, each tile
  // computed by an inlined copy of the tile function.
  llvm::Function* emit(std::string_view name);

 private:
  llvm::FunctionType* signature();
  // One rows x NR tile (rows <= MR; rows >= the mr argument skipped): an internal
  // function, always inlined.
  llvm::Function* emitTile(const std::string& name, int rows);
  using Accs = std::vector<llvm::Value*>;  // mr * nvec, row-major

  llvm::Value* c64(int64_t v) { return llvm::ConstantInt::get(i64_, v); }
  llvm::Align elemAlign() const { return llvm::Align(cfg_.elementBytes()); }
  llvm::Align vecAlign() const { return llvm::Align(cfg_.elementBytes() * cfg_.lanes); }
  llvm::Value* fma(llvm::Value* a, llvm::Value* b, llvm::Value* c) {
    return b_.CreateIntrinsic(cfg_.fma ? llvm::Intrinsic::fma : llvm::Intrinsic::fmuladd,
                              {vecTy_}, {a, b, c});
  }
  void prefetch(llvm::Value* p, int write) {
    b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {ptrTy_},
                       {p, b_.getInt32(write), b_.getInt32(3), b_.getInt32(1)});
  }
  // The address of A(i, k).
  llvm::Value* aAddr(int i, llvm::Value* k);
  // Step k: acc[i][j] += A(i, k) * Bp[k*nr + j*lanes ...].
  void emitStep(Accs& acc, llvm::Value* k);
  // for (k = kBegin; k < kEnd; k += unroll), accumulators in phis (registers); the caller
  // guarantees kBegin < kEnd and a multiple of unroll between them. Returns the
  // accumulators after the loop, with the builder at the loop's exit.
  Accs emitLoop(llvm::Value* kBegin, llvm::Value* kEnd, int unroll, const Accs& init,
                const std::string& tag);
  // The epilogue: C = alpha * acc + beta * C on the mr x nr corner of the tile.
  void emitStore(const Accs& acc, llvm::Value* c, llvm::Value* ldc, llvm::Value* mr,
                 llvm::Value* nr, llvm::Value* alpha, llvm::Value* beta);

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  const GemmKernelConfig& cfg_;
  const GemmAForm form_;
  llvm::IRBuilder<> b_;
  llvm::Type* elemTy_;
  llvm::FixedVectorType* vecTy_;
  llvm::Type* i64_;
  llvm::Type* ptrTy_;
  int nvec_;
  llvm::Function* fn_ = nullptr;
  int rows_ = 0;                     // rows of A the tile being emitted computes (<= MR)
  llvm::Value* ap_ = nullptr;        // packed A sliver
  std::vector<llvm::Value*> aRows_;  // direct A: the MR row pointers
  llvm::Value* bp_ = nullptr;
};

llvm::Value* MicroKernelEmitter::aAddr(int i, llvm::Value* k) {
  if (form_ == GemmAForm::packed)
    return b_.CreateInBoundsGEP(elemTy_, ap_, b_.CreateAdd(b_.CreateMul(k, c64(cfg_.mr)), c64(i)));
  return b_.CreateInBoundsGEP(elemTy_, aRows_[i], k);
}

void MicroKernelEmitter::emitStep(Accs& acc, llvm::Value* k) {
  std::vector<llvm::Value*> bv(nvec_);
  auto* bRow = b_.CreateInBoundsGEP(elemTy_, bp_, b_.CreateMul(k, c64(cfg_.nr)));
  for (int j = 0; j < nvec_; ++j) {
    auto* p = b_.CreateConstInBoundsGEP1_64(elemTy_, bRow, int64_t{j} * cfg_.lanes);
    bv[j] = b_.CreateAlignedLoad(vecTy_, p, vecAlign(), "b");
  }
  for (int i = 0; i < rows_; ++i) {
    auto* a = b_.CreateVectorSplat(cfg_.lanes, b_.CreateAlignedLoad(elemTy_, aAddr(i, k), elemAlign(), "a"));
    for (int j = 0; j < nvec_; ++j) acc[i * nvec_ + j] = fma(a, bv[j], acc[i * nvec_ + j]);
  }
}

MicroKernelEmitter::Accs MicroKernelEmitter::emitLoop(llvm::Value* kBegin, llvm::Value* kEnd, int unroll,
                                                      const Accs& init, const std::string& tag) {
  auto* pre = b_.GetInsertBlock();
  auto* loop = llvm::BasicBlock::Create(ctx_, tag, fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, tag + ".exit", fn_);
  b_.CreateBr(loop);
  b_.SetInsertPoint(loop);
  auto* k = b_.CreatePHI(i64_, 2, tag + ".k");
  std::vector<llvm::PHINode*> phis;
  Accs acc;
  for (size_t a = 0; a < init.size(); ++a) {
    phis.push_back(b_.CreatePHI(vecTy_, 2, "acc"));
    acc.push_back(phis.back());
  }
  for (int s = 0; s < unroll; ++s) emitStep(acc, s == 0 ? k : b_.CreateAdd(k, c64(s)));
  auto* kNext = b_.CreateAdd(k, c64(unroll));
  b_.CreateCondBr(b_.CreateICmpSLT(kNext, kEnd), loop, exit);
  k->addIncoming(kBegin, pre);
  k->addIncoming(kNext, loop);
  for (size_t a = 0; a < phis.size(); ++a) {
    phis[a]->addIncoming(init[a], pre);
    phis[a]->addIncoming(acc[a], loop);
  }
  b_.SetInsertPoint(exit);
  return acc;
}

void MicroKernelEmitter::emitStore(const Accs& acc, llvm::Value* c, llvm::Value* ldc,
                                   llvm::Value* mr, llvm::Value* nr, llvm::Value* alpha,
                                   llvm::Value* beta) {
  auto* alphaV = b_.CreateVectorSplat(cfg_.lanes, alpha);
  auto* betaV = b_.CreateVectorSplat(cfg_.lanes, beta);
  std::vector<llvm::Value*> scaled(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) scaled[i] = b_.CreateFMul(acc[i], alphaV);
  auto rowPtr = [&](int i, int j) {
    auto* row = b_.CreateInBoundsGEP(elemTy_, c, b_.CreateMul(ldc, c64(i)));
    return b_.CreateConstInBoundsGEP1_64(elemTy_, row, j * cfg_.lanes);
  };

  auto* fullBB = llvm::BasicBlock::Create(ctx_, "full", fn_);
  auto* fullOverwriteBB = llvm::BasicBlock::Create(ctx_, "full.overwrite", fn_);
  auto* fullUpdateBB = llvm::BasicBlock::Create(ctx_, "full.update", fn_);
  auto* edgeBB = llvm::BasicBlock::Create(ctx_, "edge", fn_);
  auto* doneBB = llvm::BasicBlock::Create(ctx_, "done", fn_);
  auto* betaZero = b_.CreateFCmpOEQ(beta, llvm::ConstantFP::get(elemTy_, 0.0), "beta.zero");
  auto* isFull = b_.CreateAnd(b_.CreateICmpEQ(mr, c64(rows_)), b_.CreateICmpEQ(nr, c64(cfg_.nr)));
  b_.CreateCondBr(isFull, fullBB, edgeBB);

  // Whole tile: plain (unaligned) vector stores; C is not read when beta == 0.
  b_.SetInsertPoint(fullBB);
  b_.CreateCondBr(betaZero, fullOverwriteBB, fullUpdateBB);
  b_.SetInsertPoint(fullOverwriteBB);
  for (int i = 0; i < rows_; ++i)
    for (int j = 0; j < nvec_; ++j)
      b_.CreateAlignedStore(scaled[i * nvec_ + j], rowPtr(i, j), elemAlign());
  b_.CreateBr(doneBB);
  b_.SetInsertPoint(fullUpdateBB);
  for (int i = 0; i < rows_; ++i)
    for (int j = 0; j < nvec_; ++j) {
      auto* p = rowPtr(i, j);
      auto* old = b_.CreateAlignedLoad(vecTy_, p, elemAlign(), "c");
      b_.CreateAlignedStore(fma(betaV, old, scaled[i * nvec_ + j]), p, elemAlign());
    }
  b_.CreateBr(doneBB);

  // Edge tile: rows below mr are skipped, columns past nr masked off. The masked load
  // touches only columns < nr, and its value is discarded when beta == 0.
  b_.SetInsertPoint(edgeBB);
  std::vector<llvm::Constant*> laneIdx;
  for (int l = 0; l < cfg_.lanes; ++l) laneIdx.push_back(llvm::ConstantInt::get(i64_, l));
  auto* lanes = llvm::ConstantVector::get(laneIdx);
  std::vector<llvm::Value*> masks(nvec_);
  for (int j = 0; j < nvec_; ++j) {
    auto* remain = b_.CreateSub(nr, c64(int64_t{j} * cfg_.lanes));
    masks[j] = b_.CreateICmpSLT(lanes, b_.CreateVectorSplat(cfg_.lanes, remain), "mask");
  }
  auto* zero = llvm::ConstantAggregateZero::get(vecTy_);
  for (int i = 0; i < rows_; ++i) {
    auto* rowBB = llvm::BasicBlock::Create(ctx_, fmt::format("edge.row{}", i), fn_);
    auto* nextBB = i + 1 < rows_ ? llvm::BasicBlock::Create(ctx_, fmt::format("edge.after{}", i), fn_)
                                   : doneBB;
    b_.CreateCondBr(b_.CreateICmpSLT(c64(i), mr), rowBB, doneBB);
    b_.SetInsertPoint(rowBB);
    for (int j = 0; j < nvec_; ++j) {
      auto* p = rowPtr(i, j);
      auto* old = b_.CreateMaskedLoad(vecTy_, p, elemAlign(), masks[j], zero, "c");
      auto* upd = b_.CreateSelect(betaZero, scaled[i * nvec_ + j], fma(betaV, old, scaled[i * nvec_ + j]));
      b_.CreateMaskedStore(upd, p, elemAlign(), masks[j]);
    }
    b_.CreateBr(nextBB);
    if (nextBB != doneBB) b_.SetInsertPoint(nextBB);
  }

  b_.SetInsertPoint(doneBB);
  b_.CreateRetVoid();
}

llvm::FunctionType* MicroKernelEmitter::signature() {
  std::vector<llvm::Type*> params = {i64_, ptrTy_};  // kc, A
  if (form_ == GemmAForm::direct) params.push_back(i64_);  // lda
  for (llvm::Type* t : {ptrTy_, ptrTy_, i64_, i64_, i64_, elemTy_, elemTy_}) params.push_back(t);
  return llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), params, false);
}

llvm::Function* MicroKernelEmitter::emit(std::string_view name) {
  const bool direct = form_ == GemmAForm::direct;
  const std::string outer(name);
  // The full tile, and tiles of a third and two thirds of MR rows for the last sliver of
  // a block whose rows are not a multiple of MR (128 rows = 21 x 6 + 2: the 2-row tile
  // does a third of the FMAs of a full one). A remainder runs on the smallest of them that
  // covers it. Two short tiles, each called from one place, rather than one per row count
  // keep the JIT time down.
  llvm::Function* tile = emitTile(outer + ".tile", cfg_.mr);
  const int small = cfg_.mr / 3, large = 2 * cfg_.mr / 3;  // 2 and 4 rows for MR = 6
  llvm::Function* smallTile = small >= 1 ? emitTile(fmt::format("{}.tile{}", outer, small), small) : nullptr;
  llvm::Function* largeTile =
      large > small ? emitTile(fmt::format("{}.tile{}", outer, large), large) : nullptr;
  const int shortMax = largeTile ? large : small;  // remainders up to this take a short tile

  auto* fn = llvm::Function::Create(signature(), llvm::Function::ExternalLinkage, outer, m_);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  const unsigned o = direct ? 1 : 0;  // arguments after A shift by one for lda
  for (unsigned a : {1u, 2u + o, 3u + o}) {
    fn->addParamAttr(a, llvm::Attribute::NoAlias);
    fn->addParamAttr(a, llvm::Attribute::NoCapture);
  }
  fn->addParamAttr(1, llvm::Attribute::ReadOnly);
  fn->addParamAttr(2 + o, llvm::Attribute::ReadOnly);
  std::vector<llvm::Value*> args;
  for (auto& arg : fn->args()) args.push_back(&arg);
  llvm::Value* kc = args[0];
  llvm::Value* a = args[1];
  llvm::Value* lda = direct ? args[2] : nullptr;
  llvm::Value* c = args[3 + o];
  llvm::Value* ldc = args[4 + o];
  llvm::Value* m = args[5 + o];
  m->setName("m");
  // The arguments of the tile at `row` computing `rows` rows.
  auto tileArgs = [&](llvm::Value* row, llvm::Value* rows) {
    std::vector<llvm::Value*> call = args;
    call[1] = direct ? b_.CreateInBoundsGEP(elemTy_, a, b_.CreateMul(row, lda))
                     : b_.CreateInBoundsGEP(elemTy_, a, b_.CreateMul(row, kc));  // slivers are kc*MR apart
    call[3 + o] = b_.CreateInBoundsGEP(elemTy_, c, b_.CreateMul(row, ldc));
    call[5 + o] = rows;
    return call;
  };

  // for (row = 0; row < loopEnd; row += MR) tile(row, min(MR, m - row)), where loopEnd
  // stops before a remainder that a short tile takes; then that short tile.
  auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn);
  auto* loop = llvm::BasicBlock::Create(ctx_, "sliver", fn);
  auto* tail = llvm::BasicBlock::Create(ctx_, "tail", fn);
  auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn);
  b_.SetInsertPoint(entry);
  auto* rem = b_.CreateSRem(m, c64(cfg_.mr), "rem");
  auto* shortRem = b_.CreateAnd(b_.CreateICmpSGT(rem, c64(0)), b_.CreateICmpSLE(rem, c64(shortMax)), "short.rem");
  auto* loopEnd = b_.CreateSelect(shortRem, b_.CreateSub(m, rem), m, "loop.end");
  b_.CreateCondBr(b_.CreateICmpSGT(loopEnd, c64(0)), loop, tail);
  b_.SetInsertPoint(loop);
  auto* row = b_.CreatePHI(i64_, 2, "row");
  auto* left = b_.CreateSub(m, row);
  b_.CreateCall(tile, tileArgs(row, b_.CreateSelect(b_.CreateICmpSLT(left, c64(cfg_.mr)), left, c64(cfg_.mr), "mr")));
  auto* next = b_.CreateAdd(row, c64(cfg_.mr));
  b_.CreateCondBr(b_.CreateICmpSLT(next, loopEnd), loop, tail);
  row->addIncoming(c64(0), entry);
  row->addIncoming(next, loop);

  b_.SetInsertPoint(tail);
  if (smallTile) {
    auto* smallBB = llvm::BasicBlock::Create(ctx_, "tail.small", fn);
    auto* notSmallBB = llvm::BasicBlock::Create(ctx_, "tail.not.small", fn);
    b_.CreateCondBr(b_.CreateAnd(shortRem, b_.CreateICmpSLE(rem, c64(small))), smallBB, notSmallBB);
    b_.SetInsertPoint(smallBB);
    b_.CreateCall(smallTile, tileArgs(loopEnd, rem));
    b_.CreateBr(exit);
    b_.SetInsertPoint(notSmallBB);
  }
  if (largeTile) {
    auto* largeBB = llvm::BasicBlock::Create(ctx_, "tail.large", fn);
    b_.CreateCondBr(shortRem, largeBB, exit);
    b_.SetInsertPoint(largeBB);
    b_.CreateCall(largeTile, tileArgs(loopEnd, rem));
  }
  b_.CreateBr(exit);
  b_.SetInsertPoint(exit);
  b_.CreateRetVoid();
  return fn;
}

llvm::Function* MicroKernelEmitter::emitTile(const std::string& name, int rows) {
  const bool direct = form_ == GemmAForm::direct;
  rows_ = rows;
  aRows_.clear();
  fn_ = llvm::Function::Create(signature(), llvm::Function::InternalLinkage, name, m_);
  fn_->addFnAttr(llvm::Attribute::NoUnwind);
  fn_->addFnAttr(llvm::Attribute::AlwaysInline);
  const unsigned o = direct ? 1 : 0;
  for (unsigned a : {1u, 2u + o, 3u + o}) {
    fn_->addParamAttr(a, llvm::Attribute::NoAlias);
    fn_->addParamAttr(a, llvm::Attribute::NoCapture);
  }
  auto* args = fn_->arg_begin();
  llvm::Value* kc = &args[0];
  llvm::Value* a = &args[1];
  llvm::Value* lda = direct ? &args[2] : nullptr;
  bp_ = &args[2 + o];
  llvm::Value* c = &args[3 + o];
  llvm::Value* ldc = &args[4 + o];
  llvm::Value* mr = &args[5 + o];
  llvm::Value* nr = &args[6 + o];
  llvm::Value* alpha = &args[7 + o];
  llvm::Value* beta = &args[8 + o];
  for (auto [v, n] : {std::pair{kc, "kc"}, {a, "a"}, {bp_, "bp"}, {c, "c"}, {ldc, "ldc"}, {mr, "mr"},
                      {nr, "nr"}, {alpha, "alpha"}, {beta, "beta"}})
    v->setName(n);
  if (lda) lda->setName("lda");

  auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn_);
  b_.SetInsertPoint(entry);
  if (direct) {
    // Rows past mr alias the last valid row: they are computed, never stored, and A is
    // never read outside the matrix.
    for (int i = 0; i < rows_; ++i) {
      auto* row = b_.CreateSelect(b_.CreateICmpSLT(c64(i), mr), c64(i), b_.CreateSub(mr, c64(1)));
      aRows_.push_back(b_.CreateInBoundsGEP(elemTy_, a, b_.CreateMul(row, lda), fmt::format("a.row{}", i)));
    }
  } else {
    ap_ = a;
  }
  // Touch the C tile early so that its cache misses overlap the FMA loop, and the tile
  // below it (the next call of this function in the sliver loop), so that those misses
  // have a whole tile's time to complete. The first and the last element of each row: a
  // row of NR elements may straddle two cache lines. Prefetches never fault, so the rows
  // past the matrix's end are harmless.
  const int lineElems = 64 / cfg_.elementBytes();
  for (int i = 0; i < (rows_ == cfg_.mr ? 2 * rows_ : rows_); ++i) {
    auto* row = b_.CreateGEP(elemTy_, c, b_.CreateMul(ldc, c64(i)));
    for (int col = 0; col < cfg_.nr; col += lineElems) prefetch(b_.CreateConstGEP1_64(elemTy_, row, col), 1);
    prefetch(b_.CreateConstGEP1_64(elemTy_, row, cfg_.nr - 1), 1);
  }

  // k in [0, kMain) by kUnroll steps, then [kMain, kc) one step at a time.
  // Short tiles run once per block at most: no unrolling, which keeps the JIT time down.
  const int u = rows_ == cfg_.mr ? cfg_.kUnroll : 1;
  auto* kMain = b_.CreateSub(kc, b_.CreateSRem(kc, c64(u)), "k.main.end");
  const Accs zeros(static_cast<size_t>(rows_) * nvec_, llvm::ConstantAggregateZero::get(vecTy_));
  auto* mainPre = llvm::BasicBlock::Create(ctx_, "k.main.pre", fn_);
  auto* mid = llvm::BasicBlock::Create(ctx_, "k.mid", fn_);
  b_.CreateCondBr(b_.CreateICmpSGT(kMain, c64(0)), mainPre, mid);
  b_.SetInsertPoint(mainPre);
  Accs accMain = emitLoop(c64(0), kMain, u, zeros, "k.main");
  auto* mainExit = b_.GetInsertBlock();
  b_.CreateBr(mid);

  b_.SetInsertPoint(mid);
  Accs accMid;
  for (size_t i = 0; i < zeros.size(); ++i) {
    auto* phi = b_.CreatePHI(vecTy_, 2, "acc.mid");
    phi->addIncoming(zeros[i], entry);
    phi->addIncoming(accMain[i], mainExit);
    accMid.push_back(phi);
  }
  auto* remPre = llvm::BasicBlock::Create(ctx_, "k.rem.pre", fn_);
  auto* epi = llvm::BasicBlock::Create(ctx_, "epilogue", fn_);
  b_.CreateCondBr(b_.CreateICmpSLT(kMain, kc), remPre, epi);
  b_.SetInsertPoint(remPre);
  Accs accRem = emitLoop(kMain, kc, 1, accMid, "k.rem");
  auto* remExit = b_.GetInsertBlock();
  b_.CreateBr(epi);

  b_.SetInsertPoint(epi);
  Accs accEnd;
  for (size_t i = 0; i < zeros.size(); ++i) {
    auto* phi = b_.CreatePHI(vecTy_, 2, "acc.end");
    phi->addIncoming(accMid[i], mid);
    phi->addIncoming(accRem[i], remExit);
    accEnd.push_back(phi);
  }
  emitStore(accEnd, c, ldc, mr, nr, alpha, beta);
  return fn_;
}

}  // namespace

llvm::Function* emitGemmMicroKernel(llvm::Module& module, const GemmKernelConfig& config,
                                    std::string_view name, GemmAForm form) {
  config.validate();
  return MicroKernelEmitter(module, config, form).emit(name);
}

}  // namespace tgc::codegen
