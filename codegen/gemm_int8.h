// int8 GEMM for quantized inference: C = dequant(quant(A) x W_q) (+ bias), with
//
//   W_q   int8 weights, symmetric per output channel (column n of a [K, N] weight):
//         scale_n = max_k |w[k, n]| / 127, q = round(w / scale_n) in [-127, 127];
//   A     f32 activations quantized dynamically per row the same way (scale_m from the row);
//   C     f32: c[m, n] = scale_m * scale_n * sum_k a_q[m, k] * w_q[k, n] (+ bias[n]).
//
// The products run on AVX512-VNNI's VPDPBUSD (u8 x s8, four products summed into each
// 32-bit lane) where the host has it (AVX2 hosts without VNNI: VPMADDWD on s16 x s16): A is offset to unsigned (a_q + 128) and the offset is
// taken back with the weights' column sums, so the 32-bit sums are exact and equal, bit for
// bit, to the portable path's plain integer loops used elsewhere. Sums cannot overflow for
// K < 2^16 (each product is at most 127 * 127 after the offset is removed; the unsigned
// partial sums at most 255 * 128 per product).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tgc {
class ThreadPool;
}

namespace tgc::codegen {

// Weights [K, N] quantized per column and packed for the kernels: blocks of 32 columns, each
// [ceil(K / 4)][32][4] bytes (the VNNI layout: four consecutive k of a column in one lane).
struct Int8Weights {
  int64_t k = 0, n = 0;
  std::vector<int8_t> packed;  // padded: K to a multiple of 4, N to a multiple of 32, zeros
  std::vector<float> scale;    // [N]
  std::vector<int32_t> colSum; // [N]: sum over k of w_q[k, n] (for the unsigned offset)

  int64_t kQuads() const { return (k + 3) / 4; }
  int64_t blocks() const { return (n + 31) / 32; }
  // w_q[k, n] from the packed layout (tests, and the portable kernel's reference).
  int8_t at(int64_t kk, int64_t nn) const {
    return packed[static_cast<std::size_t>(((nn / 32) * kQuads() + kk / 4) * 128 + (nn % 32) * 4 + kk % 4)];
  }
};

// Quantizes and packs w [K, N] (row stride ldw).
Int8Weights quantizeWeights(const float* w, int64_t k, int64_t n, int64_t ldw);
// Packs weights already quantized (w_q [K, N], row stride ldw) with their column scales.
Int8Weights packWeights(const int8_t* wq, int64_t k, int64_t n, int64_t ldw, std::vector<float> scale);

// Row-wise dynamic quantization of a [M, K] (row stride lda): q [M, K] and scale [M].
void quantizeRows(const float* a, int64_t m, int64_t k, int64_t lda, int8_t* q, float* scale);

// Which kernels run the products: `best` picks the host's widest (AVX512-VNNI, else the
// 256-bit AVX-VNNI, else AVX2's VPMADDWD on 16-bit operands, else the portable loops); the
// others force one, for tests and benches (a kernel the host lacks falls back to
// portable). All give the same bits.
enum class Int8Kernel { best, avx512vnni, avxvnni, avx2, portable };

// The exact integer product: c[m, n] = sum_k aq[m, k] * w_q[k, n], aq [M, K] row stride lda.
void int8GemmS32(const int8_t* aq, int64_t m, int64_t lda, const Int8Weights& w, int32_t* c,
                 int64_t ldc, ThreadPool* pool = nullptr, Int8Kernel kernel = Int8Kernel::best);

// The f32 GEMM above: quantizes a's rows, multiplies, dequantizes, adds bias (may be null).
void int8Gemm(const float* a, int64_t m, int64_t lda, const Int8Weights& w, const float* bias,
              float* c, int64_t ldc, ThreadPool* pool = nullptr, Int8Kernel kernel = Int8Kernel::best);

// Whether this host runs the 512-bit VPDPBUSD kernels (AVX512-VNNI with AVX512BW), and the
// 256-bit ones (AVX-VNNI).
bool hostHasVnni();
bool hostHasAvxVnni();
bool hostHasAvx2();
// The kernel `best` resolves to on this host.
Int8Kernel hostInt8Kernel();

}  // namespace tgc::codegen
