// Reverse-mode automatic differentiation as an IR-to-IR transformation.
//
// The backward graph is ordinary Graph IR built with the same Builder as the forward, so it
// is optimized and compiled like any other graph. Each op's gradient rule is a case in
// autodiff.cpp's switch over OpKind (no default: a new op without a rule does not compile).
#pragma once

#include <vector>

#include "ir/graph.h"

namespace tgc {

// Appends to `g` the gradient of the scalar float value `loss` with respect to each value in
// `wrt` and returns them in order (same types as `wrt`; zeros where `loss` does not depend on
// a value). Gradients flowing into several uses are summed; broadcasts are reduced back to
// operand shapes; integer and bool values are not differentiated. Gradient values are named
// "grad.<name>". Throws IRError naming the op and value when an op has no gradient rule for a
// float operand the loss depends on.
std::vector<Value*> appendGradients(Graph& g, Value* loss, const std::vector<Value*>& wrt);

// The autodiff pass (passes/passes.h, runAutodiff) appends the gradients of outputs[0] with
// respect to trainableParameters(g) as outputs, after the others and in the same order.

// The values `wrt` defaults to: inputs with role "param", in graph order.
std::vector<Value*> trainableParameters(const Graph& g);

}  // namespace tgc
