// How attention masks and scales are written in Graph IR, for fuse-attention and lint: which
// steps between the scores and the softmax are scales and masks, which keys the masks allow,
// and which of those conditions are a causal mask computed from constants (and so need no
// mask tensor in the fused op).
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace tgc {

// A finite mask constant at or below this masks a score for certain: exp(score + NEG - max)
// underflows to exactly 0 as long as the row's largest allowed score is above NEG + 745.
inline constexpr double kMaskPenalty = -1e4;

// A bool condition "key allowed": `pred` replayed through `views` (reshape / broadcast nodes of
// the float mask it came from), then negated when `negated`.
struct Conjunct {
  Value* pred = nullptr;
  bool negated = false;
  std::vector<const Node*> views;
};

// One masking step `masked = mask(scores)`: the scores it reads, the keys it allows and the
// value masked scores get (-inf, or a constant <= kMaskPenalty).
struct MaskStep {
  Value* scores;
  Conjunct allowed;
  double penalty;
};

// Recognizes n as a masking step:
//   where(m, s, NEG), where(m, NEG, s)       allowed m, resp. not m
//   s + P, P + s, s - (-P)                   P is 0 where allowed and NEG elsewhere, built from a
//                                            bool m by constants only: where(m, 0, NEG),
//                                            (1 - cast(m)) * NEG, cast(m) * NEG, (cast(m) - 1) * 1e9,
//                                            through reshapes and broadcasts
// s must have the step's result type (the mask does not enlarge the scores).
std::optional<MaskStep> maskStep(const Node& n);

// A scaling step: mul or div by a finite nonzero splat constant that keeps the other
// operand's type. Returns that operand and the factor (1 / c for a division).
std::optional<std::pair<Value*, double>> scaleStep(const Node& n);

// A penalty P as maskStep's s + P takes it (0 where allowed, NEG elsewhere, from a bool by
// constants): the keys it allows and NEG. MaskStep::scores is null.
std::optional<MaskStep> maskPenalty(const Value* p);

// Splits `allowed` at logical_and (and, negated, at logical_or; logical_not flips) into the
// conditions that must all hold.
void splitConjuncts(const Conjunct& allowed, std::vector<Conjunct>& out);

enum class ConstantMask {
  NotConstant,  // depends on an input: the fused op reads it as its mask operand
  AllTrue,      // allows every key: dropped
  Causal,       // key j allowed for query i exactly when j <= i: causal=true, no tensor
  Other,        // constant but neither: a mask operand computed at run time as before
};

// Classifies a condition of rank <= the scores' rank broadcast to [..., tq, tk]. A condition
// computed from constants, iota and philox_uniform only is evaluated with the interpreter
// (when its nodes hold at most a few million elements), so every way of writing a causal mask
// (cols <= rows, rows >= cols, not(cols > rows), reshaped, broadcast, ...) is recognized.
ConstantMask classifyConstantMask(const Graph& g, const Conjunct& c, int64_t tq, int64_t tk);

}  // namespace tgc
