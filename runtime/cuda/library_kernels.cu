// Hand-written GPU kernels of the fused library ops (ir/fused_ops.h gives the exact
// semantics), compiled at run time by NVRTC (embedded by runtime/cuda/cuda_library.cpp).
// No headers. T is float or double; targets TI are int or long long.
//
//   tgc_ln_grad_rows_<t>   layer_norm_grad's dx, one block per row; saves mean and rstd
//   tgc_ln_grad_cols_<t>   its dgamma and dbeta, one 32-column strip per block (no atomics:
//                          the sums' order is fixed, runs are bit-identical)
//   tgc_sce_<t>_<ti>       softmax_cross_entropy: loss and lse, one block per row
//   tgc_sce_grad_<t>_<ti>  softmax_cross_entropy_grad, one thread per element
// Row kernels take 256 threads per block and loop over rows when the grid is smaller.

constexpr int THREADS = 256;

template <typename T>
__device__ __forceinline__ T negInf() {
  return (T)__longlong_as_double(0xfff0000000000000ULL);
}

// Sum over the block (every thread gets it). `scratch` holds THREADS / 32 values.
template <typename T>
__device__ T blockSum(T v, T* scratch) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read from the previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < THREADS / 32; ++w) total += scratch[w];
  return total;
}

// Maximum over the block, NaN-propagating like the interpreter's.
template <typename T>
__device__ T blockMax(T v, T* scratch) {
  for (int o = 16; o > 0; o /= 2) {
    const T u = __shfl_xor_sync(0xffffffffu, v, o);
    v = (u != u || u > v) ? u : v;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T m = scratch[0];
  for (int w = 1; w < THREADS / 32; ++w) m = (scratch[w] != scratch[w] || scratch[w] > m) ? scratch[w] : m;
  return m;
}

template <typename T>
__device__ void lnGradRows(const T* __restrict__ x, const T* __restrict__ gamma,
                           const T* __restrict__ dy, T* __restrict__ dx, T* __restrict__ stats,
                           long long rows, long long d, double eps) {
  __shared__ T scratch[THREADS / 32];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    const T* dyr = dy + r * d;
    T s = 0;
    for (long long i = threadIdx.x; i < d; i += THREADS) s += xr[i];
    const T mean = blockSum(s, scratch) / (T)d;
    T q = 0;
    for (long long i = threadIdx.x; i < d; i += THREADS) q += (xr[i] - mean) * (xr[i] - mean);
    const T rstd = (T)1 / sqrt(blockSum(q, scratch) / (T)d + (T)eps);
    T sg = 0, sgx = 0;
    for (long long i = threadIdx.x; i < d; i += THREADS) {
      const T g = dyr[i] * gamma[i];
      sg += g;
      sgx += g * (xr[i] - mean) * rstd;
    }
    const T meanG = blockSum(sg, scratch) / (T)d;
    const T meanGx = blockSum(sgx, scratch) / (T)d;
    for (long long i = threadIdx.x; i < d; i += THREADS) {
      const T xhat = (xr[i] - mean) * rstd;
      dx[r * d + i] = rstd * (dyr[i] * gamma[i] - meanG - xhat * meanGx);
    }
    if (threadIdx.x == 0) {
      stats[2 * r] = mean;
      stats[2 * r + 1] = rstd;
    }
  }
}

// Block (32, 8): column blockIdx.x * 32 + threadIdx.x, rows threadIdx.y, +8, ...
template <typename T>
__device__ void lnGradCols(const T* __restrict__ x, const T* __restrict__ dy,
                           const T* __restrict__ stats, T* __restrict__ dgamma,
                           T* __restrict__ dbeta, long long rows, long long d) {
  __shared__ T sGamma[8][33], sBeta[8][33];
  const long long c = (long long)blockIdx.x * 32 + threadIdx.x;
  T g = 0, b = 0;
  if (c < d)
    for (long long r = threadIdx.y; r < rows; r += 8) {
      const T v = dy[r * d + c];
      g += v * (x[r * d + c] - stats[2 * r]) * stats[2 * r + 1];
      b += v;
    }
  sGamma[threadIdx.y][threadIdx.x] = g;
  sBeta[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < d) {
    T tg = 0, tb = 0;
    for (int y = 0; y < 8; ++y) {
      tg += sGamma[y][threadIdx.x];
      tb += sBeta[y][threadIdx.x];
    }
    dgamma[c] = tg;
    dbeta[c] = tb;
  }
}

template <typename T, typename TI>
__device__ void sce(const T* __restrict__ logits, const TI* __restrict__ targets,
                    T* __restrict__ loss, T* __restrict__ lse, long long rows, long long v,
                    double eps) {
  __shared__ T scratch[THREADS / 32];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* l = logits + r * v;
    T m = negInf<T>();
    for (long long i = threadIdx.x; i < v; i += THREADS) m = (l[i] != l[i] || l[i] > m) ? l[i] : m;
    m = blockMax(m, scratch);
    const T shift = m == negInf<T>() ? (T)0 : m;  // an all -inf row: lse = log(0) = -inf
    T s = 0, sum = 0;
    for (long long i = threadIdx.x; i < v; i += THREADS) {
      s += exp(l[i] - shift);
      sum += l[i];
    }
    const T total = blockSum(s, scratch);
    const T all = blockSum(sum, scratch);
    if (threadIdx.x == 0) {
      const T rowLse = shift + log(total);
      const long long t = (long long)targets[r];
      lse[r] = rowLse;
      loss[r] = t >= 0 && t < v
                    ? (T)(1 - eps) * (rowLse - l[t]) + (T)eps * (rowLse - all / (T)v)
                    : (T)0;
    }
  }
}

template <typename T, typename TI>
__device__ void sceGrad(const T* __restrict__ logits, const TI* __restrict__ targets,
                        const T* __restrict__ lse, const T* __restrict__ dloss,
                        T* __restrict__ dlogits, long long rows, long long v, double eps) {
  const long long n = rows * v;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (long long)gridDim.x * blockDim.x) {
    const long long r = e / v, c = e % v;
    const T hit = (long long)targets[r] == c ? (T)(1 - eps) : (T)0;
    dlogits[e] = dloss[r] * (exp(logits[e] - lse[r]) - hit - (T)(eps / (double)v));
  }
}

#define TGC_LN(T, NAME)                                                                      \
  extern "C" __global__ void __launch_bounds__(THREADS) tgc_ln_grad_rows_##NAME(             \
      const T* x, const T* gamma, const T* dy, T* dx, T* stats, long long rows, long long d, \
      double eps) {                                                                          \
    lnGradRows<T>(x, gamma, dy, dx, stats, rows, d, eps);                                    \
  }                                                                                          \
  extern "C" __global__ void __launch_bounds__(THREADS) tgc_ln_grad_cols_##NAME(             \
      const T* x, const T* dy, const T* stats, T* dgamma, T* dbeta, long long rows,          \
      long long d) {                                                                         \
    lnGradCols<T>(x, dy, stats, dgamma, dbeta, rows, d);                                     \
  }
#define TGC_SCE(T, TI, NAME)                                                                 \
  extern "C" __global__ void __launch_bounds__(THREADS) tgc_sce_##NAME(                      \
      const T* logits, const TI* targets, T* loss, T* lse, long long rows, long long v,      \
      double eps) {                                                                          \
    sce<T, TI>(logits, targets, loss, lse, rows, v, eps);                                    \
  }                                                                                          \
  extern "C" __global__ void __launch_bounds__(THREADS) tgc_sce_grad_##NAME(                 \
      const T* logits, const TI* targets, const T* lse, const T* dloss, T* dlogits,          \
      long long rows, long long v, double eps) {                                             \
    sceGrad<T, TI>(logits, targets, lse, dloss, dlogits, rows, v, eps);                      \
  }

TGC_LN(float, f32)
TGC_LN(double, f64)
TGC_SCE(float, int, f32_i32)
TGC_SCE(float, long long, f32_i64)
TGC_SCE(double, int, f64_i32)
TGC_SCE(double, long long, f64_i64)
