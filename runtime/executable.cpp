// Compiling a graph into an Executable: lowering, kernel groups, GEMM pairs, code generation,
// the stateful mode's in-place outputs and the memory plan. Running it is in executable_run.cpp.
#include "runtime/executable.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "codegen/gemm.h"
#include "codegen/gemm_bf16.h"
#include "codegen/jit.h"
#include "codegen/library.h"
#include "codegen/llvm_emitter.h"
#include "ir/env_flag.h"
#include "ir/huge_pages.h"
#include "passes/fusion.h"
#include "runtime/executable_impl.h"
#include "runtime/gemm_cast_fold.h"
#include "runtime/gemm_epilogue.h"
#include "runtime/graph_walk.h"
#include "runtime/index_bounds.h"
#include "runtime/kernel_identity.h"
#include "runtime/launch_schedule.h"
#include "runtime/matmul_gemm.h"
#include "runtime/memory_plan.h"
#include "support/thread_pool.h"

namespace tgc::runtime {

namespace {

// The byte offset of a slice with step 1 whose dims before its axis are all 1 (so that it
// is one contiguous range of its operand), else -1.
int64_t contiguousSliceOffset(const Node& n) {
  if (n.op() != OpKind::Slice || n.attrInt("step") != 1) return -1;
  const TensorType& x = n.operand(0)->type();
  const int64_t axis = n.attrInt("axis") < 0 ? n.attrInt("axis") + x.rank() : n.attrInt("axis");
  int64_t inner = 1;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d < axis && x.shape[d] != 1) return -1;
    if (d > axis) inner *= x.shape[d];
  }
  return n.attrInt("start") * inner * static_cast<int64_t>(dtypeSize(x.dtype));
}

// A launch whose whole work is below this many scalar operations runs on the calling
// thread: waking the pool costs a few microseconds, more than such a kernel takes.
constexpr int64_t kSerialWork = 1 << 15;
// Each thread's chunk of a parallel kernel gets at least this much work.
constexpr int64_t kChunkWork = 1 << 13;

// Structural equality of index expressions (shared subtrees compare by pointer first).
bool sameExpr(const kir::ExprP& a, const kir::ExprP& b) {
  if (a == b) return true;
  if (!a || !b) return false;
  if (a->kind != b->kind || a->type != b->type || a->f != b->f || a->i != b->i ||
      a->var != b->var || a->buffer != b->buffer || a->unary != b->unary ||
      a->binary != b->binary || a->args.size() != b->args.size())
    return false;
  for (size_t i = 0; i < a->args.size(); ++i)
    if (!sameExpr(a->args[i], b->args[i])) return false;
  return true;
}

void collectLoads(const kir::ExprP& e, int buffer, std::vector<const kir::Expr*>& out) {
  if (!e) return;
  if (e->kind == kir::ExprKind::Load && e->buffer == buffer) out.push_back(e.get());
  for (const auto& a : e->args) collectLoads(a, buffer, out);
}

void collectStmts(const std::vector<kir::StmtP>& body, std::vector<const kir::Stmt*>& out) {
  for (const auto& s : body) {
    out.push_back(s.get());
    collectStmts(s->body, out);
    collectStmts(s->elseBody, out);
  }
}

// Whether statements store to buffer `w`, and whether along every path through them (one
// iteration of the loops around them) at most one store to `w` runs: in each statement list
// at most one statement may contain such stores (an if's branches are separate lists).
struct StoreShape {
  bool stores = false;
  bool single = true;
};

StoreShape storesTo(const std::vector<kir::StmtP>& body, int w) {
  StoreShape out;
  for (const auto& s : body) {
    StoreShape inner;
    if (s->kind == kir::StmtKind::Store && s->buffer == w) inner.stores = true;
    for (const auto* list : {&s->body, &s->elseBody}) {
      StoreShape sub = storesTo(*list, w);
      inner.stores |= sub.stores;
      inner.single &= sub.single;
    }
    if (inner.stores && out.stores) out.single = false;
    out.stores |= inner.stores;
    out.single &= inner.single;
  }
  return out;
}

// Loads of `r` at the index of a store to `w`, in the value of that store or of a store
// before it in the same statement list (a kernel with several outputs stores each
// element's values one after another): all of them run before `w` overwrites `r` there.
size_t loadsBeforeWrite(const std::vector<kir::StmtP>& body, int w, int r) {
  size_t n = 0;
  for (size_t j = 0; j < body.size(); ++j) {
    const kir::Stmt& sw = *body[j];
    n += loadsBeforeWrite(sw.body, w, r) + loadsBeforeWrite(sw.elseBody, w, r);
    if (sw.kind != kir::StmtKind::Store || sw.buffer != w) continue;
    for (size_t i = 0; i <= j; ++i) {
      if (body[i]->kind != kir::StmtKind::Store) continue;
      std::vector<const kir::Expr*> inValue;
      collectLoads(body[i]->args[1], r, inValue);
      for (const kir::Expr* l : inValue) n += sameExpr(l->args[0], sw.args[0]);
    }
  }
  return n;
}

// True when the kernel may write buffer `w` over buffer `r`: `w` is never read, at most one
// store to `w` runs per iteration, and every load of `r` is at that store's own index, in
// its value or in a store before it (loadsBeforeWrite). Each element of `r` is then read
// before the same element of `w` is written, and by nothing else.
bool readsOnlyAtWriteIndex(const kir::Kernel& k, int w, int r) {
  if (k.buffers[w].access != kir::Access::Write || k.buffers[w].numel != k.buffers[r].numel ||
      k.buffers[w].dtype != k.buffers[r].dtype)
    return false;
  const StoreShape shape = storesTo(k.body, w);
  if (!shape.stores || !shape.single) return false;
  std::vector<const kir::Stmt*> stmts;
  collectStmts(k.body, stmts);
  size_t loadsOfR = 0;
  for (const kir::Stmt* s : stmts)
    for (const auto& a : s->args) {
      std::vector<const kir::Expr*> loads;
      collectLoads(a, r, loads);
      loadsOfR += loads.size();
    }
  return loadsOfR == loadsBeforeWrite(k.body, w, r);
}

// The matmul's GEMM (runtime/matmul_gemm.h), after the CPU backend's dtype check. bf16 runs
// through the f32 engine (codegen/gemm_bf16.h).
codegen::GemmDesc gemmDescFor(const Node& n) {
  const DType dtype = n.result()->type().dtype;
  if (dtype != DType::f32 && dtype != DType::f64 && dtype != DType::bf16)
    throw IRError(fmt::format("{}: the CPU backend multiplies f32, f64 and bf16 matrices only, not {}",
                              describeNode(n), dtypeName(dtype)));
  return matmulGemmDesc<codegen::GemmDesc>(n);
}

// Rewrites reduce_sum(matmul(a, b, transpose_a), axes = every batch dim) into one matmul
// of a and b viewed with the batch folded into the contraction: sum_i a_i^T b_i is
// [a_1; a_2; ...]^T [b_1; b_2; ...]. Autodiff produces this for every weight gradient of a
// batched activation (x^T dy); the rewrite skips the batch of per-item products and their
// sum. Returns how many were rewritten.
int foldBatchReductionsIntoGemms(Graph& g) {
  auto users = g.computeUsers();
  std::vector<Value*> outputs = g.outputs();
  std::vector<Node*> candidates;
  for (const auto& n : g.nodes()) {
    if (n->op() != OpKind::ReduceSum || n->attrBool("keepdims")) continue;
    Node* mm = n->operand(0)->def();
    if (mm->op() != OpKind::MatMul || !mm->attrBool("transpose_a") ||
        mm->attrBool("transpose_b"))
      continue;
    const TensorType& at = mm->operand(0)->type();
    const TensorType& bt = mm->operand(1)->type();
    const TensorType& ot = mm->result()->type();
    const int64_t nb = ot.rank() - 2;
    if (nb < 1 || at.rank() != ot.rank() || bt.rank() != ot.rank() || !isFloat(ot.dtype)) continue;
    if (!std::equal(at.shape.begin(), at.shape.begin() + nb, ot.shape.begin()) ||
        !std::equal(bt.shape.begin(), bt.shape.begin() + nb, ot.shape.begin()))
      continue;  // broadcast batch dims
    std::vector<int64_t> axes = n->attrInts("axes");
    for (int64_t& a : axes) a = a < 0 ? a + ot.rank() : a;
    std::sort(axes.begin(), axes.end());
    std::vector<int64_t> batchAxes(static_cast<size_t>(nb));
    std::iota(batchAxes.begin(), batchAxes.end(), int64_t{0});
    if (axes != batchAxes) continue;
    if (users[mm->result()].size() != 1 ||
        std::find(outputs.begin(), outputs.end(), mm->result()) != outputs.end())
      continue;
    candidates.push_back(n.get());
  }
  for (Node* red : candidates) {
    Node* mm = red->operand(0)->def();
    Value* a = mm->operand(0);
    Value* b = mm->operand(1);
    const int64_t k = a->type().numel() / std::max<int64_t>(1, a->type().shape.back());
    const std::string base = red->result()->name();
    Node* ra = g.add(OpKind::Reshape, {a},
                     {{"shape", std::vector<int64_t>{k, a->type().shape.back()}}},
                     {base + ".folded_a"});
    Node* rb = g.add(OpKind::Reshape, {b},
                     {{"shape", std::vector<int64_t>{k, b->type().shape.back()}}},
                     {base + ".folded_b"});
    Node* prod = g.add(OpKind::MatMul, {ra->result(), rb->result()},
                       {{"transpose_a", true}, {"transpose_b", false}}, {base + ".folded"});
    for (Node* n : {ra, rb, prod}) g.moveBefore(n, red);
    g.replaceAllUsesWith(red->result(), prod->result());
    g.erase(red);
    g.erase(mm);
    g.renameValue(prod->result(), base);
  }
  return static_cast<int>(candidates.size());
}

}  // namespace

ExecOptions ExecOptions::fromEnv() {
  ExecOptions o;
  o.useCache = !envFlag("TGC_NO_CACHE");
  o.poisonFreed = envFlag("TGC_POISON");
  o.profile = envFlag("TGC_PROFILE");
  o.fuse = !envFlag("TGC_NO_FUSION");
  o.gemmPairs = !envFlag("TGC_NO_GEMM_PAIRS");
  o.gemmPairHelp = !envFlag("TGC_NO_GEMM_PAIR_HELP");
  return o;
}

std::vector<kir::Kernel> lowerGraphKernels(const Graph& g, bool fuse) {
  auto graph = g.clone();
  graph->removeDeadNodes();
  foldBatchReductionsIntoGemms(*graph);
  GemmEpilogues epilogues = foldGemmEpilogues(*graph);
  const auto summed = fuse ? foldBiasGradients(*graph, epilogues) : std::vector<const Node*>{};
  const auto groups = kernelGroups(*graph, fuse);
  const auto castsInGemm =
      fuse ? foldableGemmCasts(*graph, groups) : std::unordered_set<const Node*>{};
  KernelNameUniquer unique;
  std::vector<kir::Kernel> out;
  for (const auto& n : graph->nodes())
    if (auto it = groups.find(n.get());
        it != groups.end() && std::find(summed.begin(), summed.end(), n.get()) == summed.end() &&
        !castsInGemm.count(n.get())) {
      codegen::LoweredKernel lk = codegen::lowerGroup(it->second);
      lk.kernel.name = unique(lk.kernel.name);
      out.push_back(std::move(lk.kernel));
    }
  return out;
}

std::unique_ptr<Executable> Executable::compile(const Graph& g, const ExecOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  auto impl = std::make_unique<Impl>();
  impl->opts = opts;
  if (opts.numThreads > 0) impl->ownPool = std::make_unique<ThreadPool>(opts.numThreads);
  impl->pool = impl->ownPool ? impl->ownPool.get() : &ThreadPool::global();
  impl->build(g);
  impl->stats.compileSeconds = secondsSince(t0);
  return std::unique_ptr<Executable>(new Executable(std::move(impl)));
}

void Executable::Impl::build(const Graph& source) {
  auto graph = source.clone();
  if (opts.forwardFusions) runForwardFusions(*graph);  // passes/fusion.h: attention becomes fused_attention
  graph->removeDeadNodes();
  stats.foldedReductions = foldBatchReductionsIntoGemms(*graph);
  GemmEpilogues epilogues = foldGemmEpilogues(*graph);  // runtime/gemm_epilogue.h
  // Bias gradients summed by the GEMM that reads the same operand: no launch of their own.
  std::unordered_set<const Node*> summedInGemm;
  if (opts.fuse)
    for (const Node* rs : foldBiasGradients(*graph, epilogues)) summedInGemm.insert(rs);
  std::unordered_map<const Value*, int> slotOf;
  auto newSlot = [&](const Value& v, SlotKind kind, int index) {
    Slot s;
    s.kind = kind;
    s.index = index;
    s.bytes = static_cast<int64_t>(v.type().numel() * dtypeSize(v.type().dtype));
    s.dtype = v.type().dtype;
    s.name = v.name();
    slots.push_back(std::move(s));
    slotOf[&v] = static_cast<int>(slots.size()) - 1;
    return static_cast<int>(slots.size()) - 1;
  };
  auto use = [&](int slot, int launch) {
    slots[slot].lastUse = std::max(slots[slot].lastUse, launch);
    if (slots[slot].kind == SlotKind::Alias)  // a slice view: its memory is its base's
      slots[slots[slot].index].lastUse = std::max(slots[slots[slot].index].lastUse, launch);
  };

  std::vector<codegen::LoweredKernel> lowered;
  std::vector<int> loweredLaunch;
  std::set<DType> gemmTypes;
  std::set<int> paramSlots;  // inputs of role "param" (views share their slots)
  // A group launches at its last node; its other members' values never get a slot.
  const auto groups = kernelGroups(*graph, opts.fuse);
  // Weight casts to bf16 rounded by the GEMMs that read them: no launch, no copy.
  const auto castsInGemm =
      opts.fuse ? foldableGemmCasts(*graph, groups) : std::unordered_set<const Node*>{};
  for (const auto& node : graph->nodes()) {
    const Node& n = *node;
    const int launch = static_cast<int>(launches.size());
    switch (codegen::classify(n)) {
      case codegen::NodeExecution::Source: {
        if (n.op() == OpKind::Input) {
          inputs.push_back({n.result()->name(), n.result()->type(), -1});
          inputs.back().slot = newSlot(*n.result(), SlotKind::Input,
                                       static_cast<int>(inputs.size()) - 1);
          if (n.attrString("role") == "param") paramSlots.insert(inputs.back().slot);
          break;
        }
        std::vector<Tensor> values = sourceValues(n);
        for (size_t i = 0; i < values.size(); ++i) {
          stats.constantBytes += static_cast<int64_t>(values[i].nbytes());
          constants.push_back(std::move(values[i]));
          newSlot(*n.result(i), SlotKind::Constant, static_cast<int>(constants.size()) - 1);
        }
        break;
      }
      case codegen::NodeExecution::View: {
        slotOf[n.result()] = slotOf.at(viewedValue(n));
        ++stats.views;
        break;
      }
      case codegen::NodeExecution::Gemm: {
        Launch l;
        l.kind = Launch::Kind::Gemm;
        l.name = "gemm:" + n.result()->name();
        l.gemm = gemmDescFor(n);
        l.gemm.bF32 = castsInGemm.count(n.operand(1)->def()) > 0;  // B's slot is the f32 W
        l.gemmZeroK = l.gemm.k == 0;
        const bool bf16 = l.gemm.dtype == DType::bf16;
        if (!l.gemmZeroK) bf16 ? codegen::validateGemmBf16(l.gemm) : l.gemm.validate();
        gemmTypes.insert(bf16 ? DType::f32 : l.gemm.dtype);
        l.slots = {slotOf.at(n.operand(0)), slotOf.at(n.operand(1)), -1};
        l.writes = {false, false, true};
        l.gemmConstantB = opts.constantParams && !bf16 && !l.gemm.bF32 &&
                          paramSlots.count(l.slots[1]) > 0;
        use(l.slots[0], launch);
        use(l.slots[1], launch);
        l.slots[2] = newSlot(*n.result(), SlotKind::Arena, -1);
        slots[l.slots[2]].first = launch;
        use(l.slots[2], launch);
        if (auto e = epilogues.find(&n); e != epilogues.end()) {  // bias, addend, mask after C
          e->second.applyTo(l.gemm);
          if (!bf16)  // (a bf16 GEMM's only fold is sumB)
            codegen::GemmEngine::host(l.gemm.dtype).epilogueKernel(l.gemm.epilogue);  // JIT it now
          for (const Value* v : e->second.operands()) {
            use(l.slots.emplace_back(slotOf.at(v)), launch);
            l.writes.push_back(false);
          }
          if (const Value* db = e->second.sumB) {  // a second result: the column sums of B
            const int slot = newSlot(*db, SlotKind::Arena, -1);
            slots[slot].first = launch;
            use(l.slots.emplace_back(slot), launch);
            l.writes.push_back(true);
          }
        }
        launches.push_back(std::move(l));
        ++stats.gemms;
        break;
      }
      case codegen::NodeExecution::Library: {
        // A fusion barrier (formFusionGroups takes Kernel nodes only); each result gets its
        // own arena slot, written by this launch.
        Launch l;
        l.kind = Launch::Kind::Library;
        l.name = "lib:" + n.result()->name();
        l.library = codegen::bindLibraryKernel(n);
        l.libraryOperands = n.operands().size();
        l.updatesOperand = n.op() == OpKind::DynamicUpdateSlice;
        for (const Value* v : n.operands()) l.slots.push_back(slotOf.at(v));
        l.writes.assign(l.slots.size(), false);
        for (size_t r = 0; r < n.numResults(); ++r) {
          const int slot = newSlot(*n.result(r), SlotKind::Arena, -1);
          slots[slot].first = launch;
          l.slots.push_back(slot);
          l.writes.push_back(true);
        }
        for (int slot : l.slots) use(slot, launch);
        launches.push_back(std::move(l));
        ++stats.libraryCalls;
        break;
      }
      case codegen::NodeExecution::Kernel: {
        if (summedInGemm.count(&n)) {  // written by its GEMM launch
          ++stats.fusedNodes;
          break;
        }
        if (castsInGemm.count(&n)) {  // its GEMMs read the f32 operand and round it
          slotOf[n.result()] = slotOf.at(n.operand(0));
          ++stats.fusedNodes;
          ++stats.castsInGemms;
          break;
        }
        auto group = groups.find(&n);
        if (group == groups.end()) {
          ++stats.fusedNodes;
          break;
        }
        // A slice that is a kernel of its own and one contiguous range of its operand (a
        // layer of a stacked cache) reads it in place: a view at an offset, no copy (at an
        // offset aligned as the arena's buffers are, which the kernels may assume).
        if (const int64_t at = contiguousSliceOffset(n);
            at >= 0 && at % kArenaAlignment == 0 && group->second.nodes.size() == 1) {
          const int base = slotOf.at(n.operand(0));
          if (slots[base].kind != SlotKind::Alias) {
            const int v = newSlot(*n.result(), SlotKind::Alias, base);
            slots[v].offset = at;
            ++stats.views;
            break;
          }
        }
        codegen::LoweredKernel lk = codegen::lowerGroup(group->second);
        Launch l;
        l.kind = Launch::Kind::Kernel;
        l.extent = lk.kernel.parallelExtent;
        const int64_t cost = std::max<int64_t>(1, lk.kernel.costPerIteration);
        l.parallel = l.extent > 1 && l.extent * cost >= kSerialWork;
        l.grain = std::max<int64_t>(1, kChunkWork / cost);
        for (size_t b = 0; b < lk.kernel.buffers.size(); ++b) {
          const Value* v = lk.values.at(b);
          int slot;
          if (lk.kernel.buffers[b].access != kir::Access::Read && !slotOf.count(v)) {
            slot = newSlot(*v, SlotKind::Arena, -1);
            slots[slot].first = launch;
          } else {
            slot = slotOf.at(v);
          }
          use(slot, launch);
          l.slots.push_back(slot);
          l.writes.push_back(lk.kernel.buffers[b].access != kir::Access::Read);
        }
        launches.push_back(std::move(l));
        lowered.push_back(std::move(lk));
        loweredLaunch.push_back(launch);
        ++stats.kernels;
        break;
      }
    }
  }
  for (const Value* v : graph->outputs()) {
    outputs.push_back({v->name(), v->type(), slotOf.at(v)});
    use(outputs.back().slot, kEnd);
  }
  outputIsState.assign(outputs.size(), false);
  // Integer inputs used as indices, checked before each run (their slot: the position in
  // `inputs`): the kernels read an index outside its table as zeros.
  indexBounds = findIndexBounds(*graph);
  for (IndexBound& b : indexBounds)
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].name == b.input) b.slot = static_cast<int>(i);
  stepOf.resize(launches.size());
  std::iota(stepOf.begin(), stepOf.end(), 0);
  // Pairs before the state pairing and the plan: both depend on the order and the steps.
  if (opts.gemmPairs && pool->numThreads() == 2) scheduleGemmPairs(loweredLaunch);
  if (opts.updateInPlace) pairState(lowered, loweredLaunch);
  placeUpdatesInPlace();
  // Results are computed where the caller gets them: no copy out of the arena.
  for (size_t o = 0; o < outputs.size(); ++o) {
    Slot& sl = slots[static_cast<size_t>(outputs[o].slot)];
    if (outputIsState[o] || sl.kind != SlotKind::Arena) continue;
    sl.kind = SlotKind::Output;
    sl.index = static_cast<int>(o);
    outputs[o].bound = true;
  }
  plan();

  // Code generation, after the plan so that kernels writing in place say so.
  generateCode(lowered, loweredLaunch);
  for (DType d : gemmTypes) codegen::GemmEngine::host(d);  // JIT the micro-kernels now
}

// Pairs independent GEMMs of similar FLOPs, moved next to each other
// (runtime/launch_schedule.h), then renumbers everything that names launches.
void Executable::Impl::scheduleGemmPairs(std::vector<int>& loweredLaunch) {
  std::vector<LaunchAccess> access(launches.size());
  for (size_t i = 0; i < launches.size(); ++i) {
    const Launch& l = launches[i];
    for (size_t b = 0; b < l.slots.size(); ++b) {
      // A slice view reads its base's memory (the only aliases before the state pairing).
      const int s = slots[l.slots[b]].kind == SlotKind::Alias ? slots[l.slots[b]].index : l.slots[b];
      (l.writes[b] ? access[i].writes : access[i].reads).push_back(s);
    }
    const codegen::GemmDesc& d = l.gemm;
    // f32 and f64 pack into per-thread scratch; bf16 (mixed precision) stays unpaired: its
    // conversion path was not checked for two products at once.
    if (l.kind == Launch::Kind::Gemm && !l.gemmZeroK && d.dtype != DType::bf16)
      access[i].flops = 2.0 * static_cast<double>(d.m) * static_cast<double>(d.n) *
                        static_cast<double>(d.k) * static_cast<double>(d.batchCount());
  }
  const PairSchedule ps = pairGemms(access);
  stats.gemmPairs = ps.pairs;
  if (ps.pairs == 0) return;
  std::vector<int> newPos(launches.size());
  std::vector<Launch> reordered;
  reordered.reserve(launches.size());
  for (size_t p = 0; p < ps.order.size(); ++p) {
    const auto old = static_cast<size_t>(ps.order[p]);
    newPos[old] = static_cast<int>(p);
    reordered.push_back(std::move(launches[old]));
    reordered.back().partner = ps.partner[p];
  }
  launches = std::move(reordered);
  for (int& l : loweredLaunch) l = newPos[static_cast<size_t>(l)];
  for (Slot& sl : slots) {
    if (sl.first >= 0) sl.first = newPos[static_cast<size_t>(sl.first)];
    if (sl.lastUse != kEnd) sl.lastUse = -1;
  }
  for (size_t i = 0; i < launches.size(); ++i)
    for (int s : launches[i].slots) {
      Slot& sl = slots[static_cast<size_t>(s)];
      if (sl.lastUse != kEnd) sl.lastUse = std::max(sl.lastUse, static_cast<int>(i));
    }
  for (size_t i = 0, step = 0; i < launches.size(); ++i) {
    if (launches[i].partner >= 0 && launches[i].partner < static_cast<int>(i)) --step;
    stepOf[i] = static_cast<int>(step++);
  }
}

// Compiles one copy of each distinct kernel, in shards over the pool's threads (one JIT
// per shard: a JIT compiles one module at a time), and points every launch at its copy.
void Executable::Impl::generateCode(std::vector<codegen::LoweredKernel>& lowered,
                                    const std::vector<int>& loweredLaunch) {
  KernelNameUniquer unique;
  std::unordered_map<std::string, size_t> byKey;
  std::vector<const kir::Kernel*> distinct;
  std::vector<size_t> copyOf(lowered.size());
  for (size_t i = 0; i < lowered.size(); ++i) {
    kir::Kernel& k = lowered[i].kernel;
    k.name = unique(k.name);
    launches[static_cast<size_t>(loweredLaunch[i])].name = k.name;
    auto [it, fresh] = byKey.emplace(structuralKernelKey(k), distinct.size());
    if (fresh) distinct.push_back(&k);
    copyOf[i] = it->second;
  }
  stats.distinctKernels = static_cast<int>(distinct.size());

  // Round-robin, so that each shard gets a similar mix of cheap and expensive kernels.
  constexpr size_t kMinShard = 16;
  const size_t shards = std::clamp<size_t>((distinct.size() + kMinShard - 1) / kMinShard, 1,
                                           static_cast<size_t>(pool->numThreads()));
  std::vector<std::vector<const kir::Kernel*>> parts(shards);
  for (size_t i = 0; i < distinct.size(); ++i) parts[i % shards].push_back(distinct[i]);
  codegen::JitOptions jo;
  jo.useCache = opts.useCache;
  jo.cacheDir = opts.cacheDir;
  jits.resize(shards);
  std::vector<std::vector<kir::KernelFn>> partFns(shards);
  pool->runOnThreads(static_cast<int>(shards), [&](int t) {
    jits[static_cast<size_t>(t)] = std::make_unique<codegen::Jit>(jo);
    partFns[static_cast<size_t>(t)] =
        codegen::compileKernels(*jits[static_cast<size_t>(t)], parts[static_cast<size_t>(t)]);
  });
  for (size_t i = 0; i < lowered.size(); ++i) {
    const size_t d = copyOf[i];
    launches[static_cast<size_t>(loweredLaunch[i])].fn = partFns[d % shards].at(d / shards);
  }
  for (const auto& j : jits) {
    stats.cacheHits += j->stats().cacheHits;
    stats.jitCompiles += j->stats().compiles;
  }
}

// The stateful mode: output new.X goes straight into input X's storage when X is not read
// after the launch that writes new.X, or is read only by that launch, element by element.
void Executable::Impl::pairState(std::vector<codegen::LoweredKernel>& lowered,
                                 const std::vector<int>& loweredLaunch) {
  std::unordered_map<std::string, int> inputByName;
  for (size_t i = 0; i < inputs.size(); ++i) inputByName[inputs[i].name] = static_cast<int>(i);
  std::unordered_map<int, size_t> kernelAtLaunch;
  for (size_t i = 0; i < loweredLaunch.size(); ++i) kernelAtLaunch[loweredLaunch[i]] = i;
  std::set<int> redirected;

  for (size_t o = 0; o < outputs.size(); ++o) {
    const IO& out = outputs[o];
    if (!out.name.starts_with("new.")) continue;
    auto in = inputByName.find(out.name.substr(4));
    if (in == inputByName.end() || inputs[in->second].type != out.type) continue;
    const int x = inputs[in->second].slot, r = out.slot;
    outputIsState[o] = true;
    stateNames.push_back(inputs[in->second].name);
    if (r == x) continue;  // new.X is X itself: nothing to write
    Slot& rs = slots[r];
    bool direct = false;
    if (rs.kind == SlotKind::Arena && !redirected.count(r)) {
      const int producer = rs.first;
      // By steps: X read by the other half of new.X's GEMM pair is read while it is written.
      if (stepAt(slots[x].lastUse) < stepAt(producer)) {
        direct = true;
      } else if (slots[x].lastUse == producer && kernelAtLaunch.count(producer)) {
        codegen::LoweredKernel& lk = lowered[kernelAtLaunch[producer]];
        const Launch& l = launches[producer];
        std::vector<int> w, rd;
        for (size_t b = 0; b < l.slots.size(); ++b) {
          if (l.slots[b] == r) w.push_back(static_cast<int>(b));
          if (l.slots[b] == x) rd.push_back(static_cast<int>(b));
        }
        if (w.size() == 1 && rd.size() == 1 && readsOnlyAtWriteIndex(lk.kernel, w[0], rd[0])) {
          lk.kernel.buffers[w[0]].inPlaceOf = rd[0];
          direct = true;
        }
      }
    }
    if (direct) {
      // new.X now lives in X's storage: every reader of new.X reads it there.
      rs.kind = SlotKind::Alias;
      rs.index = x;
      redirected.insert(r);
      ++stats.stateInPlace;
    } else {
      copies.push_back({r, x, slots[x].bytes});
      ++stats.stateCopies;
    }
  }
}

// A dynamic_update_slice whose operand is read by nothing after it writes its result in the
// operand's own memory (the kernel then skips the copy): an arena buffer, or a donated
// input. Launch order is final here (after the GEMM pairs), so "after" is exact; the
// operand's root then lives as long as the result.
void Executable::Impl::placeUpdatesInPlace() {
  std::set<int> donated;
  for (const IO& in : inputs)
    if (std::find(opts.donatedInputs.begin(), opts.donatedInputs.end(), in.name) != opts.donatedInputs.end())
      donated.insert(in.slot);
  for (size_t i = 0; i < launches.size(); ++i) {
    const Launch& l = launches[i];
    if (l.kind != Launch::Kind::Library || !l.updatesOperand) continue;
    const int x = l.slots[0], y = l.slots[l.libraryOperands];
    if (slots[x].kind == SlotKind::Alias && slots[x].offset != 0) continue;  // (a slice view)
    const int root = slots[x].kind == SlotKind::Alias ? slots[x].index : x;
    const bool writable = slots[root].kind == SlotKind::Arena || donated.count(root);
    // (The update and starts must not be x itself.)
    if (!writable || slots[x].lastUse != static_cast<int>(i) || l.slots[1] == x || l.slots[2] == x) continue;
    slots[root].lastUse = std::max(slots[root].lastUse, slots[y].lastUse);
    slots[y].kind = SlotKind::Alias;
    slots[y].index = root;
  }
  outputInDonated.assign(outputs.size(), false);
  for (size_t o = 0; o < outputs.size(); ++o) {
    const Slot& s = slots[static_cast<size_t>(outputs[o].slot)];
    outputInDonated[o] = s.kind == SlotKind::Alias && donated.count(s.index) && !outputIsState[o];
  }
}

void Executable::Impl::plan() {
  std::vector<int> arenaSlots;
  std::vector<BufferLifetime> lifetimes;
  const int end = static_cast<int>(launches.size());
  for (size_t s = 0; s < slots.size(); ++s) {
    if (slots[s].kind != SlotKind::Arena) continue;
    arenaSlots.push_back(static_cast<int>(s));
    const int last = slots[s].lastUse == kEnd ? end : std::max(slots[s].first, slots[s].lastUse);
    // Lifetimes in steps: the two launches of a GEMM pair run at the same time, so nothing
    // live in one of them may share bytes with anything live in the other.
    const int endStep = end == 0 ? 0 : stepOf.back() + 1;
    lifetimes.push_back({slots[s].bytes, stepAt(slots[s].first), last == end ? endStep : stepAt(last)});
    if (last < end) launches[static_cast<size_t>(last)].dying.push_back(static_cast<int>(s));
  }
  MemoryPlan mp = planMemory(lifetimes);
  for (size_t i = 0; i < arenaSlots.size(); ++i) slots[arenaSlots[i]].offset = mp.offsets[i];
  stats.arenaBytes = mp.arenaBytes;
  stats.bufferBytes = mp.totalBytes;
  stats.peakLiveBytes = mp.peakLiveBytes;
  void* mem = nullptr;
  if (mp.arenaBytes > 0) {
    mem = allocateLarge(static_cast<size_t>(mp.arenaBytes));  // on 2 MiB pages (ir/huge_pages.h)
    if (!mem)
      throw std::runtime_error(fmt::format("cannot allocate an arena of {} bytes", mp.arenaBytes));
  }
  arena.reset(mem);
  slotPtr.assign(slots.size(), nullptr);
  for (Launch& l : launches) l.ptrs.assign(l.slots.size(), nullptr);
}

}  // namespace tgc::runtime
