// The GEMM micro-kernel, generated as LLVM IR for the target's vector registers.
//
// The micro-kernel multiplies one packed sliver of A (kc x MR, stored k-major: MR values
// per k) by one packed sliver of B (kc x NR, NR values per k) into an MR x NR tile of C
// held in MR * NR / lanes vector accumulators, one FMA per accumulator per k:
//
//   for k < kc:  acc[i][j] = fma(splat(Ap[k*MR + i]), Bp[k*NR + j*lanes ...], acc[i][j])
//   C[i*ldc + j] = alpha * acc[i][j] + beta * C[i*ldc + j]    (C not read when beta == 0)
//
// Only the top-left mr x nr of the tile is written (masked stores on the right edge,
// rows >= mr skipped), so the packed buffers are zero-padded to whole slivers and edge
// tiles run the same inner loop as full ones.
//
// The generated function runs that tile code (inlined) over all the MR-row slivers of a
// block of m rows against one B sliver, so one call covers a column of tiles: the call
// overhead is paid once per B sliver, not once per tile. A last sliver of at most 2MR/3
// rows runs on a tile of MR/3 or 2MR/3 rows instead of a full one.
//
// A second form reads A unpacked from a row-major matrix (lda apart), for products whose
// A would be reused too little to repay packing it (few columns of B).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ir/dtype.h"

namespace llvm {
class Function;
class Module;
}  // namespace llvm

namespace tgc::codegen {

struct TargetSpec;

struct GemmKernelConfig {
  DType dtype = DType::f32;  // f32 or f64
  int lanes = 8;             // elements per vector register
  int mr = 6, nr = 16;       // register tile; nr is a multiple of lanes
  int kUnroll = 4;           // k steps per trip of the inner loop
  bool fma = true;           // llvm.fma (the target has FMA units) or llvm.fmuladd
  // Cache blocking: kc x nr slivers of B stay in L1, mc x kc blocks of A in L2, kc x nc
  // panels of B in L3. mc is a multiple of mr, nc of nr.
  int64_t kc = 256, mc = 144, nc = 4080;
  // Products with n <= directAMaxN and A not transposed read A unpacked (GemmAForm::direct):
  // each A sliver serves only n / nr tiles, too few to repay packing it.
  int64_t directAMaxN = 0;

  // The register tile and blocking for a target: 6x16 (f32) / 6x8 (f64) with 256-bit
  // vectors (AVX2), 12x32 / 12x16 with AVX-512, 6x8 / 6x4 with 128-bit vectors.
  static GemmKernelConfig forTarget(const TargetSpec& target, DType dtype);

  // Throws std::invalid_argument when the fields are inconsistent.
  void validate() const;
  // "f32_6x16_v8_u4": part of the generated function names.
  std::string name() const;
  int elementBytes() const { return dtype == DType::f64 ? 8 : 4; }
};

// Where the micro-kernel reads A from.
enum class GemmAForm {
  packed,  // packed slivers, kc * MR apart: A(i, k) = ap[(i / MR)*kc*MR + k*MR + i % MR]
  direct,  // A itself, row-major: A(i, k) = a[i*lda + k]; rows >= m are not read
};

// The C signatures of the generated kernels, for T = float or double: C (m x nr, m any
// size >= 0, nr <= NR) = alpha * A (m x kc) * Bp (one packed sliver) + beta * C.
template <class T>
using GemmMicroKernel = void(int64_t kc, const T* ap, const T* bp, T* c, int64_t ldc,
                             int64_t m, int64_t nr, T alpha, T beta);
template <class T>
using GemmMicroKernelDirectA = void(int64_t kc, const T* a, int64_t lda, const T* bp, T* c,
                                    int64_t ldc, int64_t m, int64_t nr, T alpha, T beta);

// Adds the micro-kernel to `module` as an external function named `name`.
llvm::Function* emitGemmMicroKernel(llvm::Module& module, const GemmKernelConfig& config,
                                    std::string_view name, GemmAForm form = GemmAForm::packed);

}  // namespace tgc::codegen
