#include "codegen/llvm_emitter.h"

#include <fmt/format.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>

#include <functional>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "codegen/llvm_math.h"

namespace tgc::codegen {

namespace {

using kir::BinaryOp;
using kir::Expr;
using kir::ExprKind;
using kir::Stmt;
using kir::StmtKind;
using kir::UnaryOp;

bool isComputeFloat(DType t) { return t == DType::f32 || t == DType::f64; }

// Emits one kernel. Values in registers: f32 float, f64 double, i32, i64, bool i1, f16
// half, bf16 i16 (its bits: LLVM's bfloat conversions need libcalls on most x86 CPUs).
class KernelEmitter {
 public:
  KernelEmitter(const kir::Kernel& k, llvm::Module& m, int vectorBits)
      : k_(k), m_(m), ctx_(m.getContext()), b_(ctx_), vectorBits_(vectorBits) {}

  void emit();

 private:
  llvm::Type* regType(DType t);
  llvm::Type* memType(DType t);
  llvm::Value* i64(int64_t v) { return b_.getInt64(static_cast<uint64_t>(v)); }

  llvm::Function* emitImpl();
  void emitWrapper(llvm::Function* impl);

  void stmts(const std::vector<kir::StmtP>& body);
  void stmt(const Stmt& s);
  void loop(const Stmt& s);
  void ifStmt(const Stmt& s);
  llvm::MDNode* loopMetadata(const Stmt& s);

  // `index`: the expression is (part of) a buffer index, whose i64 arithmetic cannot
  // overflow in a valid kernel, so it gets `nsw` (which lets LLVM see consecutive accesses).
  llvm::Value* expr(const kir::ExprP& e, bool index = false);
  llvm::Value* exprUncached(const Expr& e, bool index);
  llvm::Value* constant(const Expr& e);
  llvm::Value* address(int buffer, const kir::ExprP& index);
  llvm::Value* unary(const Expr& e, llvm::Value* x);
  llvm::Value* binary(const Expr& e, llvm::Value* a, llvm::Value* b, bool index);
  llvm::Value* intDivRem(BinaryOp op, llvm::Value* a, llvm::Value* b);
  llvm::Value* pow(const Expr& e, llvm::Value* a, llvm::Value* b);
  llvm::Value* cast(llvm::Value* v, DType from, DType to);
  llvm::Value* toF32(llvm::Value* v, DType from);
  llvm::Value* fromF32(llvm::Value* v, DType to);
  llvm::Value* libmCall(const char* name, llvm::Value* x);
  llvm::Value* fast(llvm::Value* v);

  const kir::Kernel& k_;
  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  int vectorBits_;
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  std::vector<llvm::Value*> bufs_;  // the impl's pointer arguments
  // Loop variables: their current i64 value; locals: their stack slot (promoted to
  // registers by SROA).
  std::vector<llvm::Value*> vars_;
  std::vector<bool> isLocal_;
  // Expressions already emitted within the current statement (trees are DAGs; a
  // statement's expressions are straight-line code, so any earlier value dominates).
  std::unordered_map<const Expr*, llvm::Value*> memo_[2];
};

llvm::Type* KernelEmitter::regType(DType t) {
  switch (t) {
    case DType::f32:
      return b_.getFloatTy();
    case DType::f64:
      return b_.getDoubleTy();
    case DType::bf16:
      return b_.getInt16Ty();
    case DType::f16:
      return b_.getHalfTy();
    case DType::i32:
      return b_.getInt32Ty();
    case DType::i64:
      return b_.getInt64Ty();
    case DType::boolean:
      return b_.getInt1Ty();
  }
  throw std::logic_error("bad dtype");
}

llvm::Type* KernelEmitter::memType(DType t) {
  return t == DType::boolean ? b_.getInt8Ty() : regType(t);
}

// reassoc lets reductions vectorize, contract lets a * b + c become an FMA; no nnan/ninf:
// NaN and inf must behave as IEEE says (NaN-poison debug mode, NaN-propagating max).
llvm::Value* KernelEmitter::fast(llvm::Value* v) {
  if (auto* inst = llvm::dyn_cast<llvm::Instruction>(v);
      inst && llvm::isa<llvm::FPMathOperator>(inst)) {
    llvm::FastMathFlags f;
    f.setAllowReassoc();
    f.setAllowContract();
    inst->setFastMathFlags(f);
  }
  return v;
}

void KernelEmitter::emit() {
  if (m_.getFunction(k_.name))
    throw std::logic_error(
        fmt::format("kernel {}: the module already has a function of that name", k_.name));
  emitWrapper(emitImpl());
}

// void name.body(ptr b0, ..., i64 begin, i64 end): the kernel proper, with what is known
// about each buffer as parameter attributes, which is why it is a separate function
// (noinline: inlining would turn noalias into weaker scoped metadata).
llvm::Function* KernelEmitter::emitImpl() {
  std::vector<llvm::Type*> params(k_.buffers.size(), b_.getPtrTy());
  params.push_back(b_.getInt64Ty());
  params.push_back(b_.getInt64Ty());
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), params, false);
  fn_ = llvm::Function::Create(fty, llvm::Function::InternalLinkage, k_.name + ".body", m_);
  fn_->addFnAttr(llvm::Attribute::NoInline);
  fn_->addFnAttr(llvm::Attribute::NoUnwind);
  fn_->addFnAttr(llvm::Attribute::NoSync);
  fn_->addFnAttr(llvm::Attribute::WillReturn);
  // Without this, LLVM splits 512-bit vectors on CPUs it tunes for 256 (Skylake-X, Ice Lake).
  if (vectorBits_ > 0) fn_->addFnAttr("prefer-vector-width", std::to_string(vectorBits_));
  // A buffer that an output writes in place of is read and written through one pointer.
  std::vector<bool> writtenInPlace(k_.buffers.size(), false);
  for (size_t i = 0; i < k_.buffers.size(); ++i)
    if (int src = k_.buffers[i].inPlaceOf; src >= 0) writtenInPlace[src] = true;
  for (size_t i = 0; i < k_.buffers.size(); ++i) {
    const kir::BufferDecl& d = k_.buffers[i];
    llvm::Argument* arg = fn_->getArg(static_cast<unsigned>(i));
    arg->setName(d.name);
    // noalias holds even for an in-place pair: the output's own argument is never
    // accessed (see below), so all accesses to that memory go through the source's.
    arg->addAttr(llvm::Attribute::NoAlias);
    arg->addAttr(llvm::Attribute::NoCapture);
    // Tensors and arena offsets are 64-byte aligned.
    arg->addAttr(llvm::Attribute::getWithAlignment(ctx_, llvm::Align(64)));
    if (d.numel > 0)
      arg->addAttr(llvm::Attribute::getWithDereferenceableBytes(
          ctx_, static_cast<uint64_t>(d.numel) * dtypeSize(d.dtype)));
    if (d.access == kir::Access::Read && !writtenInPlace[i])
      arg->addAttr(llvm::Attribute::ReadOnly);
    bufs_.push_back(arg);
  }
  // An in-place output reads its source only at the index it writes, so routing its stores
  // through the source's pointer keeps both noalias: the vectorizer needs no runtime
  // overlap check (with one, the pointers always overlap and the scalar loop ran).
  for (size_t i = 0; i < k_.buffers.size(); ++i)
    if (int src = k_.buffers[i].inPlaceOf; src >= 0) bufs_[i] = bufs_[static_cast<size_t>(src)];
  llvm::Value* begin = fn_->getArg(static_cast<unsigned>(k_.buffers.size()));
  llvm::Value* end = fn_->getArg(static_cast<unsigned>(k_.buffers.size() + 1));
  begin->setName("begin");
  end->setName("end");

  entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn_);
  b_.SetInsertPoint(entry_);
  vars_.assign(k_.vars.size(), nullptr);
  isLocal_.assign(k_.vars.size(), false);
  // Stack slots for the locals (everything assigned), in the entry block.
  std::function<void(const std::vector<kir::StmtP>&)> findLocals =
      [&](const std::vector<kir::StmtP>& body) {
        for (const auto& s : body) {
          if (s->kind == StmtKind::Assign && !isLocal_[s->var]) {
            isLocal_[s->var] = true;
            vars_[s->var] =
                b_.CreateAlloca(regType(k_.vars[s->var].type), nullptr, k_.vars[s->var].name);
          }
          findLocals(s->body);
          findLocals(s->elseBody);
        }
      };
  findLocals(k_.body);

  // for (p = begin; p < end; ++p) body
  auto* header = llvm::BasicBlock::Create(ctx_, "par", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
  b_.CreateCondBr(b_.CreateICmpSLT(begin, end), header, exit);
  b_.SetInsertPoint(header);
  auto* p =
      b_.CreatePHI(b_.getInt64Ty(), 2, k_.parallelVar >= 0 ? k_.vars[k_.parallelVar].name : "p");
  p->addIncoming(begin, entry_);
  if (k_.parallelVar >= 0) vars_[k_.parallelVar] = p;
  stmts(k_.body);
  auto* next = b_.CreateAdd(p, i64(1), "p.next", /*HasNUW=*/true, /*HasNSW=*/true);
  p->addIncoming(next, b_.GetInsertBlock());
  b_.CreateCondBr(b_.CreateICmpSLT(next, end), header, exit);
  b_.SetInsertPoint(exit);
  b_.CreateRetVoid();
  return fn_;
}

// void name(void* const* buffers, i64 begin, i64 end): the kir::KernelFn ABI.
void KernelEmitter::emitWrapper(llvm::Function* impl) {
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(),
                                      {b_.getPtrTy(), b_.getInt64Ty(), b_.getInt64Ty()}, false);
  auto* fn = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, k_.name, m_);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  llvm::Argument* table = fn->getArg(0);
  table->setName("buffers");
  table->addAttr(llvm::Attribute::NoCapture);
  table->addAttr(llvm::Attribute::ReadOnly);
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn));
  std::vector<llvm::Value*> args;
  for (size_t i = 0; i < k_.buffers.size(); ++i) {
    auto* slot = b_.CreateConstInBoundsGEP1_64(b_.getPtrTy(), table, i);
    args.push_back(b_.CreateAlignedLoad(b_.getPtrTy(), slot, llvm::Align(8), k_.buffers[i].name));
  }
  args.push_back(fn->getArg(1));
  args.push_back(fn->getArg(2));
  b_.CreateCall(impl, args);
  b_.CreateRetVoid();
}

void KernelEmitter::stmts(const std::vector<kir::StmtP>& body) {
  for (const auto& s : body) stmt(*s);
}

void KernelEmitter::stmt(const Stmt& s) {
  memo_[0].clear();
  memo_[1].clear();
  switch (s.kind) {
    case StmtKind::Loop:
      return loop(s);
    case StmtKind::If:
      return ifStmt(s);
    case StmtKind::Store: {
      const DType t = k_.buffers[s.buffer].dtype;
      llvm::Value* v = expr(s.args[1]);
      if (t == DType::boolean) v = b_.CreateZExt(v, b_.getInt8Ty());
      llvm::Value* addr = address(s.buffer, s.args[0]);
      b_.CreateAlignedStore(v, addr, llvm::Align(dtypeSize(t)));
      return;
    }
    case StmtKind::Assign:
      b_.CreateStore(expr(s.args[0]), vars_[s.var]);
      return;
  }
}

// for (v = 0; v < extent; ++v): bottom-tested, since the trip count is a known constant
// (0: nothing to emit; 1: the body once with v = 0).
void KernelEmitter::loop(const Stmt& s) {
  if (s.extent == 0) return;
  llvm::Value* saved = vars_[s.var];
  if (s.extent == 1) {
    vars_[s.var] = i64(0);
    stmts(s.body);
    vars_[s.var] = saved;
    return;
  }
  const std::string& name = k_.vars[s.var].name;
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx_, name + ".loop", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, name + ".exit", fn_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  auto* iv = b_.CreatePHI(b_.getInt64Ty(), 2, name);
  iv->addIncoming(i64(0), pre);
  vars_[s.var] = iv;
  stmts(s.body);
  auto* next = b_.CreateAdd(iv, i64(1), name + ".next", /*HasNUW=*/true, /*HasNSW=*/true);
  iv->addIncoming(next, b_.GetInsertBlock());
  auto* br = b_.CreateCondBr(b_.CreateICmpULT(next, i64(s.extent)), header, exit);
  if (llvm::MDNode* md = loopMetadata(s)) br->setMetadata(llvm::LLVMContext::MD_loop, md);
  b_.SetInsertPoint(exit);
  vars_[s.var] = saved;
}

// The widest element (in bytes) a loop body loads, stores or accumulates: the vector
// width in lanes is the register width over it.
int widestElement(const kir::Kernel& k, const std::vector<kir::StmtP>& body) {
  size_t widest = 1;
  std::unordered_set<const Expr*> seen;  // expressions are DAGs
  std::function<void(const kir::ExprP&)> visit = [&](const kir::ExprP& e) {
    if (!seen.insert(e.get()).second) return;
    if (e->kind != ExprKind::Var && e->kind != ExprKind::Const)
      widest = std::max(widest, dtypeSize(e->type));
    if (e->kind == ExprKind::Load) return;  // its index is i64 address arithmetic
    for (const auto& a : e->args) visit(a);
  };
  std::function<void(const std::vector<kir::StmtP>&)> walk = [&](const std::vector<kir::StmtP>& b) {
    for (const auto& s : b) {
      switch (s->kind) {
        case StmtKind::Store:
          widest = std::max(widest, dtypeSize(k.buffers[s->buffer].dtype));
          visit(s->args[1]);
          break;
        case StmtKind::Assign:
          widest = std::max(widest, dtypeSize(k.vars[s->var].type));
          visit(s->args[0]);
          break;
        case StmtKind::If:
        case StmtKind::Loop:
          break;
      }
      walk(s->body);
      walk(s->elseBody);
    }
  };
  walk(body);
  return static_cast<int>(widest);
}

llvm::MDNode* KernelEmitter::loopMetadata(const Stmt& s) {
  std::vector<llvm::Metadata*> props;
  auto prop = [&](const char* name, llvm::Metadata* v) {
    props.push_back(llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, name), v}));
  };
  auto i32md = [&](int v) {
    return llvm::ConstantAsMetadata::get(b_.getInt32(static_cast<uint32_t>(v)));
  };
  switch (s.loop) {
    case kir::LoopKind::Serial:
      return nullptr;
    case kir::LoopKind::Vector: {
      prop("llvm.loop.vectorize.enable", llvm::ConstantAsMetadata::get(b_.getTrue()));
      if (vectorBits_ > 0) {
        int lanes = vectorBits_ / (8 * widestElement(k_, s.body));
        if (lanes >= 2) prop("llvm.loop.vectorize.width", i32md(lanes));
      }
      if (k_.vectorInterleave > 0)
        prop("llvm.loop.interleave.count", i32md(k_.vectorInterleave));
      break;
    }
    case kir::LoopKind::Unroll:
      prop("llvm.loop.unroll.count", i32md(s.unroll));
      break;
  }
  // A loop ID is a distinct node whose first operand is itself.
  std::vector<llvm::Metadata*> ops{nullptr};
  ops.insert(ops.end(), props.begin(), props.end());
  auto* id = llvm::MDNode::getDistinct(ctx_, ops);
  id->replaceOperandWith(0, id);
  return id;
}

void KernelEmitter::ifStmt(const Stmt& s) {
  llvm::Value* cond = expr(s.args[0]);
  auto* thenBB = llvm::BasicBlock::Create(ctx_, "then", fn_);
  auto* elseBB = s.elseBody.empty() ? nullptr : llvm::BasicBlock::Create(ctx_, "else", fn_);
  auto* merge = llvm::BasicBlock::Create(ctx_, "endif", fn_);
  b_.CreateCondBr(cond, thenBB, elseBB ? elseBB : merge);
  b_.SetInsertPoint(thenBB);
  stmts(s.body);
  b_.CreateBr(merge);
  if (elseBB) {
    b_.SetInsertPoint(elseBB);
    stmts(s.elseBody);
    b_.CreateBr(merge);
  }
  b_.SetInsertPoint(merge);
}

llvm::Value* KernelEmitter::address(int buffer, const kir::ExprP& index) {
  const DType t = k_.buffers[buffer].dtype;
  return b_.CreateInBoundsGEP(memType(t), bufs_[buffer], expr(index, /*index=*/true));
}

llvm::Value* KernelEmitter::expr(const kir::ExprP& e, bool index) {
  auto& memo = memo_[index ? 1 : 0];
  if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
  llvm::Value* v = exprUncached(*e, index);
  memo.emplace(e.get(), v);
  return v;
}

llvm::Value* KernelEmitter::exprUncached(const Expr& e, bool index) {
  switch (e.kind) {
    case ExprKind::Const:
      return constant(e);
    case ExprKind::Var:
      if (isLocal_[e.var]) return b_.CreateLoad(regType(e.type), vars_[e.var], k_.vars[e.var].name);
      if (!vars_[e.var])
        throw std::logic_error(
            fmt::format("kernel {}: loop variable {} is not bound", k_.name, k_.vars[e.var].name));
      return vars_[e.var];
    case ExprKind::Load: {
      const DType t = e.type;
      llvm::Value* v =
          b_.CreateAlignedLoad(memType(t), address(e.buffer, e.args[0]), llvm::Align(dtypeSize(t)));
      // Bool bytes other than 0 read as true, as in the interpreter.
      if (t == DType::boolean) v = b_.CreateICmpNE(v, b_.getInt8(0));
      return v;
    }
    case ExprKind::Unary:
      return unary(e, expr(e.args[0], index));
    case ExprKind::Binary:
      return binary(e, expr(e.args[0], index), expr(e.args[1], index), index);
    case ExprKind::Select:
      return b_.CreateSelect(expr(e.args[0]), expr(e.args[1], index), expr(e.args[2], index));
    case ExprKind::Cast:
      return cast(expr(e.args[0]), e.args[0]->type, e.type);
  }
  throw std::logic_error("bad expression kind");
}

llvm::Value* KernelEmitter::constant(const Expr& e) {
  switch (e.type) {
    case DType::f32:
      return llvm::ConstantFP::get(b_.getFloatTy(), static_cast<float>(e.f));
    case DType::f64:
      return llvm::ConstantFP::get(b_.getDoubleTy(), e.f);
    case DType::bf16:
      return b_.getInt16(floatToBF16(static_cast<float>(e.f)));
    case DType::f16:
      return llvm::ConstantFP::get(
          ctx_, llvm::APFloat(llvm::APFloat::IEEEhalf(),
                              llvm::APInt(16, floatToF16(static_cast<float>(e.f)))));
    case DType::i32:
      return b_.getInt32(static_cast<uint32_t>(e.i));
    case DType::i64:
      return i64(e.i);
    case DType::boolean:
      return b_.getInt1(e.i != 0);
  }
  throw std::logic_error("bad dtype");
}

llvm::Value* KernelEmitter::libmCall(const char* name, llvm::Value* x) {
  auto callee =
      m_.getOrInsertFunction(name, llvm::FunctionType::get(x->getType(), {x->getType()}, false));
  if (auto* f = llvm::dyn_cast<llvm::Function>(callee.getCallee())) {
    f->addFnAttr(llvm::Attribute::NoUnwind);
    f->addFnAttr(llvm::Attribute::WillReturn);
  }
  return b_.CreateCall(callee, {x});
}

llvm::Value* KernelEmitter::unary(const Expr& e, llvm::Value* x) {
  const DType t = e.type;
  const bool f32 = t == DType::f32;
  switch (e.unary) {
    case UnaryOp::Neg:
      return isComputeFloat(t) ? b_.CreateFNeg(x)
                               : b_.CreateSub(llvm::ConstantInt::get(x->getType(), 0), x);
    case UnaryOp::Abs:
      if (isComputeFloat(t)) return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
      return b_.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x, b_.getFalse());  // abs(MIN) = MIN
    case UnaryOp::Exp:
      return f32 ? math::expF32(b_, x) : b_.CreateUnaryIntrinsic(llvm::Intrinsic::exp, x);
    case UnaryOp::Log:
      return f32 ? math::logF32(b_, x) : b_.CreateUnaryIntrinsic(llvm::Intrinsic::log, x);
    case UnaryOp::Tanh:
      return f32 ? math::tanhF32(b_, x) : libmCall("tanh", x);
    case UnaryOp::Erf:
      return f32 ? math::erfF32(b_, x) : libmCall("erf", x);
    case UnaryOp::Sqrt:
      return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x);
    case UnaryOp::Rsqrt:
      return b_.CreateFDiv(llvm::ConstantFP::get(x->getType(), 1.0),
                           b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x));
    case UnaryOp::Not:
      return b_.CreateNot(x);
  }
  throw std::logic_error("bad unary op");
}

llvm::Value* KernelEmitter::binary(const Expr& e, llvm::Value* a, llvm::Value* b, bool index) {
  const DType t = e.args[0]->type;
  const bool fl = isComputeFloat(t);
  const bool nsw = index && t == DType::i64;
  // Floats: ordered compares (false with NaN) except ne; bools compare unsigned (0 < 1).
  using P = llvm::CmpInst::Predicate;
  auto compare = [&](P floatPred, P boolPred, P intPred) -> llvm::Value* {
    if (fl) return b_.CreateFCmp(floatPred, a, b);
    return b_.CreateICmp(t == DType::boolean ? boolPred : intPred, a, b);
  };
  switch (e.binary) {
    case BinaryOp::Add:
      return fl ? fast(b_.CreateFAdd(a, b)) : b_.CreateAdd(a, b, "", false, nsw);
    case BinaryOp::Sub:
      return fl ? fast(b_.CreateFSub(a, b)) : b_.CreateSub(a, b, "", false, nsw);
    case BinaryOp::Mul:
      return fl ? fast(b_.CreateFMul(a, b)) : b_.CreateMul(a, b, "", false, nsw);
    case BinaryOp::Div:
      return fl ? b_.CreateFDiv(a, b) : intDivRem(BinaryOp::Div, a, b);
    case BinaryOp::Rem:
      return intDivRem(BinaryOp::Rem, a, b);
    case BinaryOp::Pow:
      return pow(e, a, b);
    case BinaryOp::Max:
      return b_.CreateBinaryIntrinsic(fl ? llvm::Intrinsic::maximum : llvm::Intrinsic::smax, a, b);
    case BinaryOp::Min:
      return b_.CreateBinaryIntrinsic(fl ? llvm::Intrinsic::minimum : llvm::Intrinsic::smin, a, b);
    case BinaryOp::Eq: return compare(P::FCMP_OEQ, P::ICMP_EQ, P::ICMP_EQ);
    case BinaryOp::Ne: return compare(P::FCMP_UNE, P::ICMP_NE, P::ICMP_NE);
    case BinaryOp::Lt: return compare(P::FCMP_OLT, P::ICMP_ULT, P::ICMP_SLT);
    case BinaryOp::Le: return compare(P::FCMP_OLE, P::ICMP_ULE, P::ICMP_SLE);
    case BinaryOp::Gt: return compare(P::FCMP_OGT, P::ICMP_UGT, P::ICMP_SGT);
    case BinaryOp::Ge: return compare(P::FCMP_OGE, P::ICMP_UGE, P::ICMP_SGE);
    case BinaryOp::And:
      return b_.CreateAnd(a, b);
    case BinaryOp::Or:
      return b_.CreateOr(a, b);
    case BinaryOp::Xor:
      return b_.CreateXor(a, b);
    case BinaryOp::Shl:
    case BinaryOp::Shr: {
      // Shifting by the width or more (or a negative amount) gives 0, not poison.
      const unsigned bits = a->getType()->getIntegerBitWidth();
      llvm::Value* inRange = b_.CreateICmpULT(b, llvm::ConstantInt::get(b->getType(), bits));
      llvm::Value* r = e.binary == BinaryOp::Shl ? b_.CreateShl(a, b) : b_.CreateLShr(a, b);
      return b_.CreateSelect(inRange, r, llvm::ConstantInt::get(a->getType(), 0));
    }
  }
  throw std::logic_error("bad binary op");
}

// Integer division toward zero and remainder with the dividend's sign, defined for every
// input (the interpreter throws on /0; a kernel cannot, so x / 0 = x % 0 = 0), with
// MIN / -1 = MIN (wrapping) and MIN % -1 = 0. The divisor is made safe before the
// division, so the instruction never traps.
llvm::Value* KernelEmitter::intDivRem(BinaryOp op, llvm::Value* a, llvm::Value* b) {
  llvm::Type* t = a->getType();
  auto* zero = llvm::ConstantInt::get(t, 0);
  auto* one = llvm::ConstantInt::get(t, 1);
  auto* minusOne = llvm::ConstantInt::getSigned(t, -1);
  llvm::Value* isZero = b_.CreateICmpEQ(b, zero);
  llvm::Value* isMinusOne = b_.CreateICmpEQ(b, minusOne);
  llvm::Value* safe = b_.CreateSelect(b_.CreateOr(isZero, isMinusOne), one, b);
  if (op == BinaryOp::Div) {
    llvm::Value* q = b_.CreateSDiv(a, safe);
    q = b_.CreateSelect(isMinusOne, b_.CreateSub(zero, a), q);
    return b_.CreateSelect(isZero, zero, q);
  }
  llvm::Value* r = b_.CreateSRem(a, safe);
  return b_.CreateSelect(b_.CreateOr(isZero, isMinusOne), zero, r);
}

// pow as std::pow in double (the interpreter's), rounded once to f32: exact for negative
// bases with integer exponents and every IEEE special case. x^2 is x * x (exact in
// double for f32 operands, so the same value).
llvm::Value* KernelEmitter::pow(const Expr& e, llvm::Value* a, llvm::Value* b) {
  const kir::Expr& exponent = *e.args[1];
  if (exponent.kind == ExprKind::Const && exponent.f == 2.0) return b_.CreateFMul(a, a);
  if (e.type == DType::f64) return b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, a, b);
  llvm::Value* r =
      b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, b_.CreateFPExt(a, b_.getDoubleTy()),
                               b_.CreateFPExt(b, b_.getDoubleTy()));
  return b_.CreateFPTrunc(r, b_.getFloatTy());
}

// bf16/f16 <-> f32: the storage formats' conversions.
llvm::Value* KernelEmitter::toF32(llvm::Value* v, DType from) {
  switch (from) {
    case DType::bf16:
      return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(v, b_.getInt32Ty()), 16), b_.getFloatTy());
    case DType::f16:
      return b_.CreateFPExt(v, b_.getFloatTy());
    default:
      throw std::logic_error("toF32: not a storage type");
  }
}

llvm::Value* KernelEmitter::fromF32(llvm::Value* v, DType to) {
  switch (to) {
    case DType::f16:
      return b_.CreateFPTrunc(v, b_.getHalfTy());
    case DType::bf16: {
      // Round to nearest even on the bits (ir/dtype.cpp floatToBF16); NaN stays a quiet NaN.
      llvm::Value* u = b_.CreateBitCast(v, b_.getInt32Ty());
      llvm::Value* odd = b_.CreateAnd(b_.CreateLShr(u, 16), 1);
      llvm::Value* rounded =
          b_.CreateLShr(b_.CreateAdd(u, b_.CreateAdd(odd, b_.getInt32(0x7FFF))), 16);
      llvm::Value* nan = b_.CreateOr(b_.CreateLShr(u, 16), 0x40);
      llvm::Value* r = b_.CreateSelect(b_.CreateFCmpUNO(v, v), nan, rounded);
      return b_.CreateTrunc(r, b_.getInt16Ty());
    }
    default:
      throw std::logic_error("fromF32: not a storage type");
  }
}

// The interpreter's casts: float -> int truncates and saturates (NaN gives 0); anything ->
// bool is != 0 (NaN is true); int -> f32 rounds once; int -> other floats goes through
// f64; f64 -> bf16/f16 rounds to f32 first; int -> int wraps or sign-extends.
llvm::Value* KernelEmitter::cast(llvm::Value* v, DType from, DType to) {
  if (from == to) return v;
  const bool storageFrom = from == DType::bf16 || from == DType::f16;
  const bool storageTo = to == DType::bf16 || to == DType::f16;
  if (storageFrom) return cast(toF32(v, from), DType::f32, to);
  if (storageTo) {
    if (from == DType::f32) return fromF32(v, to);
    if (from == DType::f64) return fromF32(b_.CreateFPTrunc(v, b_.getFloatTy()), to);
    return cast(cast(v, from, DType::f64), DType::f64, to);
  }
  llvm::Type* dst = regType(to);
  if (to == DType::boolean) {
    if (isComputeFloat(from)) return b_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0));
    return b_.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
  }
  if (from == DType::boolean)
    return isComputeFloat(to) ? b_.CreateUIToFP(v, dst) : b_.CreateZExt(v, dst);
  if (isComputeFloat(from) && isComputeFloat(to))
    return to == DType::f64 ? b_.CreateFPExt(v, dst) : b_.CreateFPTrunc(v, dst);
  if (isComputeFloat(from))
    return b_.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {dst, v->getType()}, {v});
  if (isComputeFloat(to)) return b_.CreateSIToFP(v, dst);
  return b_.CreateSExtOrTrunc(v, dst);
}

}  // namespace

void emitKernel(const kir::Kernel& k, llvm::Module& m, int vectorBits) {
  kir::verify(k);
  KernelEmitter(k, m, vectorBits).emit();
}

std::vector<kir::KernelFn> compileKernels(Jit& jit,
                                          const std::vector<const kir::Kernel*>& kernels) {
  std::set<std::string> names;
  for (const kir::Kernel* k : kernels)
    if (!names.insert(k->name).second)
      throw std::logic_error(fmt::format("compileKernels: two kernels are named {}", k->name));
  std::vector<kir::KernelFn> fns;
  fns.reserve(kernels.size());
  for (const kir::Kernel* k : kernels) {
    auto ctx = std::make_unique<llvm::LLVMContext>();
    auto m = std::make_unique<llvm::Module>(k->name, *ctx);
    emitKernel(*k, *m, jit.target().vectorBits());
    jit.addModule(std::move(m), std::move(ctx));
    fns.push_back(jit.lookupAs<void(void* const*, int64_t, int64_t)>(k->name));
  }
  return fns;
}

namespace {

std::unique_ptr<llvm::Module> optimizedModule(const kir::Kernel& k, const TargetSpec& target,
                                              llvm::LLVMContext& ctx) {
  auto m = std::make_unique<llvm::Module>(k.name, ctx);
  emitKernel(k, *m, target.vectorBits());
  optimizeModule(*m, target);
  return m;
}

}  // namespace

std::string kernelLLVMIR(const kir::Kernel& k, const TargetSpec& target) {
  llvm::LLVMContext ctx;
  auto m = optimizedModule(k, target, ctx);
  std::string text;
  llvm::raw_string_ostream os(text);
  m->print(os, nullptr);
  os.flush();
  return text;
}

std::string kernelAssembly(const kir::Kernel& k, const TargetSpec& target) {
  llvm::LLVMContext ctx;
  auto m = optimizedModule(k, target, ctx);
  return moduleAssembly(*m, target);
}

}  // namespace tgc::codegen
