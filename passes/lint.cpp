#include "passes/lint.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <unordered_map>

#include "passes/attention_mask.h"
#include "passes/rewrite.h"

namespace tgc {
namespace {

// Views and casts: what a value goes through without being computed anew.
bool isView(OpKind k) {
  return k == OpKind::Reshape || k == OpKind::Transpose || k == OpKind::Broadcast ||
         k == OpKind::Cast || k == OpKind::Slice;
}

const Value* throughViews(const Value* v) {
  for (int i = 0; i < 64 && isView(v->def()->op()); ++i) v = v->def()->operand(0);
  return v;
}

// Which data inputs (not parameters, not a training graph's seed and step) each node's
// results depend on, as bits; inputs past the 63rd share the last bit.
class Sources {
 public:
  explicit Sources(const Graph& g) {
    for (const auto& n : g.nodes()) {
      uint64_t bits = 0;
      if (n->op() == OpKind::Input) {
        const std::string role = n->attrs().count("role") ? n->attrString("role") : "";
        const std::string& name = n->result()->name();
        const bool counter = (name == "seed" || name == "step") && n->result()->type().rank() == 0;
        if (role != "param" && role != "state" && !counter) {
          bits = uint64_t{1} << std::min<size_t>(names_.size(), 63);
          names_.push_back(name);
        }
      }
      for (const Value* o : n->operands()) bits |= bits_.at(o->def());
      bits_[n.get()] = bits;
    }
  }
  uint64_t of(const Value* v) const { return bits_.at(v->def()); }
  // "'src'" or "'src' and 'tgt_in'".
  std::string describe(uint64_t bits) const {
    std::vector<std::string> parts;
    for (size_t i = 0; i < names_.size() && i < 64; ++i)
      if (bits & (uint64_t{1} << i)) parts.push_back("'" + names_[i] + "'");
    if (parts.empty()) return "no input";
    std::string s = parts[0];
    for (size_t i = 1; i < parts.size(); ++i) s += (i + 1 == parts.size() ? " and " : ", ") + parts[i];
    return s;
  }
  const std::string& name(int bit) const { return names_.at(static_cast<size_t>(bit)); }
  int bitOf(const Value* input) const {
    for (size_t i = 0; i < names_.size(); ++i)
      if (names_[i] == input->name()) return static_cast<int>(std::min<size_t>(i, 63));
    return -1;
  }

 private:
  std::unordered_map<const Node*, uint64_t> bits_;
  std::vector<std::string> names_;
};

// An attention written out: softmax over the last axis of scores = matmul(q, k) through
// scales, masks and additive biases.
struct Attention {
  const Node* softmax = nullptr;
  const Node* scores = nullptr;
  const Value* q = nullptr;
  const Value* k = nullptr;
  int64_t tq = 0, tk = 0, head = 0;
  double scale = 1;
  const Node* scaleNode = nullptr;
  std::vector<Conjunct> masks;
  std::vector<const Node*> maskNodes;  // the step that applied each of `masks`
  std::vector<const Value*> biases;
};

// Whether v reaches a matmul of rank `rank` through scales, masks and adds.
bool reachesScores(const Value* v, int64_t rank, int depth = 0) {
  const Node& n = *v->def();
  if (n.op() == OpKind::MatMul) return v->type().rank() == rank;
  if (depth > 16) return false;
  if (auto s = scaleStep(n)) return reachesScores(s->first, rank, depth + 1);
  if (auto m = maskStep(n)) return reachesScores(m->scores, rank, depth + 1);
  if (n.op() == OpKind::Add || n.op() == OpKind::Sub)
    for (const Value* o : n.operands())
      if (o->type() == v->type() && reachesScores(o, rank, depth + 1)) return true;
  return false;
}

std::optional<Attention> attentionAt(const Node& softmax) {
  const Value* w = softmax.result();
  const int64_t rank = w->type().rank();
  if (rank < 2 || normalizeAxis(softmax.attrInt("axis"), rank) != rank - 1) return std::nullopt;
  Attention a;
  a.softmax = &softmax;
  auto addMask = [&](const Conjunct& c, const Node* at) {
    const size_t before = a.masks.size();
    splitConjuncts(c, a.masks);
    for (size_t i = before; i < a.masks.size(); ++i) a.maskNodes.push_back(at);
  };
  const Value* cur = softmax.operand(0);
  for (int depth = 0;; ++depth) {
    const Node& n = *cur->def();
    if (n.op() == OpKind::MatMul) break;
    if (depth > 64) return std::nullopt;
    if (auto s = scaleStep(n)) {
      a.scale *= s->second;
      a.scaleNode = &n;
      cur = s->first;
    } else if (auto m = maskStep(n)) {
      addMask(m->allowed, &n);
      cur = m->scores;
    } else if (n.op() == OpKind::Add || n.op() == OpKind::Sub) {
      const Value* next = nullptr;
      for (const Value* o : n.operands())
        if (!next && o->type() == cur->type() && reachesScores(o, rank)) next = o;
      if (!next) return std::nullopt;
      const Value* term = n.operand(0) == next ? n.operand(1) : n.operand(0);
      // s + (B + P), a bias plus a padding penalty: P is a mask.
      const Node& t = *term->def();
      bool split = false;
      if (t.op() == OpKind::Add)
        for (const Value* part : t.operands())
          if (auto p = maskPenalty(part)) {
            addMask(p->allowed, &n);
            a.biases.push_back(t.operand(0) == part ? t.operand(1) : t.operand(0));
            split = true;
            break;
          }
      if (!split) a.biases.push_back(term);
      cur = next;
    } else {
      return std::nullopt;
    }
  }
  const Node& mm = *cur->def();
  const Value* lhs = mm.operand(0);
  if (auto s = scaleStep(*lhs->def())) {  // q scaled before the product
    a.scale *= s->second;
    a.scaleNode = lhs->def();
    lhs = s->first;
  }
  const Value* rhs = mm.operand(1);
  if (auto s = scaleStep(*rhs->def())) {
    a.scale *= s->second;
    a.scaleNode = rhs->def();
    rhs = s->first;
  }
  a.scores = &mm;
  a.q = lhs;
  a.k = rhs;
  const Shape& qs = lhs->type().shape;
  if (qs.size() < 2) return std::nullopt;
  a.head = mm.attrBool("transpose_a") ? qs[qs.size() - 2] : qs.back();
  a.tq = cur->type().shape[static_cast<size_t>(rank - 2)];
  a.tk = cur->type().shape[static_cast<size_t>(rank - 1)];
  return a;
}

// The sequences whose embedding declares a pad id: gather(table, ids) * cast(ids != pad),
// as nn.tg's Embedding writes it. The data input of ids -> (pad, the gather).
struct PadEmbedding {
  int64_t pad;
  const Node* gather;
  int64_t length;  // the ids' last dim: the positions of the sequence
};

std::unordered_map<int, PadEmbedding> padEmbeddings(const Graph& g, const Sources& sources) {
  std::unordered_map<int, PadEmbedding> out;
  for (const auto& n : g.nodes()) {
    if (n->op() != OpKind::Mul) continue;
    for (size_t side : {0u, 1u}) {
      const Node& gather = *n->operand(side)->def();
      const Node& ne = *throughViews(n->operand(1 - side))->def();
      if (gather.op() != OpKind::Gather || ne.op() != OpKind::Ne) continue;
      const Value* ids = gather.operand(1);
      auto pad = splatValue(ne.operand(1));
      if (ne.operand(0) != ids || !pad) continue;
      const Value* root = throughViews(ids);
      if (root->def()->op() != OpKind::Input) continue;
      const int bit = sources.bitOf(root);
      const Shape& s = root->type().shape;
      if (bit >= 0 && !s.empty())
        out.emplace(bit, PadEmbedding{static_cast<int64_t>(*pad), &gather, s.back()});
    }
  }
  return out;
}

void checkNormalizedTwice(const Graph& g, std::vector<LintFinding>& out) {
  for (const auto& n : g.nodes()) {
    if (n->op() != OpKind::LogSoftmax && n->op() != OpKind::SoftmaxCrossEntropy) continue;
    const Value* x = n->operand(0);
    const int64_t rank = x->type().rank();
    if (n->op() == OpKind::LogSoftmax && normalizeAxis(n->attrInt("axis"), rank) != rank - 1)
      continue;
    const Value* src = throughViews(x);
    const Node& inner = *src->def();
    if (inner.op() != OpKind::Softmax && inner.op() != OpKind::LogSoftmax) continue;
    const int64_t r = src->type().rank();
    if (normalizeAxis(inner.attrInt("axis"), r) != r - 1 || src->type().shape.back() != x->type().shape.back())
      continue;
    LintFinding f;
    f.name = "normalized-twice";
    f.node = &inner;
    f.related = n.get();
    f.relatedNote = fmt::format("the {} that normalizes it again", opName(n->op()));
    if (inner.op() == OpKind::Softmax) {
      f.message = fmt::format("the output of softmax goes into {}, which normalizes it again: the "
                              "loss sees log(softmax(softmax(x))), not log(softmax(x))",
                              opName(n->op()));
      f.fix = "give the loss the logits themselves, without the softmax";
    } else {
      f.message = fmt::format("the output of log_softmax goes into {}, which normalizes it again "
                              "(a no-op on log-probabilities, but the loss expects logits)",
                              opName(n->op()));
      f.fix = "give the loss the logits themselves, without the log_softmax";
    }
    out.push_back(std::move(f));
  }
}

void checkAttention(const Graph& g, const Attention& a, const Sources& sources,
                    const std::unordered_map<int, PadEmbedding>& pads, std::vector<LintFinding>& out) {
  bool causal = false;
  const Node* causalAt = nullptr;
  for (size_t i = 0; i < a.masks.size(); ++i)
    if (classifyConstantMask(g, a.masks[i], a.tq, a.tk) == ConstantMask::Causal) {
      causal = true;
      causalAt = a.maskNodes[i];
    }
  const uint64_t qBits = sources.of(a.q), kBits = sources.of(a.k);

  if (causal && (qBits != kBits || a.tq != a.tk)) {
    LintFinding f;
    f.name = "causal-cross-attention";
    f.node = causalAt;
    f.message = qBits != kBits
                    ? fmt::format("a causal mask on attention whose keys come from {} but whose "
                                  "queries come from {}: key j is not position j of the queries' "
                                  "sequence", sources.describe(kBits), sources.describe(qBits))
                    : fmt::format("a causal mask on attention of {} queries over {} keys: the "
                                  "keys are another sequence", a.tq, a.tk);
    f.fix = "mask cross-attention with the keys' padding mask, not a causal one";
    f.related = a.softmax;
    f.relatedNote = "the attention's softmax";
    out.push_back(std::move(f));
  }

  if (a.scaleNode && std::fabs(a.scale - 1) > 1e-9 && a.head >= 2) {
    const double n = 1 / (a.scale * a.scale), sq = a.scale * a.scale;
    const double rn = std::round(n), rsq = std::round(sq);
    const auto d = static_cast<double>(a.head);
    LintFinding f;
    f.name = "attention-scale";
    f.node = a.scaleNode;
    f.fix = fmt::format("scale the scores by 1/sqrt({}): divide by sqrt(q.shape[-1])", a.head);
    if (rn >= 2 && std::fabs(n - rn) <= 1e-3 * rn && rn != d) {
      f.message = fmt::format("the attention scores are scaled by 1/sqrt({}) ({:.6g}), but the "
                              "head size (the last dim of q) is {}", rn, a.scale, a.head);
      out.push_back(std::move(f));
    } else if (rsq == d && std::fabs(sq - rsq) <= 1e-3 * rsq) {
      f.message = fmt::format("the attention scores are multiplied by sqrt({}) ({:.6g}) instead "
                              "of divided by it", a.head, a.scale);
      out.push_back(std::move(f));
    }
  }

  if (!causal)
    for (const auto& [bit, pad] : pads) {
      const uint64_t b = uint64_t{1} << bit;
      // Keys over the sequence's positions: not a decoding step's cache, to which the new
      // token adds one position.
      if (!(kBits & b) || a.tk != pad.length) continue;
      bool masked = false;
      for (const Conjunct& c : a.masks) masked = masked || (sources.of(c.pred) & b);
      for (const Value* v : a.biases) masked = masked || (sources.of(v) & b);
      if (masked) continue;
      const std::string seq = sources.describe(b);
      LintFinding f;
      f.name = "missing-padding-mask";
      f.node = a.softmax;
      f.message = fmt::format("the keys come from {}, whose embedding declares pad {}, but this "
                              "attention has no mask computed from {}: pad tokens are attended to",
                              seq, pad.pad, seq);
      f.fix = fmt::format("mask the scores with padding_mask({0}, {1}) (true where {0} != {1})",
                          sources.name(bit), pad.pad);
      f.related = pad.gather;
      f.relatedNote = "the embedding with the pad id";
      out.push_back(std::move(f));
    }
}

}  // namespace

const std::vector<std::string>& lintWarningNames() {
  static const std::vector<std::string> names = {
      "unused-value",         "normalized-twice",     "causal-cross-attention",
      "attention-scale",      "missing-padding-mask", "dropout-in-inference"};
  return names;
}

std::vector<LintFinding> lintGraph(const Graph& g) {
  std::vector<LintFinding> out;
  checkNormalizedTwice(g, out);
  const Sources sources(g);
  const auto pads = padEmbeddings(g, sources);
  for (const auto& n : g.nodes())
    if (n->op() == OpKind::Softmax)
      if (auto a = attentionAt(*n)) checkAttention(g, *a, sources, pads, out);
  return out;
}

}  // namespace tgc
