// Reference kernels of fused_attention and its gradient (ir/fused_ops.h).
// Placeholder until the attention work lands: refuses to run.
#include <fmt/format.h>

#include "ir/interp_fused.h"

namespace tgc {

void referenceFusedAttention(const Node& n, const RefOperands&, std::vector<Tensor>&) {
  throw IRError(fmt::format("{}: the interpreter cannot run fused_attention yet", describeNode(n)));
}
void referenceFusedAttentionGrad(const Node& n, const RefOperands&, std::vector<Tensor>&) {
  throw IRError(fmt::format("{}: the interpreter cannot run fused_attention_grad yet", describeNode(n)));
}

}  // namespace tgc
