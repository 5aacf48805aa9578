// Runs one node's library kernel (codegen/library.h) on host tensors, and the comparisons
// the kernel tests share.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "codegen/library.h"
#include "ir/graph.h"
#include "ir/tensor.h"
#include "support/thread_pool.h"

namespace tgc::library_test {

// The node's results, typed from the node. They start as NaN, not zeros: a kernel that adds
// into an output it should write, or skips part of one, fails the comparison instead of
// passing on a zero-filled tensor.
inline std::vector<Tensor> runLibraryKernel(const Node& n, const std::vector<const Tensor*>& operands,
                                            ThreadPool& pool) {
  codegen::LibraryKernel kernel = codegen::bindLibraryKernel(n);
  std::vector<const void*> in;
  for (const Tensor* t : operands) in.push_back(t->data());
  std::vector<Tensor> out;
  for (size_t r = 0; r < n.numResults(); ++r) {
    Tensor& t = out.emplace_back(n.result(r)->type());
    for (int64_t i = 0; i < t.numel(); ++i) t.setF(i, std::numeric_limits<double>::quiet_NaN());
  }
  std::vector<void*> outPtrs;
  for (Tensor& t : out) outPtrs.push_back(t.data());
  kernel(in.data(), outPtrs.data(), pool);
  return out;
}

// x [n0, n1, n2, n3] with dims 1 and 2 swapped: [B, T, H, D] <-> [B, H, T, D].
inline Tensor swapDims12(const Tensor& x) {
  const Shape& s = x.shape();
  const int64_t n0 = s[0], n1 = s[1], n2 = s[2], n3 = s[3];
  Tensor y(TensorType{x.dtype(), {n0, n2, n1, n3}});
  for (int64_t a = 0; a < n0; ++a)
    for (int64_t b = 0; b < n1; ++b)
      for (int64_t c = 0; c < n2; ++c)
        for (int64_t e = 0; e < n3; ++e)
          y.setF(((a * n2 + c) * n1 + b) * n3 + e, x.getF(((a * n1 + b) * n2 + c) * n3 + e));
  return y;
}

// |got - want| <= tol * max(1, largest finite |want|) element by element; infinities equal.
inline ::testing::AssertionResult nearScaled(const std::string& what, const Tensor& got,
                                             const Tensor& want, double tol) {
  if (got.shape() != want.shape()) return ::testing::AssertionFailure() << what << ": shapes differ";
  double scale = 1;
  for (int64_t i = 0; i < want.numel(); ++i)
    if (std::isfinite(want.getF(i))) scale = std::max(scale, std::fabs(want.getF(i)));
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.getF(i), w = want.getF(i);
    if (std::isinf(w) && g == w) continue;
    if (!(std::fabs(g - w) <= tol * scale))
      return ::testing::AssertionFailure() << what << " element " << i << ": " << g << " vs " << w;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tgc::library_test
