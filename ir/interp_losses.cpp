// Reference kernels of softmax_cross_entropy, its gradient and layer_norm_grad
// (ir/fused_ops.h). Placeholder until the loss work lands: refuses to run.
#include <fmt/format.h>

#include "ir/interp_fused.h"

namespace tgc {

namespace {
[[noreturn]] void notYet(const Node& n) {
  throw IRError(fmt::format("{}: the interpreter cannot run this fused op yet", describeNode(n)));
}
}  // namespace

void referenceSoftmaxCrossEntropy(const Node& n, const RefOperands&, std::vector<Tensor>&) { notYet(n); }
void referenceSoftmaxCrossEntropyGrad(const Node& n, const RefOperands&, std::vector<Tensor>&) { notYet(n); }
void referenceLayerNormGrad(const Node& n, const RefOperands&, std::vector<Tensor>&) { notYet(n); }

}  // namespace tgc
