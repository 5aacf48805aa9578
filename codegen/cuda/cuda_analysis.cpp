#include "codegen/cuda/cuda_analysis.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_set>

namespace tgc::codegen::cuda {

namespace {

using kir::BinaryOp;
using kir::Expr;
using kir::ExprKind;
using kir::Stmt;
using kir::StmtKind;

constexpr int kThreadsPerIterationBlock = 128;
constexpr int kMaxBlockThreads = 256;

// The variables an expression reads (each DAG node visited once).
void readVars(const Expr& e, std::set<int>& out, std::unordered_set<const Expr*>& seen) {
  if (!seen.insert(&e).second) return;
  if (e.kind == ExprKind::Var) out.insert(e.var);
  for (const auto& a : e.args) readVars(*a, out, seen);
}

void loadedBuffers(const Expr& e, std::vector<bool>& out, std::unordered_set<const Expr*>& seen) {
  if (!seen.insert(&e).second) return;
  if (e.kind == ExprKind::Load) out[e.buffer] = true;
  for (const auto& a : e.args) loadedBuffers(*a, out, seen);
}

class Analyzer {
 public:
  explicit Analyzer(const kir::Kernel& k) : k_(k) {}

  KernelAnalysis run() {
    KernelAnalysis a;
    a.isLocal.assign(k_.vars.size(), false);
    a.loaded.assign(k_.buffers.size(), false);
    std::unordered_set<const Expr*> seen;
    walk(k_.body, [&](const Stmt& s) {
      if (s.kind == StmtKind::Assign) a.isLocal[s.var] = true;
      for (const auto& e : s.args) loadedBuffers(*e, a.loaded, seen);
      // Every statement's own references: the variable it assigns, the ones it reads.
      std::set<int>& refs = refs_[&s];
      std::unordered_set<const Expr*> local;
      for (const auto& e : s.args) readVars(*e, refs, local);
      if (s.kind == StmtKind::Assign) refs.insert(s.var);
      for (int v : refs) ++totalRefs_[v];
    });
    a.isRead.assign(k_.vars.size(), false);
    walk(k_.body, [&](const Stmt& s) {
      std::set<int> reads;
      std::unordered_set<const Expr*> local;
      for (const auto& e : s.args) readVars(*e, reads, local);
      for (int v : reads) a.isRead[v] = true;
    });
    findSpread(k_.body, a);

    if (flatKernel(a)) {
      a.mapping = a.launch.mapping = Mapping::ThreadPerElement;
      a.launch.blockThreads = kMaxBlockThreads;
      for (int64_t e : a.flatExtents) a.launch.elementsPerIteration *= e;
      return a;
    }
    int64_t widest = 0;
    for (const auto& [s, info] : a.spread) widest = std::max(widest, s->extent);
    if (widest >= 32) {
      a.mapping = Mapping::BlockPerIteration;
      a.launch.mapping = Mapping::BlockPerIteration;
      a.launch.blockThreads =
          static_cast<int>(std::min<int64_t>(kMaxBlockThreads, (widest + 31) / 32 * 32));
    } else {
      a.launch.mapping = Mapping::ThreadPerIteration;
      a.launch.blockThreads = kThreadsPerIterationBlock;
    }
    return a;
  }

 private:
  static void walk(const std::vector<kir::StmtP>& body, const std::function<void(const Stmt&)>& f) {
    for (const auto& s : body) {
      f(*s);
      walk(s->body, f);
      walk(s->elseBody, f);
    }
  }

  // How often each variable is referenced by the statements of a subtree.
  std::map<int, int> refsIn(const Stmt& loop) {
    std::map<int, int> count;
    walk(loop.body, [&](const Stmt& s) {
      for (int v : refs_[&s]) ++count[v];
    });
    return count;
  }

  bool references(const Stmt& s, int v) {
    if (refs_[&s].count(v) > 0) return true;
    for (const auto& c : s.body)
      if (references(*c, v)) return true;
    for (const auto& c : s.elseBody)
      if (references(*c, v)) return true;
    return false;
  }

  // Private to an iteration: first referenced by an assignment at the top of the body
  // that does not read it.
  bool isPrivate(const Stmt& loop, int v) { return isPrivateIn(loop.body, v); }
  bool isPrivateIn(const std::vector<kir::StmtP>& body, int v) {
    for (const auto& s : body) {
      if (!references(*s, v)) continue;
      if (s->kind != StmtKind::Assign || s->var != v) return false;
      std::set<int> reads;
      std::unordered_set<const Expr*> seen;
      readVars(*s->args[0], reads, seen);
      return reads.count(v) == 0;
    }
    return true;  // assigned nowhere at the top: unreachable for locals assigned in the loop
  }

  // Every reference in the loop is `v = op(v, e)` or `v = op(e, v)`, with one op.
  bool asReduction(const Stmt& loop, int v, Reduction& r) {
    const DType t = k_.vars[v].type;
    if (t != DType::f32 && t != DType::f64 && t != DType::i32 && t != DType::i64) return false;
    bool ok = true, first = true;
    walk(loop.body, [&](const Stmt& s) {
      if (!ok || refs_[&s].count(v) == 0) return;
      if (s.kind != StmtKind::Assign || s.var != v) {
        ok = false;
        return;
      }
      const Expr& e = *s.args[0];
      const bool combine = e.kind == ExprKind::Binary &&
                           (e.binary == BinaryOp::Add || e.binary == BinaryOp::Mul ||
                            e.binary == BinaryOp::Max || e.binary == BinaryOp::Min);
      if (!combine || (!first && e.binary != r.op)) {
        ok = false;
        return;
      }
      auto isAcc = [&](const Expr& x) { return x.kind == ExprKind::Var && x.var == v; };
      auto reads = [&](const Expr& x) {
        std::set<int> vars;
        std::unordered_set<const Expr*> seen;
        readVars(x, vars, seen);
        return vars.count(v) > 0;
      };
      const Expr& a = *e.args[0];
      const Expr& b = *e.args[1];
      if (!((isAcc(a) && !reads(b)) || (isAcc(b) && !reads(a)))) {
        ok = false;
        return;
      }
      r.op = e.binary;
      first = false;
    });
    r.var = v;
    return ok && !first;
  }

  bool spreadable(const Stmt& loop, SpreadLoop& info) {
    std::set<int> assigned;
    walk(loop.body, [&](const Stmt& s) {
      if (s.kind == StmtKind::Assign) assigned.insert(s.var);
    });
    const std::map<int, int> inside = refsIn(loop);
    for (int v : assigned) {
      auto it = inside.find(v);
      const bool usedOutside = totalRefs_[v] > (it == inside.end() ? 0 : it->second);
      if (!usedOutside) {
        if (!isPrivate(loop, v)) return false;
        continue;
      }
      Reduction r;
      if (!asReduction(loop, v, r)) return false;
      info.reductions.push_back(r);
    }
    return true;
  }

  // The body is loops nested one in another around loop-free statements, whose locals are
  // per-element temporaries, and the kernel loads no buffer it stores.
  bool flatNest(const std::vector<kir::StmtP>& body, const KernelAnalysis& a,
                KernelAnalysis::FlatNest& nest) {
    const std::vector<kir::StmtP>* level = &body;
    while (level->size() == 1 && (*level)[0]->kind == StmtKind::Loop) {
      nest.loops.push_back((*level)[0].get());
      level = &(*level)[0]->body;
    }
    nest.body = level;
    bool flat = true;
    std::set<int> assigned;
    walk(*level, [&](const Stmt& s) {
      if (s.kind == StmtKind::Loop) flat = false;
      if (s.kind == StmtKind::Store && a.loaded[s.buffer]) flat = false;
      if (s.kind == StmtKind::Assign) assigned.insert(s.var);
    });
    for (int v : assigned)
      if (!flat || !isPrivateIn(*level, v)) flat = false;
    return flat;
  }

  // The kernel body is one flat nest, or `if (c) nest else nest` with nests of one depth
  // and a condition of the parallel index alone (blocks of the range, the last shorter).
  bool flatKernel(KernelAnalysis& a) {
    std::vector<KernelAnalysis::FlatNest> nests(1);
    const Stmt* branch = nullptr;
    if (k_.body.size() == 1 && k_.body[0]->kind == StmtKind::If && !k_.body[0]->elseBody.empty()) {
      branch = k_.body[0].get();
      for (int v : refs_[branch])
        if (a.isLocal[v]) return false;
      nests.resize(2);
      if (!flatNest(branch->body, a, nests[0]) || !flatNest(branch->elseBody, a, nests[1]) ||
          nests[0].loops.size() != nests[1].loops.size())
        return false;
    } else if (!flatNest(k_.body, a, nests[0])) {
      return false;
    }
    std::vector<int64_t> extents(nests[0].loops.size(), 0);
    for (const auto& n : nests)
      for (size_t d = 0; d < extents.size(); ++d)
        extents[d] = std::max(extents[d], n.loops[d]->extent);
    int64_t elements = 1;  // none or one per iteration: one thread per iteration is as good
    for (int64_t e : extents) elements *= e;
    if (elements <= 1) return false;
    a.flat = std::move(nests);
    a.flatIf = branch;
    a.flatExtents = std::move(extents);
    return true;
  }

  void findSpread(const std::vector<kir::StmtP>& body, KernelAnalysis& a) {
    for (const auto& s : body) {
      if (s->kind == StmtKind::Loop && s->loop == kir::LoopKind::Vector) {
        SpreadLoop info;
        if (spreadable(*s, info)) {
          bool storesLoaded = false;
          walk(s->body, [&](const Stmt& t) {
            if (t.kind == StmtKind::Store && a.loaded[t.buffer]) storesLoaded = true;
          });
          info.syncBefore = info.syncAfter = storesLoaded;
          a.spread.emplace(s.get(), std::move(info));
          continue;  // loops inside a spread loop run serially in each thread
        }
      }
      findSpread(s->body, a);
      findSpread(s->elseBody, a);
    }
  }

  const kir::Kernel& k_;
  std::unordered_map<const Stmt*, std::set<int>> refs_;
  std::map<int, int> totalRefs_;
};

}  // namespace

KernelAnalysis analyze(const kir::Kernel& k) { return Analyzer(k).run(); }

std::string reductionIdentity(BinaryOp op, DType type) {
  const bool f32 = type == DType::f32;
  const bool fl = f32 || type == DType::f64;
  const bool i32 = type == DType::i32;
  switch (op) {
    case BinaryOp::Add:  // -0 + x == x for every x, -0 included
      return fl ? (f32 ? "-0.0f" : "-0.0") : (i32 ? "0" : "0LL");
    case BinaryOp::Mul:
      return fl ? (f32 ? "1.0f" : "1.0") : (i32 ? "1" : "1LL");
    case BinaryOp::Max:
      if (fl) return f32 ? "__int_as_float(0xff800000)" : "__longlong_as_double((long long)0xfff0000000000000ULL)";
      return i32 ? "(-2147483647 - 1)" : "(-9223372036854775807LL - 1)";
    case BinaryOp::Min:
      if (fl) return f32 ? "__int_as_float(0x7f800000)" : "__longlong_as_double(0x7ff0000000000000LL)";
      return i32 ? "2147483647" : "9223372036854775807LL";
    default:
      throw std::logic_error("reductionIdentity: not a reduction's combine");
  }
}

}  // namespace tgc::codegen::cuda
