// Random groups on random shapes: a chain of elementwise ops over operands that broadcast
// in random patterns (which decides which dims the lowering may merge), ending in an
// elementwise op, a reduction over random axes or a softmax over a random axis. Seeded, so
// a failure reproduces; the label names the shapes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ir/op_table.h"
#include "lower_test_util.h"

namespace tgc::lower_test {
namespace {

TEST(LowerRandom, BroadcastChainsWithElementwiseReduceAndSoftmaxAnchors) {
  std::mt19937_64 r(7);
  const int64_t sizes[] = {1, 3, 7, 9, 17, 33};
  const OpKind binops[] = {OpKind::Add, OpKind::Mul, OpKind::Sub, OpKind::Maximum};
  for (int trial = 0; trial < 24; ++trial) {
    const size_t rank = 1 + r() % 4;
    Shape full;
    for (size_t d = 0; d < rank; ++d) full.push_back(sizes[r() % std::size(sizes)]);
    if (numElements(full) > 20000) full[0] = 1;
    DType dt = r() % 3 == 0 ? DType::f64 : DType::f32;
    Case c;
    std::string shapes;
    // Operand shapes: a random suffix of the full shape with random dims set to 1.
    auto operandShape = [&] {
      size_t drop = r() % (rank + 1);
      Shape s(full.begin() + static_cast<std::ptrdiff_t>(drop == rank ? 0 : drop), full.end());
      for (auto& d : s)
        if (r() % 3 == 0) d = 1;
      return s;
    };
    Value* acc = c.in(TensorType{dt, full});
    shapes = TensorType{dt, full}.str();
    for (int k = 0, n = 1 + static_cast<int>(r() % 3); k < n; ++k) {
      Shape s = operandShape();
      shapes += " " + TensorType{dt, s}.str();
      Value* operand = c.in(TensorType{dt, s});
      acc = c.op(binops[r() % std::size(binops)], {acc, operand});
      if (r() % 2) acc = c.op(OpKind::Tanh, {acc});
    }
    std::string anchor = "elementwise";
    switch (r() % 3) {
      case 0: break;
      case 1: {
        std::vector<int64_t> axes;
        for (size_t d = 0; d < rank; ++d)
          if (r() % 2) axes.push_back(static_cast<int64_t>(d));
        bool keep = r() % 2;
        anchor = fmt::format("reduce_sum axes {} keepdims {}", shapeStr(axes), keep);
        c.op(OpKind::ReduceSum, {acc}, {{"axes", axes}, {"keepdims", keep}});
        break;
      }
      case 2: {
        auto axis = static_cast<int64_t>(r() % rank);
        anchor = fmt::format("softmax axis {}", axis);
        c.op(OpKind::Softmax, {acc}, {{"axis", axis}});
        break;
      }
    }
    c.label = fmt::format("trial {}: {} -> {}", trial, shapes, anchor);
    c.tol = dt == DType::f64 ? Tolerance{1e-12, 1e-12} : Tolerance{2e-5, 2e-5};
    SCOPED_TRACE(c.label);
    checkCase(c);
  }
}

}  // namespace
}  // namespace tgc::lower_test
