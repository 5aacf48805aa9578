#include "runtime/gemm_epilogue.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "codegen/lower.h"
#include "ir/env_flag.h"

namespace tgc::runtime {

namespace {

using codegen::GemmActivation;
using codegen::GemmMask;

// The value of a splat constant of a float dtype, rounded to that dtype as the
// interpreter stores it.
std::optional<double> splatConstant(const Value* v) {
  const Node* n = v->def();
  if (n->op() != OpKind::Constant || !isFloat(v->type().dtype)) return std::nullopt;
  const auto& values = n->attrFloats("value");
  if (values.size() != 1 && v->type().numel() != 1) return std::nullopt;
  if (values.empty()) return std::nullopt;
  const double x = values[0];
  return v->type().dtype == DType::f32 ? static_cast<double>(static_cast<float>(x)) : x;
}

bool isZeroConstant(const Value* v) {
  auto c = splatConstant(v);
  return c && *c == 0.0;
}

// The operand of a binary node other than `v` (nullptr when both are v).
const Value* other(const Node& n, const Value* v) {
  if (n.operand(0) == v && n.operand(1) != v) return n.operand(1);
  if (n.operand(1) == v && n.operand(0) != v) return n.operand(0);
  return nullptr;
}

// A vector of n elements that broadcasts over everything but v's last dim.
bool isBias(const Value* b, const Value* v) {
  const TensorType& t = b->type();
  if (t.dtype != v->type().dtype || t.rank() < 1 || t.shape.back() != v->type().shape.back())
    return false;
  return t.numel() == t.shape.back() && t.rank() <= v->type().rank();
}

enum Stage { kAlpha, kBias, kAddend, kActivation, kScale, kMask, kDone };

class Folder {
 public:
  explicit Folder(Graph& g) : g_(g) {}

  GemmEpilogues run() {
    rewriteReluTests();
    users_ = g_.computeUsers();
    outputs_.clear();
    outputs_.insert(g_.outputs().begin(), g_.outputs().end());
    std::vector<Node*> matmuls;
    for (const auto& n : g_.nodes())
      if (n->op() == OpKind::MatMul) matmuls.push_back(n.get());
    GemmEpilogues out;
    for (Node* mm : matmuls) fold(mm, out);
    return out;
  }

 private:
  // gt(y, 0) -> gt(relu(y), 0) where relu(y) is computed before the test and kept in memory.
  void rewriteReluTests() {
    auto users = g_.computeUsers();
    std::unordered_map<const Node*, size_t> pos;
    for (size_t i = 0; i < g_.nodes().size(); ++i) pos[g_.nodes()[i].get()] = i;
    for (const auto& n : g_.nodes()) {
      if (n->op() != OpKind::Gt || !isZeroConstant(n->operand(1))) continue;
      Value* y = n->operand(0);
      if (!isFloat(y->type().dtype)) continue;
      // Only where h is stored anyway (a GEMM or view reads it): a second reader must not
      // keep a kernel from fusing h away.
      auto stored = [&](const Value* h) {
        return std::any_of(users[h].begin(), users[h].end(), [](const Node* r) {
          return codegen::classify(*r) != codegen::NodeExecution::Kernel;
        });
      };
      for (Node* u : users[y])
        if (u->op() == OpKind::Relu && pos.at(u) < pos.at(n.get()) && stored(u->result())) {
          n->setOperand(0, u->result());
          break;
        }
    }
  }

  // The single user of v when v may vanish into the epilogue.
  Node* soleUser(const Value* v) const {
    if (outputs_.count(v)) return nullptr;
    auto it = users_.find(v);
    if (it == users_.end() || it->second.size() != 1) return nullptr;
    return it->second[0];
  }

  // Whether v is stored in memory whether or not it feeds an epilogue: not computed by a
  // generated kernel, or read by something that takes its operands from memory (a GEMM, a
  // view, a library kernel), or a graph output. A value only kernels read may be fused into
  // them or recomputed in each (a dropout mask from philox_uniform); reading it in an
  // epilogue would add a launch and a round trip through memory.
  bool inMemory(const Value* v) const {
    if (codegen::classify(*v->def()) != codegen::NodeExecution::Kernel || outputs_.count(v))
      return true;
    auto it = users_.find(v);
    if (it == users_.end()) return false;
    return std::any_of(it->second.begin(), it->second.end(), [](const Node* u) {
      return codegen::classify(*u) != codegen::NodeExecution::Kernel;
    });
  }

  // Whether `n` is v's only reader. A bool mask only kernels compute (a dropout's keep
  // mask from philox_uniform) is still worth storing for the epilogue when nothing else
  // reads it and the where's result is stored anyway (the FFN's hidden dropout, which the
  // next GEMM reads): one byte an element written and read replaces writing the product
  // and reading it back in the where's kernel, at the same number of launches.
  bool soleReader(const Value* v, const Node& n) const {
    auto it = users_.find(v);
    return it != users_.end() && it->second.size() == 1 && it->second[0] == &n &&
           !outputs_.count(v);
  }

  // Matches `next` (consuming cur) as a stage at or after `stage`; returns the stage it
  // took, or kDone.
  Stage match(const Node& next, const Value* cur, Stage stage, FoldedEpilogue& e) const {
    const TensorType& t = cur->type();
    if (next.numResults() != 1 || next.result()->type() != t) return kDone;
    switch (next.op()) {
      case OpKind::Mul: {
        const Value* c = other(next, cur);
        if (!c) return kDone;
        auto k = splatConstant(c);
        if (!k) {  // a gate: SwiGLU's up projection times silu(gate)
          if (stage > kMask || c->type() != t || !inMemory(c)) return kDone;
          e.stages.mask = GemmMask::multiply;
          e.mask = c;
          return kMask;
        }
        if (stage <= kAlpha) {
          e.alpha *= *k;
          return kAlpha;
        }
        if (stage <= kScale) {
          e.stages.scale = *k;
          return kScale;
        }
        return kDone;
      }
      case OpKind::Add: {
        const Value* r = other(next, cur);
        if (!r) return kDone;
        if (!inMemory(r)) return kDone;
        if (stage <= kBias && isBias(r, cur)) {
          e.stages.bias = true;
          e.bias = r;
          return kBias;
        }
        if (stage <= kAddend && r->type() == t) {
          e.stages.addend = true;
          e.addend = r;
          return kAddend;
        }
        return kDone;
      }
      case OpKind::Relu:
      case OpKind::Silu:
      case OpKind::Gelu: {
        if (stage > kActivation) return kDone;
        if (next.op() == OpKind::Relu) {
          e.stages.activation = GemmActivation::relu;
        } else if (next.op() == OpKind::Silu) {
          e.stages.activation = GemmActivation::silu;
        } else {
          const std::string& mode = next.attrString("approximate");
          if (mode != "none" && mode != "tanh") return kDone;
          e.stages.activation = mode == "none" ? GemmActivation::gelu : GemmActivation::geluTanh;
        }
        return kActivation;
      }
      case OpKind::Where: {
        if (stage > kMask || next.operand(1) != cur || next.operand(0) == cur ||
            !isZeroConstant(next.operand(2)))
          return kDone;
        const Value* cond = next.operand(0);
        if (cond->type().dtype != DType::boolean || cond->type().shape != t.shape) return kDone;
        const Node* test = cond->def();
        if (test->op() == OpKind::Gt && isZeroConstant(test->operand(1)) &&
            test->operand(0)->type() == t && inMemory(test->operand(0))) {
          e.stages.mask = GemmMask::positive;
          e.mask = test->operand(0);
        } else if (inMemory(cond) || (soleReader(cond, next) && inMemory(next.result()))) {
          e.stages.mask = GemmMask::nonzero;
          e.mask = cond;
        } else {
          return kDone;
        }
        return kMask;
      }
      default: return kDone;
    }
  }

  void fold(Node* mm, GemmEpilogues& out) {
    const Value* v = mm->result();
    const DType dt = v->type().dtype;
    if (dt != DType::f32 && dt != DType::f64) return;
    const TensorType& at = mm->operand(0)->type();
    const int64_t k = mm->attrBool("transpose_a") ? at.shape[at.rank() - 2] : at.shape.back();
    if (k == 0 || v->type().numel() == 0) return;  // the executable zero-fills these

    FoldedEpilogue e;
    std::vector<Node*> chain;
    Stage stage = kAlpha;
    for (Node* next = soleUser(v); next;) {
      FoldedEpilogue trial = e;
      const Stage took = match(*next, v, stage, trial);
      if (took == kDone) break;
      e = trial;
      stage = static_cast<Stage>(took + 1);
      chain.push_back(next);
      v = next->result();
      next = soleUser(v);
    }
    if (chain.empty()) return;

    // The matmul takes the last node's place and name; the chain disappears.
    Node* last = chain.back();
    const std::string name = last->result()->name();
    std::vector<Node*> maybeDead;  // what only the chain read: the ReLU test, constants
    for (const Node* n : chain)
      for (const Value* o : n->operands())
        if (o->def() != mm && std::find(chain.begin(), chain.end(), o->def()) == chain.end())
          maybeDead.push_back(o->def());
    g_.moveBefore(mm, last);
    g_.replaceAllUsesWith(last->result(), mm->result());
    // The users table follows the rewrite (recomputing it per fold would be quadratic).
    users_[mm->result()] = std::move(users_[last->result()]);
    if (outputs_.erase(last->result())) outputs_.insert(mm->result());
    for (Node* n : chain) {
      for (const Value* o : n->operands()) dropUse(o, n);
      users_.erase(n->result());
    }
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) g_.erase(*it);
    g_.renameValue(mm->result(), name);
    // Each epilogue operand is read through a view placed before the matmul: a user the
    // generic fusion cannot pull a producer into, so the value is computed into memory
    // (a producer left without users could be fused away or skipped).
    for (const Value** operand : {&e.bias, &e.addend, &e.mask})
      if (*operand) {
        Node* view = g_.add(OpKind::Reshape, {const_cast<Value*>(*operand)},
                            {{"shape", (*operand)->type().shape}}, {name + ".epilogue_operand"});
        g_.moveBefore(view, mm);
        users_[*operand].push_back(view);
        *operand = view->result();
      }
    eraseDead(maybeDead);
    out.emplace(mm, e);
  }

  // Removes one use of v by n from the users table (n may use v more than once).
  void dropUse(const Value* v, const Node* n) {
    auto& us = users_[v];
    if (auto it = std::find(us.begin(), us.end(), n); it != us.end()) us.erase(it);
  }

  // Erases the nodes (and then their operands' producers) left without users.
  void eraseDead(std::vector<Node*> work) {
    std::unordered_set<const Node*> erased;
    while (!work.empty()) {
      Node* n = work.back();
      work.pop_back();
      if (erased.count(n) || n->op() == OpKind::Input || n->numResults() != 1 ||
          outputs_.count(n->result()) || !users_[n->result()].empty())
        continue;
      for (const Value* o : n->operands()) {
        dropUse(o, n);
        work.push_back(o->def());
      }
      users_.erase(n->result());
      erased.insert(n);
      g_.erase(n);
    }
  }

  Graph& g_;
  std::unordered_map<const Value*, std::vector<Node*>> users_;
  std::unordered_set<const Value*> outputs_;
};


// The value whose memory v is: v with its reshapes (views) looked through.
const Value* storageOf(const Value* v) {
  while (v->def()->op() == OpKind::Reshape) v = v->def()->operand(0);
  return v;
}

// A matmul whose GEMM can also sum its B: f32/f64/bf16, one product (rank-2 operands),
// K > 0 and a non-empty C.
bool canSumB(const Node& mm) {
  const TensorType& at = mm.operand(0)->type();
  const TensorType& bt = mm.operand(1)->type();
  const TensorType& ct = mm.result()->type();
  if ((ct.dtype != DType::f32 && ct.dtype != DType::f64 && ct.dtype != DType::bf16) ||
      bt.dtype != ct.dtype || at.rank() != 2 || bt.rank() != 2 || ct.rank() != 2)
    return false;
  const int64_t k = mm.attrBool("transpose_b") ? bt.shape[1] : bt.shape[0];
  return k > 0 && ct.numel() > 0;
}

// Whether reduce_sum `rs` adds up exactly the K rows of op(B) of matmul `mm`, given that
// v (its operand, or what its operand widens: summedValue) is B's memory: for B stored
// k x n, every axis of v but the last, which is n long; for B stored n x k (transposed),
// the last axis of v only, k long. v holds the same k * n elements in the same order, so
// the n sums come out in db's element order. A bf16 B's sums are f32.
bool sumsRowsOfB(const Node& rs, const Value* v, const Node& mm) {
  const TensorType& vt = v->type();
  const TensorType& bt = mm.operand(1)->type();
  const DType sumType = bt.dtype == DType::bf16 ? DType::f32 : bt.dtype;
  if (vt.dtype != bt.dtype || rs.result()->type().dtype != sumType ||
      vt.numel() != bt.numel() || vt.rank() < 2)
    return false;
  const int64_t rank = vt.rank();
  std::vector<int64_t> axes = rs.attrInts("axes");
  for (int64_t& a : axes) a = a < 0 ? a + rank : a;
  std::sort(axes.begin(), axes.end());
  if (mm.attrBool("transpose_b"))
    return vt.shape.back() == bt.shape[1] && axes == std::vector<int64_t>{rank - 1};
  std::vector<int64_t> rows(static_cast<size_t>(rank - 1));
  std::iota(rows.begin(), rows.end(), int64_t{0});
  return vt.shape.back() == bt.shape[1] && axes == rows;
}

// The value reduce_sum `rs` sums as the GEMM would see it: its operand, or, when that is
// cast(x) {dtype=f32} of a bf16 x read by nothing else and no graph output (mixed
// precision's bias gradient, the cast fused into the reduction's kernel), x.
const Value* summedValue(const Graph& g, const Node& rs,
                         const std::unordered_map<const Value*, std::vector<Node*>>& users) {
  const Value* v = rs.operand(0);
  const Node* d = v->def();
  if (d->op() != OpKind::Cast || v->type().dtype != DType::f32 ||
      d->operand(0)->type().dtype != DType::bf16 ||
      std::find(g.outputs().begin(), g.outputs().end(), v) != g.outputs().end())
    return v;
  const auto u = users.find(v);
  return u != users.end() && u->second.size() == 1 ? d->operand(0) : v;
}

}  // namespace

std::vector<const Node*> foldBiasGradients(Graph& g, GemmEpilogues& folded) {
  if (envFlag("TGC_NO_GEMM_EPILOGUE") || envFlag("TGC_NO_BIAS_GRAD_FOLD")) return {};
  const auto users = g.computeUsers();
  // The matmuls that can sum their B, by B's memory, in graph order.
  std::unordered_map<const Value*, std::vector<Node*>> byB;
  std::vector<Node*> sums;
  for (const auto& n : g.nodes()) {
    if (n->op() == OpKind::MatMul && canSumB(*n)) byB[storageOf(n->operand(1))].push_back(n.get());
    if (n->op() == OpKind::ReduceSum) sums.push_back(n.get());
  }
  std::unordered_map<const Node*, size_t> pos;
  auto place = [&] {
    pos.clear();
    for (size_t i = 0; i < g.nodes().size(); ++i) pos[g.nodes()[i].get()] = i;
  };
  place();
  std::unordered_set<const Node*> taken;  // matmuls given a sum
  std::vector<const Node*> out;
  for (Node* rs : sums) {
    const Value* summed = summedValue(g, *rs, users);
    auto candidates = byB.find(storageOf(summed));
    if (candidates == byB.end()) continue;
    // The first reader of the sum: the GEMM must run before it.
    const Node* firstUser = nullptr;
    if (auto it = users.find(rs->result()); it != users.end())
      for (const Node* u : it->second)
        if (!firstUser || pos.at(u) < pos.at(firstUser)) firstUser = u;
    for (Node* mm : candidates->second) {
      if (taken.count(mm) || !sumsRowsOfB(*rs, summed, *mm)) continue;
      if (firstUser && pos.at(firstUser) < pos.at(mm)) {
        // Move the matmul up to just before that reader, with the views it reads through
        // (its epilogue operands' included), if what they view is computed before it.
        std::vector<const Value*> reads(mm->operands().begin(), mm->operands().end());
        if (auto e = folded.find(mm); e != folded.end())
          for (const Value* v : e->second.operands()) reads.push_back(v);
        std::vector<Node*> moved;  // views to move, each after the views it reads
        bool movable = true;
        std::function<void(const Value*)> need = [&](const Value* v) {
          Node* d = v->def();
          if (pos.at(d) < pos.at(firstUser) ||
              std::find(moved.begin(), moved.end(), d) != moved.end())
            return;
          if (d->op() != OpKind::Reshape) {
            movable = false;
            return;
          }
          need(d->operand(0));
          moved.push_back(d);
        };
        for (const Value* v : reads) need(v);
        if (!movable) continue;
        moved.push_back(mm);
        for (Node* n : moved) g.moveBefore(n, firstUser);
        place();
      }
      folded[mm].sumB = rs->result();  // a new entry when the matmul has no epilogue
      taken.insert(mm);
      out.push_back(rs);
      break;
    }
  }
  return out;
}

std::vector<const Value*> FoldedEpilogue::operands() const {
  std::vector<const Value*> out;
  for (const Value* v : {bias, addend, mask})
    if (v) out.push_back(v);
  return out;
}

void FoldedEpilogue::applyTo(codegen::GemmDesc& d) const {
  d.alpha *= alpha;
  d.epilogue = stages;
  d.sumB = sumB != nullptr;
  if (stages.addend) {
    d.epilogue.ldAddend = d.ldc;
    d.epilogue.strideAddend = d.strideC;
  }
  if (stages.mask != GemmMask::none) {
    d.epilogue.ldMask = d.ldc;
    d.epilogue.strideMask = d.strideC;
  }
}

GemmEpilogues foldGemmEpilogues(Graph& g) {
  if (envFlag("TGC_NO_GEMM_EPILOGUE")) return {};
  return Folder(g).run();
}

codegen::GemmEpilogueOperands epilogueOperands(const codegen::GemmDesc& d, void* const* ptrs) {
  const codegen::GemmEpilogue& e = d.epilogue;
  codegen::GemmEpilogueOperands ops;
  size_t i = 0;
  if (e.bias) ops.bias = ptrs[i++];
  if (e.addend) ops.addend = ptrs[i++];
  if (e.mask != GemmMask::none) ops.mask = ptrs[i++];
  if (d.sumB) ops.sumB = ptrs[i++];
  return ops;
}

}  // namespace tgc::runtime
