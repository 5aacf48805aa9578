// Reference kernels of the fused ops (semantics: ir/fused_ops.h), for the interpreter.
// Like every interpreter kernel they compute in double and round to the result dtype;
// `outs` arrive typed and zeroed, one per result. Bad input throws IRError naming the node.
#pragma once

#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace tgc {

using RefOperands = std::vector<const Tensor*>;

// ir/interp_attention.cpp
void referenceFusedAttention(const Node& n, const RefOperands& in, std::vector<Tensor>& outs);
void referenceFusedAttentionGrad(const Node& n, const RefOperands& in, std::vector<Tensor>& outs);

// ir/interp_losses.cpp
void referenceSoftmaxCrossEntropy(const Node& n, const RefOperands& in, std::vector<Tensor>& outs);
void referenceSoftmaxCrossEntropyGrad(const Node& n, const RefOperands& in,
                                      std::vector<Tensor>& outs);
void referenceLayerNormGrad(const Node& n, const RefOperands& in, std::vector<Tensor>& outs);
void referenceQuantizedMatmul(const Node& n, const RefOperands& in, std::vector<Tensor>& outs);

}  // namespace tgc
