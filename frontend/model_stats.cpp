#include "frontend/model_stats.h"

#include <fmt/format.h>

namespace tgc {

static double nodeFlops(const Node& n) {
  const Value* r = n.result();
  double out = static_cast<double>(r->type().numel());
  switch (n.op()) {
    case OpKind::Input: case OpKind::Constant: return 0;
    case OpKind::MatMul: {
      const TensorType& a = n.operand(0)->type();
      int64_t k = n.attrBool("transpose_a") ? a.shape[a.shape.size() - 2] : a.shape.back();
      return 2.0 * out * static_cast<double>(k);
    }
    case OpKind::FusedAttention: case OpKind::FusedAttentionGrad: {
      // Per query row: q k^T and p v are 2 Tk D multiply-adds each, the softmax ~5 Tk;
      // the backward recomputes p and has four products. Causal rows see half the keys.
      const TensorType& q = n.operand(0)->type();
      const TensorType& k = n.operand(1)->type();
      const bool bthd = n.attrString("layout") == "bthd";
      const double tk = static_cast<double>(k.shape[k.shape.size() - (bthd ? 3 : 2)]);
      const double d = static_cast<double>(q.shape.back());
      const double rows = static_cast<double>(q.numel()) / d;
      const double products = n.op() == OpKind::FusedAttention ? 2 : 5;
      return rows * tk * (2.0 * d * products + 5.0) * (n.attrBool("causal") ? 0.5 : 1.0);
    }
    case OpKind::SoftmaxCrossEntropy: case OpKind::SoftmaxCrossEntropyGrad:
      return 5.0 * static_cast<double>(n.operand(0)->type().numel());
    case OpKind::Softmax: case OpKind::LogSoftmax: return 5.0 * out;
    case OpKind::LayerNorm: return 8.0 * out;
    case OpKind::RmsNorm: return 4.0 * out;
    default: break;
  }
  switch (n.info().fusion) {
    case FusionKind::Elementwise: return out;
    case FusionKind::Reduction: return static_cast<double>(n.operand(0)->type().numel());
    default: return 0;
  }
}

GraphStats computeStats(const Graph& g) {
  GraphStats s;
  for (const auto& n : g.nodes()) {
    ++s.node_count;
    std::string name(n->info().name);
    ++s.op_counts[name];
    if (n->op() == OpKind::Input && n->attrString("role") == "param") {
      ++s.param_tensors;
      s.param_count += n->result()->type().numel();
    }
    double f = nodeFlops(*n);
    s.flops += f;
    if (f > 0) s.flops_by_op[name] += f;
  }
  return s;
}

static std::string human(double v) {
  const char* units[] = {"", "K", "M", "G", "T", "P"};
  int u = 0;
  while (v >= 1000 && u < 5) {
    v /= 1000;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f}", v) : fmt::format("{:.2f}{}", v, units[u]);
}

std::string formatStats(const GraphStats& s) {
  auto both = [](double v) {
    std::string h = human(v);
    return v < 1000 ? h : fmt::format("{:.0f} ({})", v, h);
  };
  std::string r = fmt::format("graph statistics:\n  parameters: {} in {} tensors\n  nodes: {}\n"
                              "  estimated FLOPs: {}\n  ops:\n",
                              both(static_cast<double>(s.param_count)), s.param_tensors,
                              s.node_count, both(s.flops));
  for (const auto& [op, n] : s.op_counts) {
    auto f = s.flops_by_op.find(op);
    r += fmt::format("    {:<16} {:>6}{}\n", op, n,
                     f == s.flops_by_op.end() ? "" : fmt::format("   {} FLOPs", human(f->second)));
  }
  return r;
}

}  // namespace tgc
