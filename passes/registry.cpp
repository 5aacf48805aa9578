#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "passes/pass.h"
#include "passes/passes.h"

namespace tgc {
namespace {

// An explicit table rather than static registration: objects in a static library that
// nothing references are dropped by the linker, and their registrations with them.
std::map<std::string, PassInfo, std::less<>> makeBuiltins() {
  std::map<std::string, PassInfo, std::less<>> m;
  auto add = [&](std::string name, std::string desc, PassFn fn) {
    m[name] = PassInfo{name, std::move(desc), std::move(fn)};
  };
  add("canonicalize",
      "algebraic identities (x*1, x+0, neg(neg x)) and layout folding (transpose, reshape, "
      "broadcast, cast, slice no-ops)",
      runCanonicalize);
  add("constant-fold",
      "evaluate nodes whose operands are all constants with the reference interpreter",
      runConstantFold);
  add("cse", "merge nodes with the same op, operands, attributes and result types", runCSE);
  add("fuse-cross-entropy",
      "log_softmax, the iota == targets one-hot and the label-smoothed NLL of each row -> "
      "softmax_cross_entropy (before autodiff)",
      runFuseCrossEntropy);
  add("dce", "remove nodes whose results are unused and are not outputs (inputs stay)",
      runDCE);
  add("fuse-attention",
      "matmul -> scale -> mask -> softmax -> (dropout) -> matmul into one fused_attention "
      "(causal masks from iota become causal=true)",
      runFuseAttention);
  add("fuse-norms",
      "LayerNorm and RMSNorm written out (mean, variance, rsqrt, * gamma, + beta) -> "
      "layer_norm and rms_norm (before autodiff)",
      runFuseNorms);
  add("fuse-activations",
      "GELU written out (0.5 x (1 + erf(x / sqrt 2)) or its tanh form), SiLU (x * sigmoid(x)) "
      "and sigmoid, in any spelling that computes them -> gelu, silu, sigmoid, which GEMM "
      "epilogues fold (before autodiff)",
      runFuseActivations);
  add("quantize",
      "x @ w with w a parameter [K, N] -> quantized_matmul: int8 weights per column, "
      "activations per row, exact integer sums (inference graphs; tgc translate and tgc run "
      "--quantize int8)",
      runQuantize);
  add("fuse-ffn",
      "ReLU -> dropout: the ReLU gradient tests the dropout's output D > 0 instead of the "
      "ReLU input and the keep mask, so only D is saved (after autodiff)",
      runFuseFFN);
  add("rematerialize",
      "saved values cheap to recompute (elementwise/layout chains of values live anyway: "
      "dropout masks, transposes, casts) are recomputed in the backward (after autodiff)",
      runRematerialize);
  add("mixed-precision",
      "autocast to bf16: f32 matmuls take a bf16 cast of each operand and cast the product "
      "back to f32; every other op stays f32 (before autodiff; then merge-casts)",
      runMixedPrecision);
  add("merge-casts",
      "identical casts of a value become one and narrow(widen(x)) is x, so a value read by "
      "several bf16 matmuls is cast and saved once (after autodiff)",
      runMergeCasts);
  add("narrow-relu-gradients",
      "bf16 training steps: ReLU gradient masks test the bf16 copies the matmuls keep, so the "
      "f32 ReLU input is not saved (after merge-casts)",
      runNarrowReluGradients);
  add("autodiff",
      "reverse-mode differentiation: the gradients of outputs[0] (the loss) with respect to "
      "every input of role param are appended as outputs grad.<param>",
      runAutodiff);
  add("adamw",
      "the training step's update from the gradients autodiff appended: learning-rate "
      "schedule, global-norm clipping, AdamW; outputs new.<param> and the new moments",
      runAdamW);
  return m;
}

struct Registry {
  std::mutex mu;
  std::map<std::string, PassInfo, std::less<>> passes = makeBuiltins();
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

std::vector<const PassInfo*> allPasses() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<const PassInfo*> out;
  for (const auto& [name, info] : r.passes) out.push_back(&info);
  return out;
}

const PassInfo* findPass(std::string_view name) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.passes.find(name);
  return it == r.passes.end() ? nullptr : &it->second;
}

void registerPass(PassInfo info) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::string name = info.name;
  r.passes.insert_or_assign(std::move(name), std::move(info));
}

std::string knownPassNames() {
  std::string s;
  for (const PassInfo* p : allPasses()) s += (s.empty() ? "" : ", ") + p->name;
  return s;
}

}  // namespace tgc
