#include "codegen/fusion_groups.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "codegen/lower.h"
#include "ir/env_flag.h"

namespace tgc::codegen {

namespace {

enum class Inside {
  Never,   // must be the last node of its group (or runs outside kernels)
  Free,    // an index remapping or a conversion: recomputing it costs next to nothing
  Cheap,   // a few arithmetic operations
  Costly,  // transcendental functions, Philox rounds
};

Inside insideCost(OpKind op) {
  switch (op) {
    case OpKind::Input: case OpKind::Constant: case OpKind::MatMul: case OpKind::Reshape:
    case OpKind::ReduceSum: case OpKind::ReduceMax: case OpKind::ReduceMean:
    case OpKind::Softmax: case OpKind::LogSoftmax: case OpKind::LayerNorm: case OpKind::RmsNorm:
    case OpKind::ScatterAdd:
    case OpKind::FusedAttention: case OpKind::FusedAttentionGrad:
    case OpKind::SoftmaxCrossEntropy: case OpKind::SoftmaxCrossEntropyGrad:
    case OpKind::LayerNormGrad: case OpKind::QuantizedMatmul: case OpKind::DynamicUpdateSlice:
      return Inside::Never;
    case OpKind::Iota: case OpKind::Cast: case OpKind::Broadcast: case OpKind::Transpose:
    case OpKind::Slice:
      return Inside::Free;
    case OpKind::Neg: case OpKind::Abs: case OpKind::Sqrt: case OpKind::Rsqrt:
    case OpKind::Relu: case OpKind::LogicalNot: case OpKind::Add: case OpKind::Sub:
    case OpKind::Mul: case OpKind::Div: case OpKind::Maximum: case OpKind::Minimum:
    case OpKind::Eq: case OpKind::Ne: case OpKind::Lt: case OpKind::Le: case OpKind::Gt:
    case OpKind::Ge: case OpKind::LogicalAnd: case OpKind::LogicalOr: case OpKind::Where:
    case OpKind::Concat: case OpKind::Gather:
      return Inside::Cheap;
    case OpKind::Exp: case OpKind::Log: case OpKind::Tanh: case OpKind::Erf:
    case OpKind::Sigmoid: case OpKind::Silu: case OpKind::Gelu: case OpKind::Pow:
    case OpKind::PhiloxUniform:
      return Inside::Costly;
  }
  return Inside::Never;
}

double numel(const Value* v) { return static_cast<double>(v->type().numel()); }

// How many times the group evaluates operand i of `user`, which it evaluates `evals` times.
// The last node's templates read their operands in passes: softmax and layer_norm make up
// to three passes over x, layer_norm reads gamma and beta once per row, and every block of
// scatter_add's rows scans all the indices (counted as once per output row: a bound).
double operandEvals(const Node& user, size_t i, double evals, bool last) {
  const Value* x = user.operand(i);
  if (!last) return evals;  // an expression reads each operand once per evaluation
  switch (user.op()) {
    case OpKind::ReduceSum: case OpKind::ReduceMax: case OpKind::ReduceMean:
      return numel(x);
    case OpKind::Softmax: case OpKind::LogSoftmax: return 3 * numel(x);
    case OpKind::LayerNorm: return i == 0 ? 3 * numel(x) : numel(user.operand(0));
    case OpKind::RmsNorm: return i == 0 ? 2 * numel(x) : numel(user.operand(0));
    case OpKind::ScatterAdd:
      return i == 1 ? numel(x) : numel(x) * static_cast<double>(user.result()->type().shape[0]);
    case OpKind::Input: case OpKind::Constant: case OpKind::MatMul: case OpKind::Reshape:
    case OpKind::Iota: case OpKind::PhiloxUniform: case OpKind::Neg: case OpKind::Abs:
    case OpKind::Exp: case OpKind::Log: case OpKind::Sqrt: case OpKind::Rsqrt:
    case OpKind::Tanh: case OpKind::Erf: case OpKind::Sigmoid: case OpKind::Silu: case OpKind::Relu:
    case OpKind::Gelu: case OpKind::LogicalNot: case OpKind::Cast: case OpKind::Add:
    case OpKind::Sub: case OpKind::Mul: case OpKind::Div: case OpKind::Pow:
    case OpKind::Maximum: case OpKind::Minimum: case OpKind::Eq: case OpKind::Ne:
    case OpKind::Lt: case OpKind::Le: case OpKind::Gt: case OpKind::Ge:
    case OpKind::LogicalAnd: case OpKind::LogicalOr: case OpKind::Where:
    case OpKind::Transpose: case OpKind::Broadcast: case OpKind::Slice: case OpKind::Concat:
    case OpKind::Gather:
    case OpKind::FusedAttention: case OpKind::FusedAttentionGrad:
    case OpKind::SoftmaxCrossEntropy: case OpKind::SoftmaxCrossEntropyGrad:
    case OpKind::LayerNormGrad: case OpKind::QuantizedMatmul: case OpKind::DynamicUpdateSlice:
      return evals;
  }
  return evals;
}

bool recomputeOk(const Node& p, double evals) {
  const double factor = evals / std::max(1.0, numel(p.result()));
  switch (insideCost(p.op())) {
    case Inside::Never: return false;
    case Inside::Free: return true;
    case Inside::Cheap: return factor <= 3;
    case Inside::Costly: return factor <= 1;
  }
  return false;
}

}  // namespace

std::vector<FusionGroup> formFusionGroups(const Graph& g) {
  const bool multiOutput = !envFlag("TGC_NO_MULTI_OUTPUT");
  const auto users = g.computeUsers();
  const std::unordered_set<const Value*> outputs(g.outputs().begin(), g.outputs().end());
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < g.nodes().size(); ++i) position[g.nodes()[i].get()] = i;
  auto userSet = [&](const Value* v) {
    std::unordered_set<const Node*> out;
    if (auto it = users.find(v); it != users.end()) out.insert(it->second.begin(), it->second.end());
    return out;
  };

  // Duplicable nodes: free or cheap ops whose copies in several kernels cost no more
  // memory traffic than storing the value once and loading it in each: computed from other
  // duplicable nodes and values in memory of which at most one is large (more than an
  // eighth of the node's size; the rest are broadcast operands), e.g. a one-hot mask from
  // iota and the labels, or a gradient times its clipping factor. A value a single kernel
  // node uses stays out of them, so that it can join its user's group instead; so does an
  // elementwise node with one user reading a value of its shape that a multi-output group
  // could store (AdamW's sqrt(new v)): a copy would read that value from memory.
  std::unordered_set<const Node*> duplicable;
  std::unordered_map<const Node*, std::unordered_set<const Value*>> largeReads;
  for (const auto& node : g.nodes()) {
    const Node* n = node.get();
    const Inside cost = insideCost(n->op());
    if (classify(*n) != NodeExecution::Kernel || n->numResults() != 1 ||
        outputs.count(n->result()) || (cost != Inside::Free && cost != Inside::Cheap))
      continue;
    bool ok = true;
    std::unordered_set<const Value*> large;
    for (const Value* o : n->operands()) {
      const Node* p = o->def();
      if (duplicable.count(p)) {
        large.insert(largeReads[p].begin(), largeReads[p].end());
      } else if (classify(*p) == NodeExecution::Kernel && !outputs.count(o) &&
                 userSet(o).size() == 1) {
        ok = false;  // fusable into n: n is better off as an ordinary member
      } else if (multiOutput && classify(*p) == NodeExecution::Kernel &&
                 insideCost(p->op()) != Inside::Never && isElementwise(n->op()) &&
                 o->type().shape == n->result()->type().shape &&
                 userSet(n->result()).size() == 1) {
        ok = false;  // may be shared with n's group as another output
      } else if (8 * numel(o) > numel(n->result())) {
        large.insert(o);
      }
    }
    if (ok && large.size() <= 1) {
      duplicable.insert(n);
      largeReads[n] = std::move(large);
    }
  }

  std::unordered_set<const Node*> taken;  // non-duplicable nodes placed in a group
  std::unordered_map<const Node*, std::unordered_set<const Node*>> copiedFor;  // dup -> users
  std::vector<FusionGroup> groups;
  for (size_t i = g.nodes().size(); i-- > 0;) {
    const Node* last = g.nodes()[i].get();
    if (classify(*last) != NodeExecution::Kernel || taken.count(last)) continue;
    // A duplicable node every user of which computes it needs no launch of its own.
    if (duplicable.count(last) && copiedFor[last] == userSet(last->result())) continue;
    taken.insert(last);
    std::vector<const Node*> group{last};
    std::unordered_set<const Node*> members{last};
    // Members evaluated at exactly the last node's indices, once per element: the last node
    // when it is elementwise, and producers of its shape reached through such members only.
    std::unordered_set<const Node*> aligned;
    const Shape& lastShape = last->result()->type().shape;
    if (multiOutput && isElementwise(last->op())) aligned.insert(last);
    // An aligned elementwise member evaluates its operands of that shape at those indices.
    auto passesIndex = [&](const Node* n) { return aligned.count(n) && isElementwise(n->op()); };
    // A value also needed outside may join as another output when every member using it
    // evaluates it at the last node's indices and every other user runs after the group.
    auto mayShare = [&](const Value* v, const Node* user) {
      if (!passesIndex(user) || v->type().shape != lastShape) return false;
      for (const Node* u : userSet(v))
        if (members.count(u) ? !passesIndex(u) : position[u] < position[last]) return false;
      return true;
    };
    // (member, how many times the group evaluates it); depth first, operands in order.
    std::vector<std::pair<const Node*, double>> stack{{last, numel(last->result())}};
    while (!stack.empty()) {
      auto [user, evals] = stack.back();
      stack.pop_back();
      for (size_t k = 0; k < user->operands().size(); ++k) {
        const Value* v = user->operand(k);
        const Node* p = v->def();
        const double pe = operandEvals(*user, k, evals, user == last);
        // A copy reads its non-duplicable operands from memory: none of them can be fused
        // into one copy, as the others would find it missing.
        if (duplicable.count(user) && !duplicable.count(p)) continue;
        if (duplicable.count(p)) {
          if (!recomputeOk(*p, pe)) continue;
          copiedFor[p].insert(user);
          if (members.insert(p).second) {
            group.push_back(p);
            stack.push_back({p, pe});
          }
          continue;
        }
        if (taken.count(p) || p->numResults() != 1 || classify(*p) != NodeExecution::Kernel ||
            insideCost(p->op()) == Inside::Never)
          continue;
        const auto us = userSet(v);
        const bool sole = !outputs.count(v) && us.size() == 1 && us.count(user);
        if (sole ? !recomputeOk(*p, pe) : !mayShare(v, user)) continue;
        taken.insert(p);
        members.insert(p);
        group.push_back(p);
        stack.push_back({p, pe});
        if (passesIndex(user) && v->type().shape == lastShape) aligned.insert(p);
      }
    }
    std::sort(group.begin(), group.end(),
              [&](const Node* a, const Node* b) { return position[a] < position[b]; });
    FusionGroup fg{std::move(group), {}};
    for (const Node* n : fg.nodes) {
      if (n == last || duplicable.count(n)) continue;
      const auto us = userSet(n->result());
      if (outputs.count(n->result()) ||
          std::any_of(us.begin(), us.end(), [&](const Node* u) { return !members.count(u); }))
        fg.extraOutputs.push_back(n->result());
    }
    groups.push_back(std::move(fg));
  }
  std::reverse(groups.begin(), groups.end());
  return groups;
}

}  // namespace tgc::codegen
