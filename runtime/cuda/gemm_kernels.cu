// tgc's GEMM kernels for NVIDIA GPUs, compiled at run time by NVRTC (the build embeds this
// file as a string: runtime/cuda/cuda_gemm.cpp). No headers: NVRTC needs no include path.
//
//   C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b]      (C is not read when beta == 0)
//
// row-major operands with leading dimensions, op = identity or transpose, up to four batch
// dimensions with per-operand strides (0 broadcasts), every size (edge tiles are masked).
//   tgc_gemm_simt_{f32,f64}_{nn,nt,tn,tt}  CUDA cores: f32 128x128x8 tiles, 8x8 per thread;
//                                          f64 64x64x16 tiles, 4x4 per thread
//   tgc_gemm_mma_{bf16,f16}_{nn,nt,tn,tt}  tensor cores: mma.sync m16n8k16, fp32 accumulation,
//                                          128x128x32 tiles, 8 warps of 64x32
// Launch: block (256), grid (ceil(n / BN), ceil(m / BM), min(batch, 65535)) with BM = BN =
// 128 except f64's 64; the kernels loop over the remaining batch items.

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

struct GemmParams {  // host mirror: runtime/cuda/cuda_gemm.cpp (all 8-byte fields)
  long long m, n, k, lda, ldb, ldc;
  long long batchDims, batchCount;
  long long batch[4], strideA[4], strideB[4], strideC[4];
  double alpha, beta;
};
static_assert(sizeof(GemmParams) == 8 * 26, "the host's GemmParams has this size");

// Element offsets of batch item z in A, B and C (outermost batch dim first).
__device__ __forceinline__ void batchOffsets(const GemmParams& p, long long z, long long& oa,
                                             long long& ob, long long& oc) {
  oa = ob = oc = 0;
  for (int d = (int)p.batchDims - 1; d >= 0; --d) {
    const long long i = z % p.batch[d];
    z /= p.batch[d];
    oa += i * p.strideA[d];
    ob += i * p.strideB[d];
    oc += i * p.strideC[d];
  }
}

// ---- CUDA cores (f32, f64) -------------------------------------------------------------------

namespace simt {
constexpr int THREADS = 256;  // 16 x 16 threads, each TM x TM outputs strided by 16

// Tiles per element type: f32 128 x 128 x 8 (8 x 8 per thread), f64 64 x 64 x 16 (4 x 4,
// so the accumulators stay in registers).
template <typename T>
struct Tile {
  static constexpr int TM = sizeof(T) == 4 ? 8 : 4;
  static constexpr int BM = 16 * TM, BN = 16 * TM;
  static constexpr int BK = sizeof(T) == 4 ? 8 : 16;
};

// Loads a ROWS x BK tile (rows of op(X), k along the other side) into s[BK][ROWS + 1].
// K_CONTIG: element (r, kk) at x[r * ld + kk] (A as stored, B transposed); else at
// x[kk * ld + r]. Consecutive threads read consecutive addresses either way.
template <typename T, bool K_CONTIG, int ROWS, int BK>
__device__ __forceinline__ void loadTile(T (*s)[ROWS + 1], const T* __restrict__ x, long long ld,
                                         long long rowsTotal, long long kTotal, long long r0,
                                         long long k0) {
  for (int e = threadIdx.x; e < ROWS * BK; e += THREADS) {
    const int r = K_CONTIG ? e / BK : e % ROWS;
    const int kk = K_CONTIG ? e % BK : e / ROWS;
    const long long gr = r0 + r, gk = k0 + kk;
    T v = T(0);
    if (gr < rowsTotal && gk < kTotal) v = K_CONTIG ? x[gr * ld + gk] : x[gk * ld + gr];
    s[kk][r] = v;
  }
}

template <typename T, bool TA, bool TB>
__device__ void gemm(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c,
                     const GemmParams& p) {
  constexpr int TM = Tile<T>::TM, BM = Tile<T>::BM, BN = Tile<T>::BN, BK = Tile<T>::BK;
  __shared__ T as[BK][BM + 1];
  __shared__ T bs[BK][BN + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const long long row0 = (long long)blockIdx.y * BM, col0 = (long long)blockIdx.x * BN;
  for (long long z = blockIdx.z; z < p.batchCount; z += gridDim.z) {
    long long oa, ob, oc;
    batchOffsets(p, z, oa, ob, oc);
    T acc[TM][TM];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TM; ++j) acc[i][j] = T(0);
    for (long long k0 = 0; k0 < p.k; k0 += BK) {
      // op(A) row r, k kk: A[r][kk] (!TA) or A[kk][r] (TA); op(B) col n, k kk: B[kk][n]
      // (!TB) or B[n][kk] (TB).
      loadTile<T, !TA, BM, BK>(as, a + oa, p.lda, p.m, p.k, row0, k0);
      loadTile<T, TB, BN, BK>(bs, b + ob, p.ldb, p.n, p.k, col0, k0);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        T av[TM], bv[TM];
#pragma unroll
        for (int i = 0; i < TM; ++i) av[i] = as[kk][ty + 16 * i];
#pragma unroll
        for (int j = 0; j < TM; ++j) bv[j] = bs[kk][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TM; ++j) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const long long r = row0 + ty + 16 * i;
      if (r >= p.m) continue;
#pragma unroll
      for (int j = 0; j < TM; ++j) {
        const long long n = col0 + tx + 16 * j;
        if (n >= p.n) continue;
        T* out = c + oc + r * p.ldc + n;
        T v = T(p.alpha) * acc[i][j];
        if (p.beta != 0) v += T(p.beta) * *out;
        *out = v;
      }
    }
  }
}
}  // namespace simt

// ---- tensor cores (bf16, f16 with fp32 accumulation) -----------------------------------------

namespace mma {
constexpr int BM = 128, BN = 128, BK = 32, THREADS = 256;
constexpr int PAD = 8;  // halves per smem row beyond BK: 80-byte rows, conflict-free fragments
constexpr int CHUNKS = BM * BK / 8 / THREADS;  // 8-element chunks each thread loads per tile

struct Bf16 {
  static __device__ __forceinline__ float toFloat(u16 h) { return __uint_as_float((u32)h << 16); }
  static __device__ __forceinline__ u16 fromFloat(float f) {
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

struct F16 {
  static __device__ __forceinline__ float toFloat(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
  }
  static __device__ __forceinline__ u16 fromFloat(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

// One operand's tile, ROWS (128) rows of op(X) by BK of k, in smem as s[row][k] (k
// contiguous, as mma's row-major A and column-major B fragments want). A thread moves
// CHUNKS runs of 8 elements that are contiguous in global memory: along k when K_CONTIG
// (element (r, kk) at x[r * ld + kk]), else along rows (at x[kk * ld + r]). A run that is
// whole, in range and 16-byte aligned is one vector load; others go element by element
// with zeros outside the matrix.
template <bool K_CONTIG>
struct TileLoader {
  uint4 run[CHUNKS];

  __device__ __forceinline__ void load(const u16* __restrict__ x, long long ld, long long rowsTotal,
                                       long long kTotal, long long r0, long long k0) {
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {
      const int c = threadIdx.x + i * THREADS;
      const int r = K_CONTIG ? c / (BK / 8) : (c % (BM / 8)) * 8;
      const int kk = K_CONTIG ? (c % (BK / 8)) * 8 : c / (BM / 8);
      const long long gr = r0 + r, gk = k0 + kk;
      const long long limit = K_CONTIG ? kTotal - gk : rowsTotal - gr;  // run elements in range
      const bool inside = K_CONTIG ? gr < rowsTotal : gk < kTotal;
      const u16* src = x + (K_CONTIG ? gr * ld + gk : gk * ld + gr);
      if (inside && limit >= 8 && ((u64)src & 15) == 0) {
        run[i] = *(const uint4*)src;
        continue;
      }
      u16 h[8];
      for (int j = 0; j < 8; ++j) h[j] = inside && j < limit ? src[j] : (u16)0;
      run[i] = make_uint4(h[0] | (u32)h[1] << 16, h[2] | (u32)h[3] << 16, h[4] | (u32)h[5] << 16,
                          h[6] | (u32)h[7] << 16);
    }
  }

  __device__ __forceinline__ void store(u16 (*s)[BK + PAD]) const {
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {
      const int c = threadIdx.x + i * THREADS;
      const int r = K_CONTIG ? c / (BK / 8) : (c % (BM / 8)) * 8;
      const int kk = K_CONTIG ? (c % (BK / 8)) * 8 : c / (BM / 8);
      if (K_CONTIG) {
        *(uint4*)&s[r][kk] = run[i];
      } else {
        const u32 w[4] = {run[i].x, run[i].y, run[i].z, run[i].w};
        for (int j = 0; j < 8; ++j) s[r + j][kk] = (u16)(w[j / 2] >> (16 * (j % 2)));
      }
    }
  }
};

__device__ __forceinline__ u32 pairAt(const u16 (*s)[BK + PAD], int row, int k) {
  return *(const u32*)&s[row][k];
}

template <typename F, bool TA, bool TB>
__device__ void gemm(const u16* __restrict__ a, const u16* __restrict__ b, u16* __restrict__ c,
                     const GemmParams& p) {
  __shared__ __align__(16) u16 as[BM][BK + PAD];
  __shared__ __align__(16) u16 bs[BN][BK + PAD];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;            // mma fragment coordinates
  const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;  // the warp's 64x32 of the tile
  const long long row0 = (long long)blockIdx.y * BM, col0 = (long long)blockIdx.x * BN;
  TileLoader<!TA> la;  // op(A) rows are m: A[r][k] unless transposed
  TileLoader<TB> lb;   // op(B) "rows" are n: B[k][n] unless transposed (B^T[n][k])
  for (long long z = blockIdx.z; z < p.batchCount; z += gridDim.z) {
    long long oa, ob, oc;
    batchOffsets(p, z, oa, ob, oc);
    float acc[4][4][4];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j)
        for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;
    la.load(a + oa, p.lda, p.m, p.k, row0, 0);
    lb.load(b + ob, p.ldb, p.n, p.k, col0, 0);
    la.store(as);
    lb.store(bs);
    __syncthreads();
    for (long long k0 = 0; k0 < p.k; k0 += BK) {
      const bool more = k0 + BK < p.k;
      if (more) {  // the next tile's global loads overlap this tile's math
        la.load(a + oa, p.lda, p.m, p.k, row0, k0 + BK);
        lb.load(b + ob, p.ldb, p.n, p.k, col0, k0 + BK);
      }
#pragma unroll
      for (int ks = 0; ks < BK; ks += 16) {
        u32 af[4][4], bf[4][2];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = wm + i * 16 + g;
          af[i][0] = pairAt(as, r, ks + 2 * t);
          af[i][1] = pairAt(as, r + 8, ks + 2 * t);
          af[i][2] = pairAt(as, r, ks + 2 * t + 8);
          af[i][3] = pairAt(as, r + 8, ks + 2 * t + 8);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int n = wn + j * 8 + g;
          bf[j][0] = pairAt(bs, n, ks + 2 * t);
          bf[j][1] = pairAt(bs, n, ks + 2 * t + 8);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) F::mma(acc[i][j], af[i], bf[j]);
      }
      __syncthreads();
      if (more) {
        la.store(as);
        lb.store(bs);
      }
      __syncthreads();
    }
    // acc[i][j]: rows wm + 16i + g (+8 for q >= 2), columns wn + 8j + 2t (+1 for odd q).
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j)
        for (int q = 0; q < 4; ++q) {
          const long long r = row0 + wm + i * 16 + g + (q >= 2 ? 8 : 0);
          const long long n = col0 + wn + j * 8 + 2 * t + (q % 2);
          if (r >= p.m || n >= p.n) continue;
          u16* out = c + oc + r * p.ldc + n;
          float v = (float)p.alpha * acc[i][j][q];
          if (p.beta != 0) v += (float)p.beta * F::toFloat(*out);
          *out = F::fromFloat(v);
        }
  }
}
}  // namespace mma

#define TGC_SIMT(T, NAME, TA, TB)                                                          \
  extern "C" __global__ void __launch_bounds__(simt::THREADS)                                \
      tgc_gemm_simt_##NAME(const T* __restrict__ a, const T* __restrict__ b,                 \
                           T* __restrict__ c, GemmParams p) {                                \
    simt::gemm<T, TA, TB>(a, b, c, p);                                                       \
  }
#define TGC_MMA(F, NAME, TA, TB)                                                           \
  extern "C" __global__ void __launch_bounds__(mma::THREADS)                                 \
      tgc_gemm_mma_##NAME(const u16* __restrict__ a, const u16* __restrict__ b,              \
                          u16* __restrict__ c, GemmParams p) {                               \
    mma::gemm<mma::F, TA, TB>(a, b, c, p);                                                   \
  }

// TGC_GEMM_FAMILY (compile tests only, to split the work): 1 compiles the CUDA-core
// kernels alone, 2 the tensor-core ones; undefined compiles both.
#if !defined(TGC_GEMM_FAMILY) || TGC_GEMM_FAMILY == 1
TGC_SIMT(float, f32_nn, false, false)
TGC_SIMT(float, f32_nt, false, true)
TGC_SIMT(float, f32_tn, true, false)
TGC_SIMT(float, f32_tt, true, true)
TGC_SIMT(double, f64_nn, false, false)
TGC_SIMT(double, f64_nt, false, true)
TGC_SIMT(double, f64_tn, true, false)
TGC_SIMT(double, f64_tt, true, true)
#endif
#if !defined(TGC_GEMM_FAMILY) || TGC_GEMM_FAMILY == 2
TGC_MMA(Bf16, bf16_nn, false, false)
TGC_MMA(Bf16, bf16_nt, false, true)
TGC_MMA(Bf16, bf16_tn, true, false)
TGC_MMA(Bf16, bf16_tt, true, true)
TGC_MMA(F16, f16_nn, false, false)
TGC_MMA(F16, f16_nt, false, true)
TGC_MMA(F16, f16_tn, true, false)
TGC_MMA(F16, f16_tt, true, true)
#endif
