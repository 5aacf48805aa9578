// FlashAttention-2 on the GPU: the library kernels of fused_attention and
// fused_attention_grad (ir/fused_ops.h gives the exact semantics), compiled at run time by
// NVRTC (embedded by runtime/cuda/cuda_attention.cpp). No headers. T is float or double;
// head dims d, dv up to DMAX = 128, any lengths (tile remainders are masked).
//
//   tgc_attn_fwd_<t>  one block per (batch item, tile of BQ queries); 8 warps own 4 query
//                     rows each. Key/value tiles of BK = 32 go through shared memory; lane c
//                     scores key c, the row's running max and sum (online softmax) come from
//                     warp shuffles, and lane l accumulates output dims l, l+32, l+64, l+96.
//                     out and lse are written; no [Tq, Tk] matrix ever exists.
//   tgc_attn_bwd_<t>  one block per (batch item, tile of BK keys): recomputes p from the
//                     saved lse tile by tile over the queries (from the diagonal on when
//                     causal); dk and dv of the block's keys accumulate in registers (thread
//                     owns key tid/8, dims tid%8 + 8t), so no two blocks write them; dq is
//                     summed per query tile in the block and added to global memory with
//                     atomicAdd (dq must be zeroed first; the sum's order varies by run),
//                     and so is dbias, element by element, with bias_grad.
//
// Dropout draws Philox4x32-10 over the [..., Tq, Tk] index space, bit for bit the
// CPU's philoxUniformAt (ir/philox.cpp), so the same elements are dropped everywhere.

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int BQ = 32;            // queries per tile
constexpr int BK = 32;            // keys per tile (one per lane)
constexpr int ROWS = BQ / WARPS;  // query rows per warp
constexpr int DMAX = 128;         // the largest head dim
constexpr int KLD = BK + 1;       // shared row stride of transposed tiles (no bank conflicts)

// The launch parameters; the host's copy (runtime/cuda/cuda_attention.cpp) has this layout.
struct AttnParams {
  unsigned long long q, k, v, out, lse, dout, dq, dk, dv, mask, maskBase, seed, offset;
  long long batch, tq, tk, d, dvDim, maskStrideI, maskStrideJ;
  double scale, pDrop, keepScale;
  long long causal, hasMask, dropout;
  long long heads;  // 1, or layout bthd's H: q, k, v, out, dout, dq, dk, dv [B, T, H, D]
  // The additive bias (T, element (b, i, j) at biasBase[b] + i * biasStrideI + j *
  // biasStrideJ) and, with biasGrad, dbias of its shape (zeroed first: the kernel adds).
  unsigned long long bias, biasBase, dbias;
  long long biasStrideI, biasStrideJ, hasBias, biasGrad;
};
static_assert(sizeof(AttnParams) == 34 * 8, "AttnParams must match the host's");

// The dynamic shared memory (a host emulation of these kernels defines its own).
#ifndef TGC_ATTN_SHARED
#define TGC_ATTN_SHARED extern __shared__ __align__(16) unsigned char smem[]
#endif

template <typename T>
__device__ __forceinline__ T negInf() {
  return (T)__longlong_as_double(0xfff0000000000000ULL);
}
__device__ __forceinline__ float expT(float x) { return expf(x); }
__device__ __forceinline__ double expT(double x) { return exp(x); }
__device__ __forceinline__ float logT(float x) { return logf(x); }
__device__ __forceinline__ double logT(double x) { return log(x); }

// max that keeps NaN, like the interpreter's.
template <typename T>
__device__ __forceinline__ T nanMax(T a, T b) {
  return (b != b || b > a) ? b : a;
}

template <typename T>
__device__ __forceinline__ T warpMax(T v) {
  for (int o = 16; o > 0; o /= 2) v = nanMax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <typename T>
__device__ __forceinline__ T warpSum(T v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// philoxUniformAt(seed, offset, e): counter offset + (e >> 2) (64 bits in words 0-1), key the
// seed's halves, ten rounds, the top 24 bits of word (e & 3) scaled to [0, 1).
__device__ float philoxUniformAt(unsigned long long seed, unsigned long long offset,
                                 unsigned long long e) {
  const unsigned long long ctr = offset + (e >> 2);
  unsigned c0 = (unsigned)ctr, c1 = (unsigned)(ctr >> 32), c2 = 0u, c3 = 0u;
  unsigned k0 = (unsigned)seed, k1 = (unsigned)(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const unsigned hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const unsigned hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  const unsigned w = (e & 3) == 0 ? c0 : (e & 3) == 1 ? c1 : (e & 3) == 2 ? c2 : c3;
  return (float)(w >> 8) * (1.0f / 16777216.0f);
}

// Whether query i may attend key j of batch item b (causal, the broadcast mask, bounds).
__device__ __forceinline__ bool allowed(const AttnParams& p, const unsigned char* mask,
                                        long long i, long long j) {
  if (i >= p.tq || j >= p.tk) return false;
  if (p.causal && j > i) return false;
  return !mask || mask[i * p.maskStrideI + j * p.maskStrideJ] != 0;
}

// Batch item b's part of the bias (or of dbias): null without one.
template <typename T>
__device__ __forceinline__ T* biasOf(const AttnParams& p, unsigned long long base, long long b) {
  return p.hasBias ? (T*)base + ((const long long*)p.biasBase)[b] : nullptr;
}

// Dropout's factor for element (b, i, j): 0 or 1 / (1 - p_drop), compared in T.
template <typename T>
__device__ __forceinline__ T keepFactor(const AttnParams& p, unsigned long long seed,
                                        unsigned long long offset, long long b, long long i,
                                        long long j) {
  const float u = philoxUniformAt(seed, offset, (unsigned long long)((b * p.tq + i) * p.tk + j));
  return (T)u >= (T)p.pDrop ? (T)p.keepScale : (T)0;
}

// Where batch item b's rows (T of them, `width` wide) start: [batch, T, width] when heads
// is 1, else [batch / heads, T, heads, width] with item b the head b % heads. Their row
// stride is heads * width.
__device__ __forceinline__ long long itemBase(const AttnParams& p, long long b, long long t,
                                              long long width) {
  return ((b / p.heads) * t * p.heads + b % p.heads) * width;
}

// Copies rows [r0, r0 + BQ or BK) of src [rows, cols] (row stride ld) to dst [*, cols], zeros
// past `rows`.
template <typename T>
__device__ void loadTile(const T* src, long long ld, long long r0, long long rows,
                         long long cols, int tile, T* dst) {
  for (long long x = threadIdx.x; x < tile * cols; x += THREADS) {
    const long long r = x / cols;
    dst[x] = r0 + r < rows ? src[(r0 + r) * ld + x % cols] : (T)0;
  }
}

// The same, transposed into dst [cols][KLD].
template <typename T>
__device__ void loadTileT(const T* src, long long ld, long long r0, long long rows,
                          long long cols, T* dst) {
  for (long long x = threadIdx.x; x < BK * cols; x += THREADS) {
    const long long r = x / cols, c = x % cols;
    dst[c * KLD + r] = r0 + r < rows ? src[(r0 + r) * ld + c] : (T)0;
  }
}

template <typename T>
__device__ void attnForward(const AttnParams& p) {
  TGC_ATTN_SHARED;
  const long long d = p.d, dv = p.dvDim;
  T* qs = (T*)smem;       // [BQ][d]
  T* kt = qs + BQ * d;    // [d][KLD]
  T* vs = kt + d * KLD;   // [BK][dv]
  const long long qTiles = (p.tq + BQ - 1) / BQ;
  const long long b = blockIdx.x / qTiles, i0 = blockIdx.x % qTiles * BQ;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long ldq = p.heads * d, ldv = p.heads * dv;  // k as q, out as v
  const T* q = (const T*)p.q + itemBase(p, b, p.tq, d);
  const T* k = (const T*)p.k + itemBase(p, b, p.tk, d);
  const T* v = (const T*)p.v + itemBase(p, b, p.tk, dv);
  const unsigned char* mask =
      p.hasMask ? (const unsigned char*)p.mask + ((const long long*)p.maskBase)[b] : nullptr;
  const T* bias = biasOf<T>(p, p.bias, b);
  const unsigned long long seed = p.dropout ? *(const unsigned long long*)p.seed : 0;
  const unsigned long long offset = p.dropout ? *(const unsigned long long*)p.offset : 0;
  loadTile(q, ldq, i0, p.tq, d, BQ, qs);

  T m[ROWS], l[ROWS], o[ROWS][DMAX / 32];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    m[r] = negInf<T>();
    l[r] = 0;
#pragma unroll
    for (int t = 0; t < DMAX / 32; ++t) o[r][t] = 0;
  }
  const long long keyEnd = p.causal ? min(p.tk, i0 + BQ) : p.tk;
  for (long long j0 = 0; j0 < keyEnd; j0 += BK) {
    __syncthreads();  // the previous tile is read
    loadTileT(k, ldq, j0, p.tk, d, kt);
    loadTile(v, ldv, j0, p.tk, dv, BK, vs);
    __syncthreads();
    T s[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) s[r] = 0;
    for (long long c = 0; c < d; ++c) {
      const T kc = kt[c * KLD + lane];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) s[r] += qs[(warp * ROWS + r) * d + c] * kc;
    }
    const long long j = j0 + lane;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const long long i = i0 + warp * ROWS + r;
      const bool ok = allowed(p, mask, i, j);
      const T sr = !ok ? negInf<T>()
                   : bias ? (T)p.scale * s[r] + bias[i * p.biasStrideI + j * p.biasStrideJ]
                          : (T)p.scale * s[r];
      const T mNew = nanMax(m[r], warpMax(sr));
      if (mNew == negInf<T>()) continue;  // warp-uniform: no key of the row scored yet
      const T alpha = expT(m[r] - mNew);  // 0 on the first scored tile
      const T e = ok ? expT(sr - mNew) : (T)0;
      l[r] = l[r] * alpha + warpSum(e);
      m[r] = mNew;
      const T pz = p.dropout && ok ? e * keepFactor<T>(p, seed, offset, b, i, j) : e;
#pragma unroll
      for (int t = 0; t < DMAX / 32; ++t) o[r][t] *= alpha;
      for (int c = 0; c < BK; ++c) {
        const T pc = __shfl_sync(0xffffffffu, pz, c);
#pragma unroll
        for (int t = 0; t < DMAX / 32; ++t)
          if (lane + 32 * t < dv) o[r][t] += pc * vs[c * dv + lane + 32 * t];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const long long i = i0 + warp * ROWS + r;
    if (i >= p.tq) continue;
    const long long row = b * p.tq + i;
    const bool none = l[r] == (T)0;  // no allowed key (a NaN row has l = NaN)
    if (lane == 0) ((T*)p.lse)[row] = none ? negInf<T>() : m[r] + logT(l[r]);
    T* out = (T*)p.out + itemBase(p, b, p.tq, dv) + i * ldv;
#pragma unroll
    for (int t = 0; t < DMAX / 32; ++t)
      if (lane + 32 * t < dv) out[lane + 32 * t] = none ? (T)0 : o[r][t] / l[r];
  }
}

template <typename T>
__device__ void attnBackward(const AttnParams& p) {
  TGC_ATTN_SHARED;
  const long long d = p.d, dv = p.dvDim;
  T* kt = (T*)smem;            // [d][KLD]   the block's keys, transposed
  T* vt = kt + d * KLD;        // [dv][KLD]  its values, transposed
  T* qs = vt + dv * KLD;       // [BQ][d]    a query tile
  T* dos = qs + BQ * d;        // [BQ][dv]   its dout
  T* ps = dos + BQ * dv;       // [BQ][KLD]  p * z
  T* dss = ps + BQ * KLD;      // [BQ][KLD]  ds / scale = p * (dp - delta)
  T* rowLse = dss + BQ * KLD;  // [BQ]
  T* rowDelta = rowLse + BQ;   // [BQ]
  const long long kTiles = (p.tk + BK - 1) / BK;
  const long long b = blockIdx.x / kTiles, j0 = blockIdx.x % kTiles * BK;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Row strides: k, dq, dk as q's; v, out, dout, dv as ldv.
  const long long ldq = p.heads * d, ldv = p.heads * dv;
  const T* q = (const T*)p.q + itemBase(p, b, p.tq, d);
  const T* k = (const T*)p.k + itemBase(p, b, p.tk, d);
  const T* v = (const T*)p.v + itemBase(p, b, p.tk, dv);
  const T* out = (const T*)p.out + itemBase(p, b, p.tq, dv);
  const T* dout = (const T*)p.dout + itemBase(p, b, p.tq, dv);
  const T* lse = (const T*)p.lse + b * p.tq;
  T* dq = (T*)p.dq + itemBase(p, b, p.tq, d);
  const unsigned char* mask =
      p.hasMask ? (const unsigned char*)p.mask + ((const long long*)p.maskBase)[b] : nullptr;
  const T* bias = biasOf<T>(p, p.bias, b);
  T* dbias = p.biasGrad ? biasOf<T>(p, p.dbias, b) : nullptr;
  const unsigned long long seed = p.dropout ? *(const unsigned long long*)p.seed : 0;
  const unsigned long long offset = p.dropout ? *(const unsigned long long*)p.offset : 0;
  const T scale = (T)p.scale;
  loadTileT(k, ldq, j0, p.tk, d, kt);
  loadTileT(v, ldv, j0, p.tk, dv, vt);

  // This thread's share of dk and dv: key own = tid / 8, dims tid % 8 + 8 t.
  constexpr int PER = DMAX / 8;
  const int own = threadIdx.x / 8, sub = threadIdx.x % 8;
  T accK[PER], accV[PER];
#pragma unroll
  for (int t = 0; t < PER; ++t) accK[t] = accV[t] = 0;

  const long long firstQ = p.causal ? j0 / BQ * BQ : 0;  // earlier queries see none of these keys
  for (long long i0 = firstQ; i0 < p.tq; i0 += BQ) {
    __syncthreads();  // the previous query tile is read
    loadTile(q, ldq, i0, p.tq, d, BQ, qs);
    loadTile(dout, ldv, i0, p.tq, dv, BQ, dos);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {  // lse and delta = dot(dout, out) of the warp's rows
      const int rr = warp * ROWS + r;
      const long long i = i0 + rr;
      T delta = 0;
      if (i < p.tq)
        for (long long c = lane; c < dv; c += 32) delta += dout[i * ldv + c] * out[i * ldv + c];
      delta = warpSum(delta);
      if (lane == 0) {
        rowDelta[rr] = delta;
        rowLse[rr] = i < p.tq ? lse[i] : negInf<T>();
      }
    }
    __syncthreads();
    // Scores and dout . v: lane = key, the warp's rows.
    T s[ROWS], dpz[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) s[r] = dpz[r] = 0;
    for (long long c = 0; c < d; ++c) {
      const T kc = kt[c * KLD + lane];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) s[r] += qs[(warp * ROWS + r) * d + c] * kc;
    }
    for (long long c = 0; c < dv; ++c) {
      const T vc = vt[c * KLD + lane];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) dpz[r] += dos[(warp * ROWS + r) * dv + c] * vc;
    }
    const long long j = j0 + lane;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int rr = warp * ROWS + r;
      const long long i = i0 + rr;
      const T L = rowLse[rr];
      // A fully masked row (lse = -inf) contributes nothing, as a masked element.
      const bool ok = L != negInf<T>() && allowed(p, mask, i, j);
      const long long at = i * p.biasStrideI + j * p.biasStrideJ;
      const T pe = !ok ? (T)0 : expT((bias ? scale * s[r] + bias[at] : scale * s[r]) - L);
      const T z = p.dropout && ok ? keepFactor<T>(p, seed, offset, b, i, j) : (T)1;
      ps[rr * KLD + lane] = pe * z;
      const T ds = ok ? pe * (dpz[r] * z - rowDelta[rr]) : (T)0;
      dss[rr * KLD + lane] = ds;
      // dbias: summed over the blocks (and batch items) that share its elements.
      if (dbias && ok) atomicAdd(&dbias[at], ds);
    }
    __syncthreads();
    // dv += (p z)^T dout, dk += ds^T q for the thread's key and dims.
    for (int r = 0; r < BQ; ++r) {
      const T pz = ps[r * KLD + own], ds = dss[r * KLD + own];
#pragma unroll
      for (int t = 0; t < PER; ++t) {
        const long long c = sub + 8 * t;
        if (c < dv) accV[t] += pz * dos[r * dv + c];
        if (c < d) accK[t] += ds * qs[r * d + c];
      }
    }
    // dq += scale * ds k for the tile's queries: row tid / 8, dims tid % 8 + 8 t.
    if (i0 + own < p.tq) {
#pragma unroll
      for (int t = 0; t < PER; ++t) {
        const long long c = sub + 8 * t;
        if (c >= d) continue;
        T sum = 0;
        for (int key = 0; key < BK; ++key) sum += dss[own * KLD + key] * kt[c * KLD + key];
        atomicAdd(&dq[(i0 + own) * ldq + c], scale * sum);
      }
    }
  }
  if (j0 + own < p.tk) {
    T* dk = (T*)p.dk + itemBase(p, b, p.tk, d) + (j0 + own) * ldq;
    T* dvOut = (T*)p.dv + itemBase(p, b, p.tk, dv) + (j0 + own) * ldv;
#pragma unroll
    for (int t = 0; t < PER; ++t) {
      const long long c = sub + 8 * t;
      if (c < d) dk[c] = scale * accK[t];
      if (c < dv) dvOut[c] = accV[t];
    }
  }
}

extern "C" __global__ void __launch_bounds__(THREADS) tgc_attn_fwd_f32(const AttnParams p) {
  attnForward<float>(p);
}
extern "C" __global__ void __launch_bounds__(THREADS) tgc_attn_fwd_f64(const AttnParams p) {
  attnForward<double>(p);
}
extern "C" __global__ void __launch_bounds__(THREADS) tgc_attn_bwd_f32(const AttnParams p) {
  attnBackward<float>(p);
}
extern "C" __global__ void __launch_bounds__(THREADS) tgc_attn_bwd_f64(const AttnParams p) {
  attnBackward<double>(p);
}
