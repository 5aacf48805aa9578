// fuse-cross-entropy: the per-token loss of models/lib/nn.tg's label_smoothed_cross_entropy
// (and cross_entropy, its eps = 0 case) becomes result 0 of one softmax_cross_entropy node.
//
//   logp   = log_softmax(logits, axis = last)
//   gold   = cast(eq(iota(axis = last), reshape(targets, targets.shape + [1])), logits.dtype)
//   nll    = neg(reduce_sum(mul(logp, gold), axes = [last]))
//   smooth = neg(reduce_mean(logp, axes = [last]))
//   per_token = add(a * nll, b * smooth)    a + b = 1 (either operand order; a factor 1 may be
//                                           missing), smoothing = b
//             | nll                         (no smooth branch: smoothing 0)
//
// Every intermediate value (logp included) must have no other use and not be a graph output,
// since the fused op replaces them all; the padding mask and the mean over tokens stay ordinary
// ops. Runs before autodiff, so the backward becomes one softmax_cross_entropy_grad.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tgc {
namespace {

using Users = std::unordered_map<const Value*, std::vector<Node*>>;

class Matcher {
 public:
  Matcher(const Graph& g, const Users& users) : users_(users) {
    outputs_.insert(g.outputs().begin(), g.outputs().end());
  }

  struct Match {
    Value* logits;
    Value* targets;
    double smoothing;
    Node* perToken;
    std::vector<Node*> pattern;  // every node the fused op replaces
  };

  std::optional<Match> match(Node* logSoftmax) {
    pattern_.clear();
    Value* logits = logSoftmax->operand(0);
    const int64_t rank = logits->type().rank();
    if (rank < 1 || normalizeAxis(logSoftmax->attrInt("axis"), rank) != rank - 1) return {};
    Value* logp = logSoftmax->result();
    if (outputs_.count(logp)) return {};
    pattern_.push_back(logSoftmax);
    // logp's users: one mul with the one-hot, at most one reduce_mean.
    Node* gathered = nullptr;
    Node* mean = nullptr;
    for (Node* u : usersOf(logp)) {
      if (u->op() == OpKind::Mul && !gathered) gathered = u;
      else if (u->op() == OpKind::ReduceMean && !mean && u->operand(0) == logp) mean = u;
      else return {};
    }
    if (!gathered) return {};
    Value* gold = gathered->operand(0) == logp ? gathered->operand(1) : gathered->operand(0);
    if (gold == logp || gathered->result()->type() != logits->type()) return {};
    Value* targets = oneHotTargets(gold, logits->type());
    if (!targets) return {};
    Node* sum = soleUser(gathered->result());
    if (!sum) return {};
    pattern_.push_back(gathered);
    Value* nll = negatedRowReduction(sum, OpKind::ReduceSum, rank);
    if (!nll) return {};
    Value* smooth = mean ? negatedRowReduction(mean, OpKind::ReduceMean, rank) : nullptr;
    if (mean && !smooth) return {};

    Match m{logits, targets, 0.0, nullptr, {}};
    if (!smooth) {
      m.perToken = nll->def();
    } else {
      // per_token = add(term, term): one term of nll, one of smooth.
      Node* add = soleUser(nll);
      Node* addVia = soleUser(smooth);
      auto termOf = [&](Value* v) -> std::optional<std::pair<Value*, double>> {
        if (v == nll || v == smooth) return std::make_pair(v, 1.0);
        Node* mul = v->def();
        if (mul->op() != OpKind::Mul || !ownedSingleUse(v)) return {};
        for (int side = 0; side < 2; ++side) {
          Value* x = mul->operand(side);
          Value* c = mul->operand(1 - side);
          auto k = splatValue(c);
          if ((x == nll || x == smooth) && k && c->type().numel() == 1 &&
              mul->result()->type() == x->type()) {
            pattern_.push_back(mul);
            return std::make_pair(x, *k);
          }
        }
        return {};
      };
      // nll and smooth each reach the add directly or through one scaling.
      Node* top = add && add->op() == OpKind::Mul ? soleUser(add->result()) : add;
      Node* topVia = addVia && addVia->op() == OpKind::Mul ? soleUser(addVia->result()) : addVia;
      if (!top || top != topVia || top->op() != OpKind::Add) return {};
      auto a = termOf(top->operand(0));
      auto b = termOf(top->operand(1));
      if (!a || !b || a->first == b->first) return {};
      const double wNll = a->first == nll ? a->second : b->second;
      const double wSmooth = a->first == nll ? b->second : a->second;
      if (!(wSmooth >= 0 && wSmooth <= 1) || std::fabs(wNll + wSmooth - 1) > 1e-6) return {};
      if (top->result()->type() != nll->type()) return {};
      m.smoothing = wSmooth;
      m.perToken = top;
      pattern_.push_back(top);
    }
    m.pattern = pattern_;
    return m;
  }

 private:
  const std::vector<Node*>& usersOf(const Value* v) const {
    static const std::vector<Node*> none;
    auto it = users_.find(v);
    return it == users_.end() ? none : it->second;
  }
  Node* soleUser(const Value* v) const {
    const auto& u = usersOf(v);
    return u.size() == 1 && !outputs_.count(v) ? u[0] : nullptr;
  }
  bool ownedSingleUse(const Value* v) const { return soleUser(v) != nullptr; }

  // neg(reduce(x, axes = [last])) where `red` is the reduce, whose result only the neg may
  // use. Returns the neg's result.
  Value* negatedRowReduction(Node* red, OpKind kind, int64_t rank) {
    if (red->op() != kind || red->attrBool("keepdims")) return nullptr;
    const auto& axes = red->attrInts("axes");
    if (axes.size() != 1 || normalizeAxis(axes[0], rank) != rank - 1) return nullptr;
    Node* neg = soleUser(red->result());
    if (!neg || neg->op() != OpKind::Neg) return nullptr;
    pattern_.push_back(red);
    pattern_.push_back(neg);
    return neg->result();
  }

  // targets when gold = cast(eq(iota(last axis), reshape(targets, [..., 1])), logits dtype),
  // eq's operands in either order.
  Value* oneHotTargets(Value* gold, const TensorType& logits) {
    Node* cast = gold->def();
    if (cast->op() != OpKind::Cast || gold->type() != logits) return nullptr;
    Node* eq = cast->operand(0)->def();
    if (eq->op() != OpKind::Eq) return nullptr;
    const int64_t rank = logits.rank();
    for (int side = 0; side < 2; ++side) {
      Node* iota = eq->operand(side)->def();
      Node* reshape = eq->operand(1 - side)->def();
      if (iota->op() != OpKind::Iota || reshape->op() != OpKind::Reshape) continue;
      if (iota->result()->type().shape != logits.shape ||
          normalizeAxis(iota->attrInt("axis"), rank) != rank - 1)
        continue;
      Value* targets = reshape->operand(0);
      Shape want = targets->type().shape;
      want.push_back(1);
      Shape rows(logits.shape.begin(), logits.shape.end() - 1);
      if (!isInteger(targets->type().dtype) || targets->type().shape != rows ||
          reshape->result()->type().shape != want)
        continue;
      return targets;
    }
    return nullptr;
  }

  const Users& users_;
  std::unordered_set<const Value*> outputs_;
  std::vector<Node*> pattern_;
};

// Erases the matched nodes, then whatever only they used (the one-hot's cast, eq, iota and
// reshape, the weights' constants), unless something else still reads it. Adds what it
// erased to `erased`.
void eraseDead(Graph& g, std::vector<Node*> nodes, std::unordered_set<const Node*>& erased) {
  std::unordered_set<const Value*> outs(g.outputs().begin(), g.outputs().end());
  bool progress = true;
  while (progress) {
    progress = false;
    Users users = g.computeUsers();
    for (auto it = nodes.begin(); it != nodes.end();) {
      Node* n = *it;
      bool used = false;
      for (size_t r = 0; r < n->numResults(); ++r)
        used = used || users.count(n->result(r)) || outs.count(n->result(r));
      if (used || n->op() == OpKind::Input) {
        ++it;
        continue;
      }
      // Its operands' defining nodes may now be dead too.
      std::vector<Node*> defs;
      for (Value* o : n->operands()) defs.push_back(o->def());
      g.erase(n);
      erased.insert(n);
      it = nodes.erase(it);
      for (Node* d : defs)
        if (std::find(nodes.begin(), nodes.end(), d) == nodes.end()) nodes.push_back(d);
      progress = true;
      break;
    }
  }
}

}  // namespace

bool runFuseCrossEntropy(Graph& g, PassContext&) {
  bool changed = false;
  std::unordered_set<const Node*> erased;  // nodes of the snapshot that are gone
  for (Node* n : nodeSnapshot(g)) {
    if (erased.count(n) || n->op() != OpKind::LogSoftmax) continue;
    Users users = g.computeUsers();
    Matcher matcher(g, users);
    auto m = matcher.match(n);
    if (!m) continue;
    Value* perToken = m->perToken->result();
    const std::string name = perToken->name();
    const std::string base = name.substr(0, name.rfind('.') == std::string::npos ? 0 : name.rfind('.') + 1);
    Node* fused = g.add(OpKind::SoftmaxCrossEntropy, {m->logits, m->targets},
                        {{"smoothing", m->smoothing}}, {name + ".fused", base + "lse"});
    g.moveBefore(fused, m->perToken);
    g.replaceAllUsesWith(perToken, fused->result(0));
    eraseDead(g, m->pattern, erased);
    g.renameValue(fused->result(0), name);
    changed = true;
  }
  return changed;
}

}  // namespace tgc
