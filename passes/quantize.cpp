// quantize: the matmuls of an inference graph whose B is a parameter weight [K, N]
// (x @ w, no transposes, f32, K < 65536) become quantized_matmul (ir/ops.def): the weights
// int8 per output column, each row of x quantized as it runs, exact integer sums on
// AVX512-VNNI where the host has it (codegen/gemm_int8.h). weights_constant is set: the
// executable packs each weight once and keeps it while the same buffer is passed, so a
// caller with new parameter values compiles again (as the translator does).
//
// Left as they are: products of two activations (attention's, which fused_attention runs),
// a tied output projection (x @ E^T: transpose_b), and training graphs, whose gradients need
// the f32 product (quantized_matmul has no gradient rule).
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tgc {

namespace {

bool isParameter(const Value* v) {
  const Node& n = *v->def();
  return n.op() == OpKind::Input && n.attrs().count("role") && n.attrString("role") == "param";
}

}  // namespace

bool runQuantize(Graph& g, PassContext&) {
  std::vector<Node*> targets;
  for (const auto& n : g.nodes()) {
    if (n->op() != OpKind::MatMul || n->attrBool("transpose_a") || n->attrBool("transpose_b"))
      continue;
    const Value* x = n->operand(0);
    const Value* w = n->operand(1);
    if (!isParameter(w) || w->type().rank() != 2 || x->type().dtype != DType::f32 ||
        w->type().dtype != DType::f32 || w->type().shape[0] >= (int64_t{1} << 16))
      continue;
    targets.push_back(n.get());
  }
  Rewriter rw(g);
  for (Node* n : targets)
    rw.replaceWithNew(n, OpKind::QuantizedMatmul, {n->operand(0), n->operand(1)},
                      {{"weights_constant", true}});
  return !targets.empty();
}

}  // namespace tgc
