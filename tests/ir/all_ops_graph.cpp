#include "tests/ir/all_ops_graph.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>

namespace tgc::test {

std::unique_ptr<Graph> buildAllOpsGraph() {
  auto g = std::make_unique<Graph>("all_ops");
  g->setDims({{"B", 2}, {"D", 3}});
  auto f32 = [](Shape s) { return TensorType{DType::f32, std::move(s)}; };
  std::vector<Value*> outs;
  // One node; its result is returned unless it is a source (so no pass finds dead code).
  auto node = [&](OpKind k, std::vector<Value*> operands, AttrMap attrs, std::string name,
                  std::vector<TensorType> declared = {}) {
    Value* v =
        g->add(k, std::move(operands), std::move(attrs), {std::move(name)}, std::move(declared))
            ->result();
    if (!opInfo(k).isSource()) outs.push_back(v);
    return v;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();

  // Sources; names exercise quoting (space, quote, newline, tab, UTF-8) and dots.
  Value* x = node(OpKind::Input, {}, {{"role", std::string("param")}}, "enc.0.x", {f32({2, 3})});
  Value* gamma = node(OpKind::Input, {}, {}, "gamma \"g\"\n\t权重", {f32({3})});
  Value* beta = node(OpKind::Input, {}, {{"role", std::string("state")}}, "beta", {f32({3})});
  Value* seed = node(OpKind::Input, {}, {}, "seed", {{DType::i64, {}}});
  Value* idx = node(OpKind::Input, {}, {}, "idx", {{DType::i32, {2}}});
  Value* table = node(OpKind::Input, {}, {}, "table", {f32({5, 3})});
  Value* c =
      node(OpKind::Constant, {}, {{"value", std::vector<double>{1.5, -0.0, inf, -inf, nan, 1e-5}}},
           "c", {f32({2, 3})});
  Value* offset =
      node(OpKind::Constant, {}, {{"value", std::vector<double>{7}}}, "offset", {{DType::i64, {}}});
  Value* iota = node(OpKind::Iota, {}, {{"axis", int64_t{1}}}, "iota", {{DType::i64, {2, 3}}});
  Value* rnd = node(OpKind::PhiloxUniform, {seed, offset}, {}, "rand", {f32({2, 3})});

  for (OpKind k : {OpKind::Neg, OpKind::Abs, OpKind::Exp, OpKind::Log, OpKind::Sqrt, OpKind::Rsqrt,
                   OpKind::Tanh, OpKind::Erf, OpKind::Sigmoid, OpKind::Silu, OpKind::Relu})
    node(k, {x}, {}, "u." + std::string(opName(k)));
  node(OpKind::Gelu, {x}, {{"approximate", std::string("tanh")}}, "gelu");
  node(OpKind::Cast, {x}, {{"dtype", DType::i32}}, "cast");

  for (OpKind k : {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Pow, OpKind::Maximum,
                   OpKind::Minimum, OpKind::Eq, OpKind::Ne, OpKind::Lt, OpKind::Le, OpKind::Ge})
    node(k, {x, rnd}, {}, "b." + std::string(opName(k)));
  Value* gt = node(OpKind::Gt, {x, c}, {}, "gt");
  Value* notGt = node(OpKind::LogicalNot, {gt}, {}, "not_gt");
  node(OpKind::LogicalAnd, {gt, notGt}, {}, "and");
  node(OpKind::LogicalOr, {gt, notGt}, {}, "or");
  node(OpKind::Where, {gt, x, c}, {}, "where");

  node(OpKind::ReduceSum, {x}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", true}}, "sum");
  node(OpKind::ReduceMax, {x}, {{"axes", std::vector<int64_t>{0}}}, "max");
  node(OpKind::ReduceMean, {iota}, {{"axes", std::vector<int64_t>{0, -1}}}, "mean");
  node(OpKind::Softmax, {x}, {{"axis", int64_t{0}}}, "softmax");
  node(OpKind::LogSoftmax, {x}, {}, "log_softmax");
  node(OpKind::LayerNorm, {x, gamma, beta}, {{"eps", 1e-3}}, "ln");
  node(OpKind::RmsNorm, {x, gamma}, {{"eps", 1e-3}}, "rms");
  node(OpKind::MatMul, {x, x}, {{"transpose_b", true}}, "mm");

  node(OpKind::Reshape, {x}, {{"shape", std::vector<int64_t>{3, 2}}}, "reshape");
  node(OpKind::Transpose, {x}, {{"perm", std::vector<int64_t>{1, 0}}}, "transpose");
  node(OpKind::Broadcast, {gamma}, {{"shape", std::vector<int64_t>{2, 3}}}, "broadcast");
  node(OpKind::Slice, {x},
       {{"axis", int64_t{1}}, {"start", int64_t{0}}, {"end", int64_t{3}}, {"step", int64_t{2}}},
       "slice");
  node(OpKind::Concat, {x, rnd, c}, {{"axis", int64_t{0}}}, "concat");
  node(OpKind::Gather, {table, idx}, {}, "gather");
  node(OpKind::ScatterAdd, {idx, x}, {{"rows", int64_t{5}}}, "scatter");
  Value* starts = node(OpKind::Constant, {}, {{"value", std::vector<double>{1, 0}}}, "starts", {{DType::i64, {2}}});
  node(OpKind::DynamicUpdateSlice, {table, x, starts}, {}, "updated");

  // Fused attention with every optional operand; all results are outputs.
  Value* keys = node(OpKind::Slice, {gt}, {{"axis", int64_t{1}}, {"start", int64_t{0}}, {"end", int64_t{2}}},
                     "attn.mask");
  AttrMap attn{{"scale", 0.5}, {"causal", true}, {"has_mask", true}, {"p_drop", 0.25}};
  Node* fa = g->add(OpKind::FusedAttention, {x, x, x, keys, seed, offset}, attn, {"attn", "attn.lse"});
  Node* fag = g->add(OpKind::FusedAttentionGrad,
                     {x, x, x, fa->result(0), fa->result(1), fa->result(0), keys, seed, offset}, attn,
                     {"attn.dq", "attn.dk", "attn.dv"});
  for (Node* n : {fa, fag})
    for (size_t r = 0; r < n->numResults(); ++r) outs.push_back(n->result(r));

  // Softmax-cross-entropy (smoothed) and its gradient; layer_norm's gradient.
  AttrMap smooth{{"smoothing", 0.1}};
  Node* ce = g->add(OpKind::SoftmaxCrossEntropy, {x, idx}, smooth, {"xent", "xent.lse"});
  Node* ceg = g->add(OpKind::SoftmaxCrossEntropyGrad, {x, idx, ce->result(1), ce->result(0)},
                     smooth, {"xent.dlogits"});
  Value* xt = node(OpKind::Transpose, {x}, {{"perm", std::vector<int64_t>{1, 0}}}, "xt");
  node(OpKind::QuantizedMatmul, {x, xt}, {{"weights_constant", true}}, "qmm");
  Node* lng = g->add(OpKind::LayerNormGrad, {x, gamma, x}, {{"eps", 1e-3}},
                     {"ln.dx", "ln.dgamma", "ln.dbeta"});
  for (Node* n : {ce, ceg, lng})
    for (size_t r = 0; r < n->numResults(); ++r) outs.push_back(n->result(r));

  g->setOutputs(outs);
  return g;
}

std::vector<OpKind> opsMissingFrom(const Graph& g) {
  std::set<OpKind> used;
  for (const auto& n : g.nodes()) used.insert(n->op());
  std::vector<OpKind> missing;
  for (const auto& info : allOps())
    if (!used.count(info.kind)) missing.push_back(info.kind);
  return missing;
}

}  // namespace tgc::test
