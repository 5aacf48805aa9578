#include "passes/train_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ir/builder.h"
#include "passes/autodiff.h"
#include "passes/default_pipeline.h"
#include "passes/pass_manager.h"
#include "passes/passes.h"

namespace tgc {

double scheduledLearningRate(const OptimizerConfig& cfg, int64_t step) {
  if (cfg.schedule == "constant") return cfg.lr;
  double s = static_cast<double>(std::max<int64_t>(step, 1));
  return cfg.lr_scale * std::pow(static_cast<double>(cfg.d_model), -0.5) *
         std::min(std::pow(s, -0.5), s * std::pow(static_cast<double>(cfg.warmup), -1.5));
}

bool runAdamW(Graph& g, PassContext& ctx) {
  const OptimizerConfig& cfg = ctx.optimizer;
  if (cfg.schedule != "noam" && cfg.schedule != "constant")
    throw IRError(fmt::format("adamw: unknown schedule '{}' (noam, constant)", cfg.schedule));
  // The autodiff pass left the gradients as the last outputs, one per parameter in order.
  const std::vector<Value*> params = trainableParameters(g);
  const size_t kept = g.outputs().size() - std::min(g.outputs().size(), params.size());
  if (params.empty() || kept == 0)
    throw IRError(fmt::format("adamw: needs the loss and then one gradient per parameter as outputs "
                              "(run autodiff first); the graph has {} outputs and {} parameters",
                              g.outputs().size(), params.size()));
  std::vector<Value*> grads(g.outputs().begin() + static_cast<std::ptrdiff_t>(kept), g.outputs().end());
  for (size_t i = 0; i < params.size(); ++i)
    if (grads[i]->type() != params[i]->type())
      throw IRError(fmt::format("adamw: output {} (%{}, {}) is not a gradient of parameter %{} ({}); "
                                "run autodiff first",
                                kept + i, grads[i]->name(), grads[i]->type().str(), params[i]->name(),
                                params[i]->type().str()));
  g.setOutputs(std::vector<Value*>(g.outputs().begin(), g.outputs().begin() + static_cast<std::ptrdiff_t>(kept)));
  Value* loss = g.outputs()[0];
  Builder b(g);
  DType ft = loss->type().dtype;
  auto c = [&](double v, const char* name = "c") { return b.scalar(ft, v, name); };

  Value* step = g.findValue("step");
  if (!step || step->def()->op() != OpKind::Input || step->type() != TensorType{DType::i64, {}})
    step = b.input("step", TensorType{DType::i64, {}});
  Builder::Scope scope(b, "optim");
  Value* t = b.cast(step, ft, "t");

  Value* lr;
  if (cfg.schedule == "constant") {
    lr = c(cfg.lr, "lr");
  } else {
    Value* decay = b.unary(OpKind::Rsqrt, t);
    Value* warm = b.mul(t, c(std::pow(static_cast<double>(cfg.warmup), -1.5)));
    Value* sched = b.binary(OpKind::Minimum, decay, warm);
    lr = b.mul(sched, c(cfg.lr_scale / std::sqrt(static_cast<double>(cfg.d_model))), "lr");
  }

  // Global gradient norm, and the clipping factor min(1, clip / (norm + 1e-6)).
  Value* sq = nullptr;
  for (Value* gr : grads) {
    std::vector<int64_t> all;
    for (int64_t i = 0; i < gr->type().rank(); ++i) all.push_back(i);
    Value* s = all.empty() ? b.mul(gr, gr) : b.reduce(OpKind::ReduceSum, b.mul(gr, gr), all);
    sq = sq ? b.add(sq, s) : s;
  }
  Value* norm = sq ? b.unary(OpKind::Sqrt, sq, "grad_norm") : c(0, "grad_norm");
  Value* clip = nullptr;
  if (cfg.clip_norm > 0 && sq)
    clip = b.binary(OpKind::Minimum, c(1), b.div(c(cfg.clip_norm), b.add(norm, c(1e-6))), "clip");

  // Bias corrections 1 - beta^t, applied as PyTorch's AdamW does: the step size
  // lr / (1 - beta1^t) and 1 / sqrt(1 - beta2^t) are scalars computed once per step, so each
  // element costs one square root and one division instead of three divisions and a root.
  Value* bc1 = b.sub(c(1), b.binary(OpKind::Pow, c(cfg.beta1), t), "bias1");
  Value* bc2 = b.sub(c(1), b.binary(OpKind::Pow, c(cfg.beta2), t), "bias2");
  Value* stepSize = b.div(lr, bc1, "step_size");
  Value* invSqrtBc2 = b.unary(OpKind::Rsqrt, bc2, "inv_sqrt_bias2");
  // Decoupled weight decay: lr * wd * p, on top of the Adam step.
  Value* lrDecay = cfg.weight_decay > 0 ? b.mul(lr, c(cfg.weight_decay), "lr_decay") : nullptr;

  g.renameValue(norm, "grad_norm");
  g.renameValue(lr, "lr");
  std::vector<Value*> outs = g.outputs();
  outs.push_back(norm);
  outs.push_back(lr);
  for (size_t i = 0; i < params.size(); ++i) {
    Value* p = params[i];
    const std::string& pn = p->name();
    Value* m = b.input("adam.m." + pn, p->type(), "state");
    Value* v = b.input("adam.v." + pn, p->type(), "state");
    // Inputs are created in the optim scope; give them their plain names.
    g.renameValue(m, "adam.m." + pn);
    g.renameValue(v, "adam.v." + pn);
    Builder::Scope ps(b, pn);
    Value* gr = clip ? b.mul(grads[i], clip, "clipped") : grads[i];
    Value* m2 = b.add(b.mul(m, c(cfg.beta1)), b.mul(gr, c(1 - cfg.beta1)), "m");
    Value* v2 = b.add(b.mul(v, c(cfg.beta2)), b.mul(b.mul(gr, gr), c(1 - cfg.beta2)), "v");
    Value* denom = b.add(b.mul(b.unary(OpKind::Sqrt, v2), invSqrtBc2), c(cfg.eps), "denom");
    Value* upd = b.mul(b.div(m2, denom), stepSize, "update");
    if (lrDecay) upd = b.add(upd, b.mul(p, lrDecay), "update");
    Value* p2 = b.sub(p, upd, "new");
    g.renameValue(p2, "new." + pn);
    g.renameValue(m2, "new.adam.m." + pn);
    g.renameValue(v2, "new.adam.v." + pn);
    outs.push_back(p2);
    outs.push_back(m2);
    outs.push_back(v2);
  }
  g.setOutputs(outs);
  g.topoSort();  // the new inputs were appended after their users' operands
  return true;
}

size_t buildTrainStep(Graph& g, const OptimizerConfig& cfg, const PassManagerOptions& pm) {
  if (g.outputs().empty()) throw IRError("train step: the graph has no outputs (loss first)");
  PipelineMode mode;
  mode.kind = PipelineMode::Kind::TrainStep;
  mode.precision = cfg.precision;
  PassManager manager(defaultPipeline(mode), pm);
  PassContext ctx;
  ctx.optimizer = cfg;
  try {
    manager.run(g, ctx);
  } catch (const PassError& e) {
    throw IRError(fmt::format("train step: {}", e.what()));
  }
  return trainableParameters(g).size();
}

}  // namespace tgc
