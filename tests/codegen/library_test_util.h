// Runs one node's library kernel (codegen/library.h) on host tensors, for the kernel tests.
#pragma once

#include <limits>
#include <vector>

#include "codegen/library.h"
#include "ir/graph.h"
#include "ir/tensor.h"
#include "runtime/thread_pool.h"

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

}  // namespace tgc::library_test
