// fuse-attention: scaled dot-product attention written with ordinary ops becomes one
// fused_attention node (ir/fused_ops.h), whose gradient rule emits one fused_attention_grad,
// so neither direction stores the [..., Tq, Tk] scores or probabilities. Runs before autodiff.
//
// Matched, from each softmax outwards:
//   scores = matmul(q, k)      k transposed by transpose_b, by an explicit transpose (whose
//                              permutation is composed, not copied) or given as [..., D, Tk];
//                              transpose_a likewise gives q
//   * c, / c                   splat constants, before the mask or after it (then c > 0), or on
//                              q or k when that product is used only here: folded into `scale`
//   masking steps              any number (passes/attention_mask.h): where(m, s, NEG),
//                              where(m, NEG, s), s + P with P = 0 / NEG built from a bool by
//                              constants (where, (1 - cast(m)) * NEG, ...); NEG is -inf or a
//                              constant <= -1e4
//   s + B, B + s, s - B         an additive bias (ALiBi, a relative-position bias, a float
//                              mask): B of the scores' dtype, broadcasting to them (the
//                              add's result has the scores' type), that is not a 0 / NEG
//                              mask; any number of them, each times the scales after it,
//                              summed into the fused op's bias operand; B = B' + P with P
//                              a 0 / NEG mask (HF's position bias plus its padding
//                              penalty) is the mask P and the bias B'
//   softmax                    over the last axis (the keys)
//   dropout                    where(ge(philox_uniform(seed, offset), p), w * (1/(1-p)), 0), the
//                              frontend's form, exactly: becomes p_drop with seed and offset
//   matmul(weights, v)         transpose_b gives v
// Every intermediate (scores, masked scores, weights, the dropout's values) must be used only
// by the next step and not be a graph output, q, k and v must have the same batch dims (the
// matmuls do not broadcast), and the dtype must be f32 or f64 (the CPU library kernels' types;
// 16-bit attention stays unfused). Otherwise the graph is left alone.
//
// Masks are split into conditions at logical_and. A condition computed without inputs is
// evaluated: all true is dropped, `key <= query` becomes causal=true (no [Tq, Tk] tensor at
// all); any other condition is the mask operand (several are joined by logical_and). So the
// decoder's `padding and causal` becomes its [B, 1, 1, Tk] padding mask plus causal=true.
//
// Where the fused op differs from the graph it replaces:
// - a query row whose every key is masked: the fused op gives zeros (and lse -inf), as the
//   unfused softmax does with -inf masks. With where(m, s, NEG) and a finite NEG (-1e9) the
//   unfused softmax gives that row uniform weights over all keys, and that result is kept:
//   out = where(some key allowed, fused, mean of v over the keys), a reduction of the mask
//   and of v beside the fused op (not with dropout, whose uniform row would need the fused
//   op's draws: there such a row is zeros). An additive penalty s + P (P = (1 - m) * -1e9)
//   leaves the row softmax(s + B - 1e9) rounded in f32, which depends on the scores'
//   magnitudes; the fused op gives zeros there.
// - scores are computed in double inside the op rather than rounded after the matmul and
//   after the scale, so float32 results differ in the last bits; dropout keeps exactly the
//   same elements with the same factor.
// - a bias added after a finite mask penalty (where(m, s, -1e9) + B) leaves the masked
//   scores masked, as if the penalty were -inf, however large B is.
// - a 0/1 float mask is recognized as a mask only when the graph shows it is 0/1 (a cast of
//   a bool, a where between constants); a float input could hold other values, so a penalty
//   made from one is an additive bias instead, which is exact.
// Nodes only the rewritten pattern used (the scores, a mask tensor now replaced by causal=true)
// are removed; other dead code is dce's.
//
// The head-split fold: when q, k and v are all transposes swapping dims -3 and -2 (the
// model's split_heads, transpose(reshape(x, [B, T, H, D]), perm=[0, 2, 1, 3])), the fused
// op reads their operands as they are with layout="bthd" (ir/fused_ops.h), and its out is
// [B, T, H, Dv]: consumers that are the same transpose (merge_heads) read it directly, any
// other consumer gets one transpose back to [B, H, T, Dv]. The transposes become dead, and
// autodiff passes the layout to fused_attention_grad, so the backward's copies of dout, dq,
// dk, dv go too. A transpose used elsewhere does not block the fold (it stays for its other
// users). TGC_NO_ATTENTION_LAYOUT=1 turns the fold off.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ir/env_flag.h"
#include "passes/attention_mask.h"
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tgc {
namespace {

// q, k or v as the fused op needs it: `base`, transposed by `perm` when it is not empty.
struct Operand {
  Value* base = nullptr;
  std::vector<int64_t> perm;
  Shape shape;
};

Operand asIs(Value* v) { return Operand{v, {}, v->type().shape}; }

// v with its last two dims swapped, composed with the transpose that made v, if any.
Operand swapped(Value* v) {
  const size_t r = static_cast<size_t>(v->type().rank());
  Operand o{v, std::vector<int64_t>(r), v->type().shape};
  for (size_t i = 0; i < r; ++i) o.perm[i] = static_cast<int64_t>(i);
  if (v->def()->op() == OpKind::Transpose) {
    o.base = v->def()->operand(0);
    o.perm = v->def()->attrInts("perm");
  }
  std::swap(o.perm[r - 2], o.perm[r - 1]);
  std::swap(o.shape[r - 2], o.shape[r - 1]);
  bool identity = true;
  for (size_t i = 0; i < r; ++i) identity = identity && o.perm[i] == static_cast<int64_t>(i);
  if (identity) o.perm.clear();
  return o;
}

// An additive bias step s + B, B + s or s - B: B a float of s's dtype that broadcasts to s
// (the step's result has s's type), and not a mask (maskStep is tried first). Returns the
// scores side and B, negated for s - B.
struct BiasStep {
  Value* scores;
  Value* bias;
  bool negated;
};

bool leadsToScores(const Value* v, const Uses& uses);

std::optional<BiasStep> biasStep(const Node& n, const Uses& uses) {
  if (n.op() != OpKind::Add && n.op() != OpKind::Sub) return std::nullopt;
  const TensorType& t = n.result()->type();
  for (size_t side : {0u, 1u}) {
    if (n.op() == OpKind::Sub && side == 1) break;  // B - s negates the scores
    Value* s = n.operand(side);
    Value* b = n.operand(1 - side);
    if (s->type() != t || b->type().dtype != t.dtype || b->type().rank() > t.rank()) continue;
    if (!leadsToScores(s, uses)) continue;  // (both sides can have the scores' type)
    return BiasStep{s, b, n.op() == OpKind::Sub};
  }
  return std::nullopt;
}

// Whether v is the scores matmul, or reaches it through single-use scale, mask and bias
// steps: which side of an add is the scores.
bool leadsToScores(const Value* v, const Uses& uses) {
  for (int depth = 0; depth < 64; ++depth) {
    const Node& n = *v->def();
    if (n.op() == OpKind::MatMul) return true;
    if (!uses.single(v)) return false;
    if (auto s = scaleStep(n)) v = s->first;
    else if (auto k = maskStep(n)) v = k->scores;
    else if (auto b = biasStep(n, uses)) v = b->scores;
    else return false;
  }
  return false;
}

struct Match {
  Node* out = nullptr;  // the matmul with v, whose result the fused op replaces
  Operand q, k, v;
  double scale = 1;
  std::vector<Conjunct> masks;
  // Additive biases, each with the product of the scales applied after it (so the fused
  // op's bias is the sum of factor * B) and its sign.
  struct Bias {
    Value* value;
    double factor;
  };
  std::vector<Bias> biases;
  Value *seed = nullptr, *offset = nullptr;
  double pDrop = 0;
  // Masking steps by kind: where(m, s, NEG) with a finite NEG gives a row with no allowed
  // key uniform weights over all keys, which the fused op's zeros would change.
  int finiteWheres = 0, otherMasks = 0;
};

// The frontend's dropout of the weights w, starting at its multiplication `mul`; returns the
// dropped weights.
Value* matchDropout(const Node& mul, const Value* w, const Uses& uses, Match& m) {
  if (mul.op() != OpKind::Mul || mul.result()->type() != w->type()) return nullptr;
  auto inv = splatValue(mul.operand(mul.operand(0) == w ? 1 : 0));
  Node* sel = uses.soleUser(mul.result());
  if (!inv || !sel || sel->op() != OpKind::Where || sel->operand(1) != mul.result() ||
      sel->result()->type() != w->type() || splatValue(sel->operand(2)) != 0.0)
    return nullptr;
  Value* keep = sel->operand(0);
  const Node& ge = *keep->def();
  if (!uses.single(keep) || ge.op() != OpKind::Ge) return nullptr;
  Value* u = ge.operand(0);
  auto p = splatValue(ge.operand(1));
  if (!uses.single(u) || u->def()->op() != OpKind::PhiloxUniform || u->type() != w->type() || !p ||
      !(*p > 0 && *p < 1) || *inv != 1.0 / (1.0 - *p))
    return nullptr;
  m.seed = u->def()->operand(0);
  m.offset = u->def()->operand(1);
  m.pDrop = *p;
  return sel->result();
}

std::optional<Match> matchAttention(const Node& softmax, const Uses& uses) {
  const Value* w = softmax.result();
  const int64_t rank = w->type().rank();
  const DType dt = w->type().dtype;
  if (rank < 2 || (dt != DType::f32 && dt != DType::f64) ||
      normalizeAxis(softmax.attrInt("axis"), rank) != rank - 1)
    return std::nullopt;
  Match m;
  // Forward: optional dropout, then weights @ v.
  const Value* weights = w;
  Node* next = uses.soleUser(w);
  if (next && next->op() == OpKind::Mul) {
    weights = matchDropout(*next, w, uses, m);
    next = weights ? uses.soleUser(weights) : nullptr;
  }
  if (!next || next->op() != OpKind::MatMul || next->operand(0) != weights ||
      next->attrBool("transpose_a"))
    return std::nullopt;
  m.out = next;
  m.v = next->attrBool("transpose_b") ? swapped(next->operand(1)) : asIs(next->operand(1));

  // Backward: masks and scales down to the scores matmul. `after` is the product of the scales
  // applied after the current step, which a mask's penalty goes through.
  Value* cur = softmax.operand(0);
  double after = 1;
  while (true) {
    if (!uses.single(cur)) return std::nullopt;
    const Node& n = *cur->def();
    if (n.op() == OpKind::MatMul) break;
    if (auto s = scaleStep(n)) {
      m.scale *= s->second;
      after *= s->second;
      cur = s->first;
    } else if (auto k = maskStep(n)) {
      if (!(after > 0 && k->penalty * after <= kMaskPenalty)) return std::nullopt;
      splitConjuncts(k->allowed, m.masks);
      ++(n.op() == OpKind::Where && std::isfinite(k->penalty) ? m.finiteWheres : m.otherMasks);
      cur = k->scores;
    } else if (auto b = biasStep(n, uses)) {
      // s + (B + P), HF's position bias plus its padding penalty: P is a mask, B a bias.
      const Node& sum = *b->bias->def();
      std::optional<MaskStep> penalty;
      Value* rest = nullptr;
      if (sum.op() == OpKind::Add && !b->negated && after > 0)
        for (size_t side : {0u, 1u})
          if (!penalty && (penalty = maskPenalty(sum.operand(side)))) rest = sum.operand(1 - side);
      if (penalty && penalty->penalty * after <= kMaskPenalty) {
        splitConjuncts(penalty->allowed, m.masks);
        ++m.otherMasks;
        m.biases.push_back({rest, after});
      } else {
        m.biases.push_back({b->bias, b->negated ? -after : after});
      }
      cur = b->scores;
    } else {
      return std::nullopt;
    }
  }
  const Node& scores = *cur->def();
  Value* a = scores.operand(0);
  Value* b = scores.operand(1);
  for (Value** x : {&a, &b})
    if (auto s = uses.single(*x) ? scaleStep(*(*x)->def()) : std::nullopt) {
      m.scale *= s->second;
      *x = s->first;
    }
  m.q = scores.attrBool("transpose_a") ? swapped(a) : asIs(a);
  m.k = scores.attrBool("transpose_b") ? asIs(b) : swapped(b);
  if (!std::isfinite(m.scale)) return std::nullopt;

  // One rank and equal batch dims: [..., Tq, D], [..., Tk, D], [..., Tk, Dv].
  const Shape &qs = m.q.shape, &ks = m.k.shape, &vs = m.v.shape;
  const auto r = static_cast<size_t>(rank);
  if (qs.size() != r || ks.size() != r || vs.size() != r) return std::nullopt;
  for (size_t i = 0; i + 2 < r; ++i)
    if (ks[i] != qs[i] || vs[i] != qs[i]) return std::nullopt;
  return m;
}

// Erases each of `starts` that is dead, then every node that only they (transitively) kept
// alive.
void eraseDeadFrom(Graph& g, std::vector<Node*> starts) {
  std::unordered_map<const Value*, size_t> uses;
  for (const auto& [v, users] : g.computeUsers()) uses[v] = users.size();
  for (const Value* o : g.outputs()) ++uses[o];
  std::vector<Node*> work = std::move(starts);
  std::unordered_set<const Node*> erased;
  while (!work.empty()) {
    Node* n = work.back();
    work.pop_back();
    if (erased.count(n) || n->op() == OpKind::Input) continue;
    bool dead = true;
    for (size_t r = 0; r < n->numResults(); ++r) dead = dead && uses[n->result(r)] == 0;
    if (!dead) continue;
    for (Value* o : n->operands()) {
      --uses[o];
      work.push_back(o->def());
    }
    erased.insert(n);
    g.erase(n);
  }
}

// Whether v is a transpose that swaps dims -3 and -2 and keeps the others ([0, 2, 1, 3]).
bool isHeadSwap(const Value* v) {
  const Node* n = v->def();
  if (n->op() != OpKind::Transpose) return false;
  const std::vector<int64_t>& perm = n->attrInts("perm");
  const size_t r = perm.size();
  if (r < 3) return false;
  for (size_t i = 0; i < r; ++i) {
    const size_t want = i == r - 3 ? r - 2 : i == r - 2 ? r - 3 : i;
    if (perm[i] != static_cast<int64_t>(want)) return false;
  }
  return true;
}

// The head-split fold (see the top): q, k, v become the transposes' operands; returns
// whether it applies.
bool foldHeadSplits(std::vector<Value*>& operands) {
  if (envFlag("TGC_NO_ATTENTION_LAYOUT")) return false;
  for (size_t i = 0; i < 3; ++i)
    if (!isHeadSwap(operands[i])) return false;
  for (size_t i = 0; i < 3; ++i) operands[i] = operands[i]->def()->operand(0);
  return true;
}

// After a fold, `old` [..., H, Tq, Dv] is replaced by the fused op's `out` [..., Tq, H, Dv]:
// head-swapping transposes of old read out instead; other uses (and graph outputs) read a
// transpose of out, added before `anchor`. Returns the transposes made dead.
std::vector<Node*> rewireFoldedOut(Graph& g, Value* old, Value* out, const Node* anchor) {
  std::vector<Node*> dead;
  bool others = std::count(g.outputs().begin(), g.outputs().end(), old) > 0;
  const auto users = g.computeUsers();
  for (Node* user : users.count(old) ? users.at(old) : std::vector<Node*>{}) {
    if (isHeadSwap(user->result())) {
      if (std::find(dead.begin(), dead.end(), user) != dead.end()) continue;
      g.replaceAllUsesWith(user->result(), out);
      dead.push_back(user);
    } else {
      others = true;
    }
  }
  if (others) {
    const size_t r = static_cast<size_t>(out->type().rank());
    std::vector<int64_t> perm(r);
    for (size_t i = 0; i < r; ++i) perm[i] = static_cast<int64_t>(i);
    std::swap(perm[r - 3], perm[r - 2]);
    Node* back = g.add(OpKind::Transpose, {out}, {{"perm", perm}}, {out->name() + ".bhtd"});
    g.moveBefore(back, anchor);
    g.replaceAllUsesWith(old, back->result());
  }
  return dead;
}

void rewrite(Graph& g, const Match& m) {
  Node* out = m.out;
  const std::string name = out->result()->name();
  const size_t rank = static_cast<size_t>(out->result()->type().rank());
  const int64_t tq = m.q.shape[rank - 2], tk = m.k.shape[rank - 2];
  std::vector<Node*> added;
  auto add = [&](OpKind op, std::vector<Value*> operands, AttrMap attrs, const std::string& suffix) {
    added.push_back(g.add(op, std::move(operands), std::move(attrs), {name + suffix}));
    return added.back()->result();
  };
  auto operand = [&](const Operand& o, const char* suffix) {
    return o.perm.empty() ? o.base : add(OpKind::Transpose, {o.base}, {{"perm", o.perm}}, suffix);
  };
  std::vector<Value*> operands{operand(m.q, ".q"), operand(m.k, ".k"), operand(m.v, ".v")};
  std::vector<Node*> unfolded;  // the head-split transposes, dead once folded
  for (size_t i = 0; i < 3; ++i) unfolded.push_back(operands[i]->def());
  const bool bthd = foldHeadSplits(operands);
  if (!bthd) unfolded.clear();

  bool causal = false;
  Value* mask = nullptr;
  for (const Conjunct& c : m.masks) {
    switch (classifyConstantMask(g, c, tq, tk)) {
      case ConstantMask::AllTrue: continue;
      case ConstantMask::Causal: causal = true; continue;
      case ConstantMask::NotConstant:
      case ConstantMask::Other: break;
    }
    Value* v = c.pred;
    for (const Node* view : c.views) v = add(view->op(), {v}, view->attrs(), ".mask");
    if (c.negated) v = add(OpKind::LogicalNot, {v}, {}, ".mask");
    mask = mask ? add(OpKind::LogicalAnd, {mask, v}, {}, ".mask") : v;
  }
  // The bias: the sum of each B times its factor, at the scores' rank (leading 1s added).
  Value* bias = nullptr;
  for (const Match::Bias& b : m.biases) {
    Value* term = b.value;
    if (b.factor != 1) {
      added.push_back(g.add(OpKind::Constant, {}, {{"value", std::vector<double>{b.factor}}},
                            {name + ".bias_scale"}, {TensorType{term->type().dtype, {}}}));
      term = add(OpKind::Mul, {term, added.back()->result()}, {}, ".bias");
    }
    bias = bias ? add(OpKind::Add, {bias, term}, {}, ".bias") : term;
  }
  AttrMap attrs{{"scale", m.scale}, {"causal", causal}, {"has_mask", mask != nullptr},
                {"has_bias", bias != nullptr}, {"p_drop", m.pDrop}};
  auto atRank = [&](Value* x, const char* suffix) {
    Shape s = x->type().shape;
    if (s.size() == rank) return x;
    s.insert(s.begin(), rank - s.size(), 1);
    return add(OpKind::Reshape, {x}, {{"shape", s}}, suffix);
  };
  if (mask) operands.push_back(atRank(mask, ".mask"));
  if (bias) operands.push_back(atRank(bias, ".bias"));
  if (m.pDrop > 0) {
    operands.push_back(m.seed);
    operands.push_back(m.offset);
  }
  if (bthd) attrs["layout"] = std::string("bthd");
  g.renameValue(out->result(), name + ".unfused");  // the fused op takes over the name
  Node* fused = g.add(OpKind::FusedAttention, operands, attrs, {name, name + ".lse"});
  added.push_back(fused);
  for (Node* n : added) g.moveBefore(n, out);  // every operand is defined before `out`
  Value* result = fused->result(0);
  if (mask && m.finiteWheres > 0 && m.otherMasks == 0 && m.pDrop == 0) {
    // The user's result for a row with no allowed key: uniform weights over every key, the
    // mean of v. out = where(any key allowed, fused, mean(v)), in the fused op's layout.
    const size_t r = rank;
    const int64_t keyAxis = static_cast<int64_t>(r) - (bthd ? 3 : 2);
    const DType dt = result->type().dtype;
    const size_t first = added.size();
    Value* allowed = atRank(mask, ".mask");
    if (causal) {  // the keys j <= i of each query i
      auto iota = [&](int64_t axis, const char* suffix) {
        added.push_back(g.add(OpKind::Iota, {}, {{"axis", axis}}, {name + suffix},
                              {TensorType{DType::i64, {tq, tk}}}));
        return added.back()->result();
      };
      Value* below = add(OpKind::Le, {iota(1, ".causal_cols"), iota(0, ".causal_rows")}, {}, ".causal");
      allowed = add(OpKind::LogicalAnd, {allowed, atRank(below, ".causal")}, {}, ".allowed");
    }
    Value* count = add(OpKind::ReduceMax, {add(OpKind::Cast, {allowed}, {{"dtype", dt}}, ".allowed_f")},
                       {{"axes", std::vector<int64_t>{-1}}, {"keepdims", true}}, ".row_allowed");
    added.push_back(g.add(OpKind::Constant, {}, {{"value", std::vector<double>{0}}},
                          {name + ".zero"}, {TensorType{dt, {}}}));
    Value* any = add(OpKind::Gt, {count, added.back()->result()}, {}, ".row_any");
    if (bthd) {  // [.., H, Tq, 1] -> [.., Tq, H, 1]
      std::vector<int64_t> perm(r);
      for (size_t i = 0; i < r; ++i) perm[i] = static_cast<int64_t>(i);
      std::swap(perm[r - 3], perm[r - 2]);
      any = add(OpKind::Transpose, {any}, {{"perm", perm}}, ".row_any");
    }
    Value* meanV = add(OpKind::ReduceMean, {operands[2]},
                       {{"axes", std::vector<int64_t>{keyAxis}}, {"keepdims", true}}, ".uniform");
    result = add(OpKind::Where, {any, result, meanV}, {}, ".rows_kept");
    for (size_t i = first; i < added.size(); ++i) g.moveBefore(added[i], out);
  }
  std::vector<Node*> dead = std::move(unfolded);
  if (bthd) {
    for (Node* n : rewireFoldedOut(g, out->result(), result, out)) dead.push_back(n);
  } else {
    g.replaceAllUsesWith(out->result(), result);
  }
  dead.push_back(out);
  eraseDeadFrom(g, std::move(dead));
}

}  // namespace

bool runFuseAttention(Graph& g, PassContext&) {
  bool changed = false;
  std::set<std::string> tried;  // softmax values already looked at (names are stable)
  for (bool again = true; again;) {
    again = false;
    const Uses uses(g);
    for (const auto& n : g.nodes()) {
      if (n->op() != OpKind::Softmax || !tried.insert(n->result()->name()).second) continue;
      if (auto m = matchAttention(*n, uses)) {
        rewrite(g, *m);  // invalidates `uses` and the node list: start over
        changed = again = true;
        break;
      }
    }
  }
  return changed;
}

}  // namespace tgc
