// Products with few rows, B read in place: no packing.
//
// A cached generation step multiplies one row per sample by every weight matrix. The
// general GEMM (codegen/gemm.h) packs B first, a read and a write of all of B that m rows
// share; at m = 1 that packing was half of the step's time (a 256 x 1024 B packed at about
// 7 GB/s, where reading it once streams at about 40 GB/s). Here B is streamed straight from
// where it is stored:
//   - B as stored (k x n): strips of 64 columns, k walking down them, the rows of A in
//     groups of up to 4 against each strip (16 accumulators);
//   - B transposed (n x k): dot products of A's rows with 4 rows of B at a time, k
//     contiguous in both.
// Each C element sums its k products in one chain (B as stored: in k order), so results
// differ from the packed kernel's only in rounding.
//
// AVX-512 hosts only (the kernels are compiled for it with target attributes, the build
// has no -march); elsewhere, and with TGC_NO_GEMM_SMALL_M=1 (for A/B runs), the general
// path runs.
#pragma once

#include <cstdint>

namespace tgc::codegen {

struct GemmDesc;

namespace small_m {

// The most rows these kernels take. At 16 rows the packed path is as fast (gemm_bench
// --shape 16x1024x256 and 16x256x1024), since packing is shared by more rows.
constexpr int64_t kMaxRows = 8;
// Threads split the columns in multiples of this.
constexpr int64_t kColumnBlock = 64;

// Whether d runs here: f32; m <= kMaxRows; no sumB or bF32; A as stored, or a
// transposed A with one row and lda 1 (the same memory); an AVX-512 host.
bool applies(const GemmDesc& d);

// C[:, j0:j1) = alpha * op(A) op(B)[:, j0:j1) + beta * C[:, j0:j1) (C not read when beta
// is 0), for a d that applies().
void product(const GemmDesc& d, const float* a, const float* b, float* c, int64_t j0, int64_t j1);

}  // namespace small_m
}  // namespace tgc::codegen
