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
  // B sliver kc x nr in L1 (16 KiB for 256 x 16 floats); A block mc x kc in L2.
  c.kc = 256;
  c.mc = c.mr * 24;
  c.nc = c.nr * (4096 / c.nr);
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
  if (prefetchA < 0 || prefetchA > 65536) bad("prefetchA must be in 0..65536");
  if (kc < 1 || mc < mr || mc % mr != 0 || nc < nr || nc % nr != 0)
    bad("need kc >= 1, mc a multiple of mr, nc a multiple of nr");
}

std::string GemmKernelConfig::name() const {
  return fmt::format("{}_{}x{}_v{}_u{}{}{}", dtypeName(dtype), mr, nr, lanes, kUnroll,
                     fma ? "" : "_nofma", prefetchA > 0 ? fmt::format("_pa{}", prefetchA) : "");
}

namespace {

// Builds the kernel body; one instance per emitted function.
class MicroKernelEmitter {
 public:
  MicroKernelEmitter(llvm::Module& m, const GemmKernelConfig& cfg)
      : m_(m), ctx_(m.getContext()), cfg_(cfg), b_(ctx_) {
    elemTy_ = cfg.dtype == DType::f64 ? llvm::Type::getDoubleTy(ctx_) : llvm::Type::getFloatTy(ctx_);
    vecTy_ = llvm::FixedVectorType::get(elemTy_, cfg.lanes);
    i64_ = llvm::Type::getInt64Ty(ctx_);
    ptrTy_ = llvm::PointerType::get(ctx_, 0);
    nvec_ = cfg.nr / cfg.lanes;
  }

  llvm::Function* emit(std::string_view name);

 private:
  using Accs = std::vector<llvm::Value*>;  // mr * nvec, row-major

  llvm::Value* c64(int64_t v) { return llvm::ConstantInt::get(i64_, v); }
  llvm::Align elemAlign() const { return llvm::Align(cfg_.elementBytes()); }
  llvm::Align vecAlign() const { return llvm::Align(cfg_.elementBytes() * cfg_.lanes); }
  llvm::Value* fma(llvm::Value* a, llvm::Value* b, llvm::Value* c) {
    return b_.CreateIntrinsic(cfg_.fma ? llvm::Intrinsic::fma : llvm::Intrinsic::fmuladd,
                              {vecTy_}, {a, b, c});
  }
  // One k step: acc[i][j] += Ap[step*mr + i] * Bp[step*nr + j*lanes ...].
  void emitStep(Accs& acc, llvm::Value* ap, llvm::Value* bp, int step);
  // The epilogue: C = alpha * acc + beta * C on the mr x nr corner of the tile.
  void emitStore(const Accs& acc, llvm::Value* c, llvm::Value* ldc, llvm::Value* mr,
                 llvm::Value* nr, llvm::Value* alpha, llvm::Value* beta);

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  const GemmKernelConfig& cfg_;
  llvm::IRBuilder<> b_;
  llvm::Type* elemTy_;
  llvm::FixedVectorType* vecTy_;
  llvm::Type* i64_;
  llvm::Type* ptrTy_;
  int nvec_;
  llvm::Function* fn_ = nullptr;
};

void MicroKernelEmitter::emitStep(Accs& acc, llvm::Value* ap, llvm::Value* bp, int step) {
  std::vector<llvm::Value*> bv(nvec_);
  for (int j = 0; j < nvec_; ++j) {
    auto* p = b_.CreateConstInBoundsGEP1_64(elemTy_, bp, step * cfg_.nr + j * cfg_.lanes);
    bv[j] = b_.CreateAlignedLoad(vecTy_, p, vecAlign(), "b");
  }
  for (int i = 0; i < cfg_.mr; ++i) {
    auto* p = b_.CreateConstInBoundsGEP1_64(elemTy_, ap, step * cfg_.mr + i);
    auto* a = b_.CreateVectorSplat(cfg_.lanes, b_.CreateAlignedLoad(elemTy_, p, elemAlign(), "a"));
    for (int j = 0; j < nvec_; ++j) acc[i * nvec_ + j] = fma(a, bv[j], acc[i * nvec_ + j]);
  }
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
  auto* isFull = b_.CreateAnd(b_.CreateICmpEQ(mr, c64(cfg_.mr)), b_.CreateICmpEQ(nr, c64(cfg_.nr)));
  b_.CreateCondBr(isFull, fullBB, edgeBB);

  // Whole tile: plain (unaligned) vector stores; C is not read when beta == 0.
  b_.SetInsertPoint(fullBB);
  b_.CreateCondBr(betaZero, fullOverwriteBB, fullUpdateBB);
  b_.SetInsertPoint(fullOverwriteBB);
  for (int i = 0; i < cfg_.mr; ++i)
    for (int j = 0; j < nvec_; ++j)
      b_.CreateAlignedStore(scaled[i * nvec_ + j], rowPtr(i, j), elemAlign());
  b_.CreateBr(doneBB);
  b_.SetInsertPoint(fullUpdateBB);
  for (int i = 0; i < cfg_.mr; ++i)
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
  for (int i = 0; i < cfg_.mr; ++i) {
    auto* rowBB = llvm::BasicBlock::Create(ctx_, fmt::format("edge.row{}", i), fn_);
    auto* nextBB = i + 1 < cfg_.mr ? llvm::BasicBlock::Create(ctx_, fmt::format("edge.after{}", i), fn_)
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

llvm::Function* MicroKernelEmitter::emit(std::string_view name) {
  auto* voidTy = llvm::Type::getVoidTy(ctx_);
  auto* fty = llvm::FunctionType::get(
      voidTy, {i64_, ptrTy_, ptrTy_, ptrTy_, i64_, i64_, i64_, elemTy_, elemTy_}, false);
  fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage,
                               llvm::StringRef(name.data(), name.size()), m_);
  fn_->addFnAttr(llvm::Attribute::NoUnwind);
  for (unsigned a : {1u, 2u, 3u}) {
    fn_->addParamAttr(a, llvm::Attribute::NoAlias);
    fn_->addParamAttr(a, llvm::Attribute::NoCapture);
  }
  fn_->addParamAttr(1, llvm::Attribute::ReadOnly);
  fn_->addParamAttr(2, llvm::Attribute::ReadOnly);
  auto args = fn_->arg_begin();
  llvm::Value* kc = &args[0];
  llvm::Value* ap = &args[1];
  llvm::Value* bp = &args[2];
  llvm::Value* c = &args[3];
  llvm::Value* ldc = &args[4];
  llvm::Value* mr = &args[5];
  llvm::Value* nr = &args[6];
  llvm::Value* alpha = &args[7];
  llvm::Value* beta = &args[8];
  kc->setName("kc");
  ap->setName("ap");
  bp->setName("bp");
  c->setName("c");
  ldc->setName("ldc");
  mr->setName("mr");
  nr->setName("nr");
  alpha->setName("alpha");
  beta->setName("beta");

  auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn_);
  auto* mainBB = llvm::BasicBlock::Create(ctx_, "k.main", fn_);
  auto* midBB = llvm::BasicBlock::Create(ctx_, "k.mid", fn_);
  auto* remBB = llvm::BasicBlock::Create(ctx_, "k.rem", fn_);
  auto* epiBB = llvm::BasicBlock::Create(ctx_, "epilogue", fn_);
  const int nacc = cfg_.mr * nvec_;
  const int u = cfg_.kUnroll;

  // Entry: touch the C tile early so its cache misses overlap the FMA loop.
  b_.SetInsertPoint(entry);
  const int lineElems = 64 / cfg_.elementBytes();
  for (int i = 0; i < cfg_.mr; ++i)
    for (int col = 0; col < cfg_.nr; col += lineElems) {
      auto* row = b_.CreateGEP(elemTy_, c, b_.CreateMul(ldc, c64(i)));
      auto* p = b_.CreateConstGEP1_64(elemTy_, row, col);
      b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {ptrTy_},
                         {p, b_.getInt32(1), b_.getInt32(3), b_.getInt32(1)});
    }
  auto* kMain = b_.CreateSub(kc, b_.CreateSRem(kc, c64(u)), "k.main.end");
  b_.CreateCondBr(b_.CreateICmpSGT(kMain, c64(0)), mainBB, midBB);

  auto* zero = llvm::ConstantAggregateZero::get(vecTy_);
  // Main loop: kUnroll k steps per trip, accumulators carried in phis (registers).
  b_.SetInsertPoint(mainBB);
  auto* kPhi = b_.CreatePHI(i64_, 2, "k");
  auto* apPhi = b_.CreatePHI(ptrTy_, 2, "ap.cur");
  auto* bpPhi = b_.CreatePHI(ptrTy_, 2, "bp.cur");
  Accs accPhi(nacc);
  for (int a = 0; a < nacc; ++a) accPhi[a] = b_.CreatePHI(vecTy_, 2, "acc");
  Accs acc(accPhi.begin(), accPhi.end());
  if (cfg_.prefetchA > 0)
    b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {ptrTy_},
                       {b_.CreateConstGEP1_64(b_.getInt8Ty(), apPhi, cfg_.prefetchA), b_.getInt32(0),
                        b_.getInt32(3), b_.getInt32(1)});
  for (int s = 0; s < u; ++s) emitStep(acc, apPhi, bpPhi, s);
  auto* kNext = b_.CreateAdd(kPhi, c64(u));
  auto* apNext = b_.CreateConstInBoundsGEP1_64(elemTy_, apPhi, int64_t{u} * cfg_.mr);
  auto* bpNext = b_.CreateConstInBoundsGEP1_64(elemTy_, bpPhi, int64_t{u} * cfg_.nr);
  b_.CreateCondBr(b_.CreateICmpSLT(kNext, kMain), mainBB, midBB);
  kPhi->addIncoming(c64(0), entry);
  kPhi->addIncoming(kNext, mainBB);
  apPhi->addIncoming(ap, entry);
  apPhi->addIncoming(apNext, mainBB);
  bpPhi->addIncoming(bp, entry);
  bpPhi->addIncoming(bpNext, mainBB);
  for (int a = 0; a < nacc; ++a) {
    llvm::cast<llvm::PHINode>(accPhi[a])->addIncoming(zero, entry);
    llvm::cast<llvm::PHINode>(accPhi[a])->addIncoming(acc[a], mainBB);
  }

  // Between the loops: merge the state from entry (no main trips) and the main loop.
  b_.SetInsertPoint(midBB);
  auto* apMid = b_.CreatePHI(ptrTy_, 2, "ap.mid");
  apMid->addIncoming(ap, entry);
  apMid->addIncoming(apNext, mainBB);
  auto* bpMid = b_.CreatePHI(ptrTy_, 2, "bp.mid");
  bpMid->addIncoming(bp, entry);
  bpMid->addIncoming(bpNext, mainBB);
  Accs accMid(nacc);
  for (int a = 0; a < nacc; ++a) {
    auto* phi = b_.CreatePHI(vecTy_, 2, "acc.mid");
    phi->addIncoming(zero, entry);
    phi->addIncoming(acc[a], mainBB);
    accMid[a] = phi;
  }
  b_.CreateCondBr(b_.CreateICmpSLT(kMain, kc), remBB, epiBB);

  // Remainder loop: one k step per trip for the last kc % kUnroll steps.
  b_.SetInsertPoint(remBB);
  auto* k2 = b_.CreatePHI(i64_, 2, "k.rem");
  auto* ap2 = b_.CreatePHI(ptrTy_, 2, "ap.rem");
  auto* bp2 = b_.CreatePHI(ptrTy_, 2, "bp.rem");
  Accs acc2Phi(nacc);
  for (int a = 0; a < nacc; ++a) acc2Phi[a] = b_.CreatePHI(vecTy_, 2, "acc.rem");
  Accs acc2(acc2Phi.begin(), acc2Phi.end());
  emitStep(acc2, ap2, bp2, 0);
  auto* k2Next = b_.CreateAdd(k2, c64(1));
  auto* ap2Next = b_.CreateConstInBoundsGEP1_64(elemTy_, ap2, cfg_.mr);
  auto* bp2Next = b_.CreateConstInBoundsGEP1_64(elemTy_, bp2, cfg_.nr);
  b_.CreateCondBr(b_.CreateICmpSLT(k2Next, kc), remBB, epiBB);
  k2->addIncoming(kMain, midBB);
  k2->addIncoming(k2Next, remBB);
  ap2->addIncoming(apMid, midBB);
  ap2->addIncoming(ap2Next, remBB);
  bp2->addIncoming(bpMid, midBB);
  bp2->addIncoming(bp2Next, remBB);
  for (int a = 0; a < nacc; ++a) {
    llvm::cast<llvm::PHINode>(acc2Phi[a])->addIncoming(accMid[a], midBB);
    llvm::cast<llvm::PHINode>(acc2Phi[a])->addIncoming(acc2[a], remBB);
  }

  // Epilogue: scale and write the tile.
  b_.SetInsertPoint(epiBB);
  Accs accEnd(nacc);
  for (int a = 0; a < nacc; ++a) {
    auto* phi = b_.CreatePHI(vecTy_, 2, "acc.end");
    phi->addIncoming(accMid[a], midBB);
    phi->addIncoming(acc2[a], remBB);
    accEnd[a] = phi;
  }
  emitStore(accEnd, c, ldc, mr, nr, alpha, beta);
  return fn_;
}

}  // namespace

llvm::Function* emitGemmMicroKernel(llvm::Module& module, const GemmKernelConfig& config,
                                    std::string_view name) {
  config.validate();
  return MicroKernelEmitter(module, config).emit(name);
}

}  // namespace tgc::codegen
