// rematerialize: values the backward reads that are cheap to compute again are recomputed in
// the backward instead of being kept alive from the forward to the backward. Runs after
// autodiff, on the joint graph (buildTrainStep runs it last).
//
// The forward is every node the loss (outputs[0]) depends on; a forward value is saved when
// a node outside the forward reads it. A saved value V is recomputed when
//   - its node is cheap: an elementwise op (casts, compares, where, philox_uniform, iota
//     included), a layout op (reshape, transpose, broadcast, slice, concat) or a gather (a
//     row copy: the embedding lookup): never a matmul, a reduction or a fused library op;
//   - it is not a graph output (outputs live to the end anyway) and is larger than
//     kTinyBytes;
//   - it can be computed from values that stay available in the backward: inputs,
//     constants, tiny forward values (scalars such as a dropout offset), and saved values
//     that are kept, read through a chain of at most kMaxNodes (12) cheap nodes none larger than
//     V (so a slice never recomputes its whole operand);
//   - that chain keeps no kept value alive longer than before: each one it reads is read
//     anyway at or after the point where V is recomputed (an output, or a later reader).
// The chain is cloned just before V's first reader outside the forward, and every reader
// outside the forward reads the clone; V itself then dies with its last forward reader. A
// value recomputed for several saved values is cloned once, where it is first needed.
// Typical catches in a Transformer step: the dropout keep masks (ge of philox_uniform of
// the seed: rebuilt bit for bit from the same counters), the head-merging transpose of the
// attention output (the output itself is saved for the attention backward), casts.
//
// Which saved values stay is a fixed point: a saved value whose chain fails is kept and so
// becomes available to the others; chains are rebuilt until no more fail.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "ir/env_flag.h"
#include "passes/passes.h"

namespace tgc {
namespace {

constexpr int64_t kTinyBytes = 256;  // at most 64 floats: free to keep, not worth recomputing
constexpr int kMaxNodes = 12;        // nodes recomputed for one saved value

int64_t bytesOf(const Value* v) {
  return v->type().numel() * static_cast<int64_t>(dtypeSize(v->type().dtype));
}

// Elementwise and layout nodes: what generic fusion may fold into their neighbours.
bool isCheap(const Node& n) {
  if (n.numResults() != 1) return false;
  switch (n.info().fusion) {
    case FusionKind::Elementwise:
    case FusionKind::Layout: return true;
    case FusionKind::Reduction:
    case FusionKind::MatMul:
    case FusionKind::Opaque: return false;
  }
  return false;
}

// What a chain may recompute: the cheap nodes and gather (a copy of table rows: the
// embedding lookup, from a parameter and the token ids, which are always there).
bool isRecomputable(const Node& n) { return isCheap(n) || n.op() == OpKind::Gather; }

// The value whose memory v uses: reshapes are views of their operand.
const Value* storageOf(const Value* v) {
  while (v->def()->op() == OpKind::Reshape) v = v->def()->operand(0);
  return v;
}

class Rematerializer {
 public:
  explicit Rematerializer(Graph& g) : g_(g) {}

  bool run() {
    if (g_.outputs().empty()) return false;
    analyze();
    chooseKept();
    return materialize();
  }

 private:
  struct Plan {
    std::vector<Value*> clones;  // cheap values to clone, operands before users
  };

  Graph& g_;
  std::unordered_map<const Node*, size_t> pos_;
  std::unordered_map<const Value*, std::vector<Node*>> users_;
  std::unordered_set<const Node*> forward_;
  std::unordered_set<const Value*> outputs_;
  std::vector<Value*> saved_;                           // in graph order
  std::unordered_map<const Value*, size_t> firstBackward_;  // saved value -> first reader
  std::unordered_map<const Value*, size_t> lastUse_;    // any value -> last reader
  std::unordered_set<const Value*> kept_;               // storage of kept saved values
  std::unordered_set<const Value*> anchored_;           // storage a costly backward node reads
  std::unordered_map<const Value*, Plan> plans_;        // candidates whose chain works

  void analyze() {
    for (size_t i = 0; i < g_.nodes().size(); ++i) pos_[g_.nodes()[i].get()] = i;
    users_ = g_.computeUsers();
    outputs_.insert(g_.outputs().begin(), g_.outputs().end());
    std::vector<const Node*> work{g_.outputs()[0]->def()};
    while (!work.empty()) {
      const Node* n = work.back();
      work.pop_back();
      if (!forward_.insert(n).second) continue;
      for (const Value* v : n->operands()) work.push_back(v->def());
    }
    for (const auto& n : g_.nodes()) {
      for (size_t r = 0; r < n->numResults(); ++r) {
        Value* v = n->result(r);
        size_t last = outputs_.count(v) ? std::numeric_limits<size_t>::max() : 0;
        size_t first = std::numeric_limits<size_t>::max();
        bool costlyReader = outputs_.count(v) > 0;
        for (const Node* u : users_[v]) {
          last = std::max(last, pos_.at(u));
          if (forward_.count(u)) continue;
          first = std::min(first, pos_.at(u));
          costlyReader = costlyReader || !isCheap(*u);
        }
        if (costlyReader) anchored_.insert(storageOf(v));
        lastUse_[v] = last;
        const OpKind op = n->op();
        if (forward_.count(n.get()) && op != OpKind::Input && op != OpKind::Constant &&
            first != std::numeric_limits<size_t>::max()) {
          saved_.push_back(v);
          firstBackward_[v] = first;
        }
      }
    }
  }

  bool isCandidate(const Value* v) const {
    return isRecomputable(*v->def()) && !outputs_.count(v) && bytesOf(v) > kTinyBytes;
  }

  // Read in the backward at `at` without recomputing: a source, a tiny value, or a kept
  // saved value (or a view of one) that a costly backward node reads (so it surely stays in
  // memory: one read only by elementwise nodes may be fused away, e.g. the GEMM epilogue
  // fold tests relu(y) > 0 for y > 0, and y never exists) and that is read anyway at or
  // after `at`.
  bool available(const Value* u, size_t at) const {
    const OpKind op = u->def()->op();
    if (op == OpKind::Input || op == OpKind::Constant || bytesOf(u) <= kTinyBytes) return true;
    return kept_.count(storageOf(u)) && anchored_.count(storageOf(u)) &&
           std::max(lastUse_.at(u), lastUse_.at(storageOf(u))) >= at;
  }

  // The chain that recomputes v from available values, or false.
  bool buildChain(Value* v, size_t at, int64_t maxElems, Plan& plan,
                  std::unordered_set<const Value*>& inPlan) const {
    if (inPlan.count(v)) return true;
    const Node& n = *v->def();
    if (!isRecomputable(n) || v->type().numel() > maxElems ||
        static_cast<int>(plan.clones.size()) >= kMaxNodes)
      return false;
    for (Value* u : n.operands())
      if (!available(u, at) && !buildChain(u, at, maxElems, plan, inPlan)) return false;
    inPlan.insert(v);
    plan.clones.push_back(v);
    return true;
  }

  void chooseKept() {
    std::vector<Value*> candidates;
    for (Value* v : saved_) {
      if (isCandidate(v))
        candidates.push_back(v);
      else
        kept_.insert(storageOf(v));
    }
    std::unordered_set<const Value*> failed;
    for (bool changed = true; changed;) {
      changed = false;
      plans_.clear();
      for (Value* v : candidates) {
        if (failed.count(v)) continue;
        // The root is always recomputed (it is the value being dropped); its operands are
        // available or recomputed in turn.
        Plan plan;
        std::unordered_set<const Value*> inPlan;
        const size_t at = firstBackward_.at(v);
        if (storageOf(v) != v && available(storageOf(v), at)) continue;  // a view: free
        bool ok = true;
        for (Value* u : v->def()->operands())
          ok = ok && (available(u, at) || buildChain(u, at, v->type().numel(), plan, inPlan));
        if (ok && static_cast<int>(plan.clones.size()) < kMaxNodes) {
          plan.clones.push_back(v);
          plans_.emplace(v, std::move(plan));
          continue;
        }
        failed.insert(v);  // kept, and so available to the others: rebuild their chains
        kept_.insert(storageOf(v));
        changed = true;
      }
    }
  }

  bool materialize() {
    std::vector<Value*> roots;
    for (Value* v : saved_)
      if (plans_.count(v)) roots.push_back(v);
    std::stable_sort(roots.begin(), roots.end(), [&](const Value* a, const Value* b) {
      return firstBackward_.at(a) < firstBackward_.at(b);
    });
    // Snapshot the readers outside the forward before clones add readers of their own.
    std::unordered_map<const Value*, std::vector<Node*>> backwardUsers;
    for (Value* v : roots)
      for (Node* u : users_[v])
        if (!forward_.count(u)) backwardUsers[v].push_back(u);
    std::vector<Node*> order;
    for (const auto& n : g_.nodes()) order.push_back(n.get());

    std::unordered_map<const Value*, Value*> cloneOf;
    for (Value* v : roots) {
      const Node* anchor = order[firstBackward_.at(v)];
      for (Value* c : plans_.at(v).clones) {
        if (cloneOf.count(c)) continue;
        const Node& n = *c->def();
        std::vector<Value*> operands;
        for (Value* u : n.operands()) {
          auto it = cloneOf.find(u);
          operands.push_back(it != cloneOf.end() ? it->second : u);
        }
        Node* copy = g_.add(n.op(), std::move(operands), n.attrs(), {c->name() + ".remat"},
                            {c->type()});
        g_.moveBefore(copy, anchor);
        cloneOf[c] = copy->result();
      }
      for (Node* u : backwardUsers[v])
        for (size_t i = 0; i < u->operands().size(); ++i)
          if (u->operand(i) == v) u->setOperand(i, cloneOf.at(v));
    }
    return !roots.empty();
  }
};


}  // namespace

bool rematerializeEnabled() { return !envFlag("TGC_NO_FUSION") && !envFlag("TGC_NO_REMAT"); }

bool runRematerialize(Graph& g, PassContext&) { return Rematerializer(g).run(); }

}  // namespace tgc
