// bf16 GEMM: the entry point, and the path for a CPU without bf16 arithmetic (no
// AVX512-BF16, e.g. AMD Zen 3); CPUs with it take the native kernel (end of this comment).
//
// Without AVX512-BF16, bf16 is a storage format: the operands are widened to f32 (exact: a bf16 is the top
// half of an f32) in blocks, the f32 GEMM engine (codegen/gemm.h) multiplies the blocks with
// f32 accumulation, and C is rounded to bf16 (nearest even) once, after the whole sum over K.
// So the result is the exact product of the bf16 operands summed in f32 and rounded once:
// what a tensor core's bf16 mma with f32 accumulation computes, and within one bf16 rounding
// of the interpreter (which sums in double).
//
// Blocking keeps the f32 copies bounded instead of widening whole tensors: C in tiles of at
// most kBf16TileRows x kBf16TileCols, K in blocks of kBf16TileK (C's f32 tile accumulates
// across them with beta = 1); a block already widened (A when C has one column tile and K
// one block) is reused. The tiles are large (56 MiB of scratch at most) because each f32
// GEMM call repacks its A: with 1024-column tiles the vocabulary projection's weight
// gradient (512 x 37000 x 1024) took 1.5x the f32 time, with 4096 about the same.
// A batch of small products (attention's per-head matmuls) is widened whole and run as one
// batched f32 GEMM, so the engine hands out the items to threads as it does for f32.
// The f32 copies live in a per-thread scratch buffer that grows to the largest call and is
// reused (outside the executable's arena).
//
// No epilogue stages (runtime/gemm_epilogue folds those for f32/f64 only); alpha and beta
// work as in GemmDesc, and GemmDesc::sumB writes the column sums of B in f32 (a bias
// gradient next to its weight gradient), each column summed over k in order: while B is
// packed on the native path, in a loop of its own otherwise.
//
// On a CPU with AVX512-BF16 (Zen 4, Sapphire Rapids) none of the above runs: the operands
// are packed as bf16 pairs and multiplied by VDPBF16PS with f32 accumulation
// (codegen/gemm_bf16_native.h), C rounded once as here. TGC_GEMM_BF16_WIDEN=1 keeps the
// widening path there (A/B runs).
#pragma once

#include <cstdint>

#include "codegen/gemm.h"

namespace tgc::codegen {

inline constexpr int64_t kBf16TileRows = 1024, kBf16TileCols = 4096, kBf16TileK = 2048;

// Checks `desc` as GemmDesc::validate does, with dtype bf16 and no epilogue; throws
// std::invalid_argument naming the first bad field.
void validateGemmBf16(const GemmDesc& desc);

// Which kernel gemmBf16 runs: Native where cpuHasAvx512Bf16() (unless TGC_GEMM_BF16_WIDEN=1),
// Widen elsewhere. Tests switch between them; setting Native on a CPU without the
// instructions throws std::runtime_error. Not thread-safe: set it between calls only.
enum class Bf16GemmPath { Native, Widen };
Bf16GemmPath bf16GemmPath();
void setBf16GemmPath(Bf16GemmPath path);
bool bf16GemmHasNative();

// C = alpha * op(A) @ op(B) + beta * C for bf16 A, B, C (uint16_t storage) as described above;
// with desc.bF32, B is f32 and each element is rounded to bf16 (nearest even, as a cast)
// where it is widened or packed, so the result is that of the rounded B. With desc.sumB,
// sumB receives the n column sums of op(B) in f32. `pool` defaults to ThreadPool::global().
void gemmBf16(const GemmDesc& desc, const void* a, const void* b, void* c,
              ThreadPool* pool = nullptr, float* sumB = nullptr);

}  // namespace tgc::codegen
