// bf16 GEMM on the AVX512-BF16 instructions (VDPBF16PS), for codegen/gemm_bf16.cpp.
//
// The operands stay bf16: A and B are packed into pairs of consecutive k (two bf16 in 32
// bits, the instruction's operand), and a 12 x 32 register tile accumulates in f32 over the
// whole of K; C is rounded to bf16 once, as the widening path does. Twice the
// multiply-adds per instruction of an f32 FMA, and half the bytes to pack and stream.
//
// Rounding: each product of two bf16 is exact in f32; the instruction adds the pair's two
// products to the accumulator in f32 (round to nearest even), so for normal numbers the
// result differs from the widening path's f32 FMAs in the order of the f32 additions. It
// also treats denormal inputs and results as zero, which the widening path does not
// (|x| < 1.2e-38; the tests' operands never produce one).
//
// This is one product; gemm_bf16.cpp hands out a batch's items: small ones (under 16
// MFLOP) whole to the threads, larger ones one after another, each over all threads.
// 128 x (64x64x64), attention's per-head shape: 35 GFLOP/s item by item over 2 threads,
// 238-244 handed out whole (the widening path: 42-44).
#pragma once

#include <cstdint>

namespace tgc {
class ThreadPool;
}

namespace tgc::codegen {

struct GemmDesc;

// Whether this CPU has AVX512-BF16 (with AVX512 F/BW/VL).
bool cpuHasAvx512Bf16();

// One product of `d` (batch items are the caller's: a, b, c point at the item), with
// d.k > 0 and m, n > 0: C = alpha * op(A) op(B) + beta * C, C rounded to bf16 once. B is
// bf16, or f32 rounded to bf16 as it is packed when d.bF32. Only on a CPU where
// cpuHasAvx512Bf16(). With sumB (B not transposed, bf16), also the column sums of B in f32,
// each over k in order, added up as B is packed.
void gemmBf16NativeItem(const GemmDesc& d, const uint16_t* a, const void* b, uint16_t* c,
                        float* sumB, ThreadPool& pool);

}  // namespace tgc::codegen
