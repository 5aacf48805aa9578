#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace tgc::runtime {

// The batched GEMM that computes a matmul node, shared by the CPU executable
// (codegen::GemmDesc) and the CUDA one (cuda::CudaGemmDesc), whose descriptors have these
// fields. Row-major operands as stored; batch dims outermost first.
struct MatmulGemm {
  DType dtype = DType::f32;
  int64_t m = 0, n = 0, k = 0;        // op(A) is m x k, op(B) k x n, C m x n
  bool transA = false, transB = false;
  int64_t lda = 0, ldb = 0, ldc = 0;  // row strides, in elements
  std::vector<int64_t> batch, strideA, strideB, strideC;
};

// Batch dims broadcast like numpy's (a missing or size-1 dim of one operand gets stride 0),
// dims of size 1 are dropped and contiguous dims merged; a batch of A's stored back to back
// times one B (activations times a weight) becomes one product with the batch in A's rows.
// Checks neither the dtype nor the backend's limits: each executable does.
MatmulGemm matmulGemm(const Node& matmul);

// The same as a backend's descriptor (Desc::contiguous, then the strides and batch).
template <class Desc>
Desc matmulGemmDesc(const Node& matmul) {
  const MatmulGemm g = matmulGemm(matmul);
  Desc d = Desc::contiguous(g.dtype, g.m, g.n, g.k, g.transA, g.transB);
  d.lda = g.lda;
  d.ldb = g.ldb;
  d.ldc = g.ldc;
  d.batch = g.batch;
  d.strideA = g.strideA;
  d.strideB = g.strideB;
  d.strideC = g.strideC;
  return d;
}

}  // namespace tgc::runtime
