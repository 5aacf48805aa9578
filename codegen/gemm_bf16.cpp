#include "codegen/gemm_bf16.h"

#include <algorithm>
#include <array>
#include <bit>
#include <stdexcept>
#include <vector>

#include "codegen/gemm_bf16_native.h"
#include "ir/env_flag.h"
#include "support/thread_pool.h"

namespace tgc::codegen {
namespace {

// A batch is widened whole when each operand's span is at most this many elements (16 MiB
// of f32); larger products go tile by tile.
constexpr int64_t kWholeBatchElems = int64_t{1} << 22;
// Batch items of fewer FLOPs run whole on one thread each in the AVX512-BF16 path (a 64 x 64
// x 64 attention head is 0.5 MFLOP: split over threads, it paid two parallel regions for
// a few microseconds of work).
constexpr double kSmallItemFlops = 16e6;
// Conversions below this many elements run on the calling thread; above it each thread's
// chunk gets at least this many.
constexpr int64_t kConvertGrain = int64_t{1} << 14;

// The conversions are function objects, not functions, so that convertBlock's loops inline
// them (a function pointer would be an indirect call per element) and vectorize.
struct Widen {
  float operator()(uint16_t h) const { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }
};
constexpr Widen widen;

// Round to nearest even, NaN kept quiet: ir/dtype.cpp's floatToBF16, branch-free.
struct Narrow {
  uint16_t operator()(float f) const {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    const uint32_t rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16;
    const uint32_t quietNaN = (u >> 16) | 0x40;
    return static_cast<uint16_t>((u & 0x7FFFFFFF) > 0x7F800000 ? quietNaN : rounded);
  }
};
constexpr Narrow narrow;

// An f32 B (GemmDesc::bF32) as the product sees it: rounded to bf16, then widened.
struct RoundToBf16 {
  float operator()(float f) const { return widen(narrow(f)); }
};
constexpr RoundToBf16 roundToBf16;

// dst[r * dstLd + c] = f(src[r * ld + c]) for the rows x cols block, rows split over threads.
template <class From, class To, class F>
void convertBlock(const From* src, int64_t ld, int64_t rows, int64_t cols, To* dst,
                  int64_t dstLd, F f, ThreadPool& pool) {
  auto body = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const From* s = src + r * ld;
      To* d = dst + r * dstLd;
      for (int64_t c = 0; c < cols; ++c) d[c] = f(s[c]);
    }
  };
  if (rows * cols <= kConvertGrain) return body(0, rows);
  pool.parallelFor(rows, body, std::max<int64_t>(1, kConvertGrain / std::max<int64_t>(1, cols)));
}

// A flat run of n elements, as a block of rows of kConvertGrain so it splits over threads.
template <class From, class To, class F>
void convertFlat(const From* src, int64_t n, To* dst, F f, ThreadPool& pool) {
  const int64_t full = n / kConvertGrain, tail = n - full * kConvertGrain;
  convertBlock(src, kConvertGrain, full, kConvertGrain, dst, kConvertGrain, f, pool);
  convertBlock(src + full * kConvertGrain, 0, tail > 0 ? 1 : 0, tail, dst + full * kConvertGrain,
               0, f, pool);
}

// Calls fn(item, offA, offB, offC) for every batch item, in order.
template <class F>
void forEachItem(const GemmDesc& d, F fn) {
  const int64_t count = d.batchCount();
  std::vector<int64_t> idx(d.batch.size(), 0);
  for (int64_t item = 0; item < count; ++item) {
    int64_t oa = 0, ob = 0, oc = 0;
    for (size_t i = 0; i < idx.size(); ++i) {
      oa += idx[i] * d.strideA[i];
      ob += idx[i] * d.strideB[i];
      oc += idx[i] * d.strideC[i];
    }
    fn(item, oa, ob, oc);
    for (size_t i = idx.size(); i-- > 0;) {  // odometer, innermost dimension fastest
      if (++idx[i] < d.batch[i]) break;
      idx[i] = 0;
    }
  }
}

// Elements from an operand's first to its last stored element, over the whole batch.
int64_t span(int64_t rows, int64_t cols, int64_t ld, const std::vector<int64_t>& batch,
             const std::vector<int64_t>& strides) {
  if (rows == 0 || cols == 0) return 0;
  int64_t s = (rows - 1) * ld + cols;
  for (size_t i = 0; i < batch.size(); ++i) s += (batch[i] - 1) * strides[i];
  return s;
}

std::vector<float>& scratch(size_t elems) {
  thread_local std::vector<float> buf;
  if (buf.size() < elems) buf.resize(elems);
  return buf;
}

class Bf16Gemm {
 public:
  Bf16Gemm(const GemmDesc& d, const uint16_t* a, const void* b, uint16_t* c, float* sumB,
           ThreadPool& pool)
      : d_(d), a_(a), b_(b), c_(c), sumB_(sumB), pool_(pool),
        engine_(GemmEngine::host(DType::f32)) {}

  void run() {
    // The column sums of B: packed with B by the native kernel when B is not transposed,
    // otherwise here, each column over k in order (as the unfused reduce_sum adds them).
    const bool nativeSums = d_.m > 0 && d_.k > 0 && d_.alpha != 0 && !d_.transB &&
                            bf16GemmPath() == Bf16GemmPath::Native;
    if (d_.sumB && !nativeSums) sumColumnsOfB();
    if (d_.m == 0 || d_.n == 0 || d_.batchCount() == 0) return;
    const int64_t aSpan = span(d_.transA ? d_.k : d_.m, d_.transA ? d_.m : d_.k, d_.lda, d_.batch, d_.strideA);
    const int64_t bSpan = span(d_.transB ? d_.n : d_.k, d_.transB ? d_.k : d_.n, d_.ldb, d_.batch, d_.strideB);
    const int64_t cSpan = span(d_.m, d_.n, d_.ldc, d_.batch, d_.strideC);
    // An empty contraction, or alpha = 0: C = beta * C, A and B not read (as the f32 engine).
    if (d_.k == 0 || d_.alpha == 0) return scaleOnly();
    if (bf16GemmPath() == Bf16GemmPath::Native) return native();
    if (d_.batchCount() > 1 && std::max({aSpan, bSpan, cSpan}) <= kWholeBatchElems)
      return whole(aSpan, bSpan, cSpan);
    forEachItem(d_, [&](int64_t item, int64_t oa, int64_t ob, int64_t oc) { tiled(item, oa, ob, oc); });
  }

 private:
  // The AVX512-BF16 kernel, item by item. Small items (attention-sized: a few tiles each)
  // go to the threads whole, each on one thread (the kernel's own parallel loops then run
  // inline); larger ones one after another, each over all threads.
  void native() {
    std::vector<std::array<int64_t, 3>> items;  // each item's offsets into A, B, C
    forEachItem(d_, [&](int64_t, int64_t oa, int64_t ob, int64_t oc) { items.push_back({oa, ob, oc}); });
    auto run = [&](int64_t i) {
      const auto& o = items[static_cast<size_t>(i)];
      gemmBf16NativeItem(d_, a_ + o[0], bAt(o[1]), c_ + o[2],
                         d_.sumB && !d_.transB ? sumB_ : nullptr, pool_);  // (see run())
    };
    const double itemFlops = 2.0 * static_cast<double>(d_.m) * static_cast<double>(d_.n) *
                             static_cast<double>(d_.k);
    const auto count = static_cast<int64_t>(items.size());
    if (count > 1 && itemFlops < kSmallItemFlops)
      pool_.parallelForDynamic(count, 1, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) run(i);
      });
    else
      for (int64_t i = 0; i < count; ++i) run(i);
  }

  // sumB_[j] = the sum over k of op(B)(k, j), k in order (a single product: validated).
  void sumColumnsOfB() {
    const uint16_t* b = bBf16();
    std::fill(sumB_, sumB_ + d_.n, 0.0f);
    if (!d_.transB) {
      for (int64_t k = 0; k < d_.k; ++k)
        for (int64_t j = 0; j < d_.n; ++j) sumB_[j] += widen(b[k * d_.ldb + j]);
    } else {
      for (int64_t j = 0; j < d_.n; ++j) {
        float s = 0;
        for (int64_t k = 0; k < d_.k; ++k) s += widen(b[j * d_.ldb + k]);
        sumB_[j] = s;
      }
    }
  }

  // An empty contraction: C = beta * C.
  void scaleOnly() {
    forEachItem(d_, [&](int64_t, int64_t, int64_t, int64_t oc) {
      convertBlock(c_ + oc, d_.ldc, d_.m, d_.n, c_ + oc, d_.ldc,
                   [&](uint16_t h) {
                     return narrow(d_.beta == 0 ? 0.0f : static_cast<float>(d_.beta * widen(h)));
                   },
                   pool_);
    });
  }

  // The whole batch widened at once and run as one batched f32 GEMM with the same layout.
  void whole(int64_t aSpan, int64_t bSpan, int64_t cSpan) {
    std::vector<float>& buf = scratch(static_cast<size_t>(aSpan + bSpan + cSpan));
    float* as = buf.data();
    float* bs = as + aSpan;
    float* cs = bs + bSpan;
    convertFlat(a_, aSpan, as, widen, pool_);
    if (d_.bF32) convertFlat(bF32(), bSpan, bs, roundToBf16, pool_);
    else convertFlat(bBf16(), bSpan, bs, widen, pool_);
    if (d_.beta != 0) convertFlat(c_, cSpan, cs, widen, pool_);
    GemmDesc f = d_;
    f.dtype = DType::f32;
    f.bF32 = false;  // bs holds B widened
    engine_.run(f, as, bs, cs, &pool_);
    forEachItem(d_, [&](int64_t, int64_t, int64_t, int64_t oc) {
      convertBlock(cs + oc, d_.ldc, d_.m, d_.n, c_ + oc, d_.ldc, narrow, pool_);
    });
  }

  // One product, C tile by tile, K block by block.
  void tiled(int64_t item, int64_t oa, int64_t ob, int64_t oc) {
    const int64_t tr = std::min(d_.m, kBf16TileRows), tc = std::min(d_.n, kBf16TileCols),
                  tk = std::min(d_.k, kBf16TileK);
    std::vector<float>& buf = scratch(static_cast<size_t>(tr * tk + tk * tc + tr * tc));
    float* as = buf.data();
    float* bs = as + tr * tk;
    float* cs = bs + tk * tc;
    for (int64_t r0 = 0; r0 < d_.m; r0 += tr) {
      const int64_t mb = std::min(tr, d_.m - r0);
      for (int64_t c0 = 0; c0 < d_.n; c0 += tc) {
        const int64_t nb = std::min(tc, d_.n - c0);
        uint16_t* cTile = c_ + oc + r0 * d_.ldc + c0;
        if (d_.beta != 0) convertBlock(cTile, d_.ldc, mb, nb, cs, nb, widen, pool_);
        for (int64_t k0 = 0; k0 < d_.k; k0 += tk) {
          const int64_t kb = std::min(tk, d_.k - k0);
          GemmDesc f = GemmDesc::contiguous(DType::f32, mb, nb, kb, d_.transA, d_.transB);
          f.alpha = d_.alpha;
          f.beta = k0 == 0 ? d_.beta : 1.0;
          // The stored blocks of A and B, widened unless the scratch holds them already.
          if (Key ka{item, r0, k0}; ka != aKey_) {
            if (d_.transA) convertBlock(a_ + oa + k0 * d_.lda + r0, d_.lda, kb, mb, as, mb, widen, pool_);
            else convertBlock(a_ + oa + r0 * d_.lda + k0, d_.lda, mb, kb, as, kb, widen, pool_);
            aKey_ = ka;
          }
          if (Key kb2{item, c0, k0}; kb2 != bKey_) {
            const int64_t at = ob + (d_.transB ? c0 * d_.ldb + k0 : k0 * d_.ldb + c0);
            const int64_t rows = d_.transB ? nb : kb, cols = d_.transB ? kb : nb;
            if (d_.bF32) convertBlock(bF32() + at, d_.ldb, rows, cols, bs, cols, roundToBf16, pool_);
            else convertBlock(bBf16() + at, d_.ldb, rows, cols, bs, cols, widen, pool_);
            bKey_ = kb2;
          }
          engine_.run(f, as, bs, cs, &pool_);
        }
        convertBlock(cs, nb, mb, nb, cTile, d_.ldc, narrow, pool_);
      }
    }
  }

  struct Key {
    int64_t item = -1, outer = -1, k0 = -1;
    bool operator==(const Key&) const = default;
  };

  const uint16_t* bBf16() const { return static_cast<const uint16_t*>(b_); }
  const float* bF32() const { return static_cast<const float*>(b_); }
  // B's element `offset`, bf16 or f32.
  const void* bAt(int64_t offset) const {
    return d_.bF32 ? static_cast<const void*>(bF32() + offset) : bBf16() + offset;
  }

  const GemmDesc& d_;
  const uint16_t* a_;
  const void* b_;  // bf16, or f32 when d_.bF32
  uint16_t* c_;
  float* sumB_;  // d_.sumB's output
  ThreadPool& pool_;
  const GemmEngine& engine_;
  Key aKey_, bKey_;  // which block of A and of B the scratch holds
};

Bf16GemmPath& currentPath() {
  static Bf16GemmPath path = cpuHasAvx512Bf16() && !envFlag("TGC_GEMM_BF16_WIDEN")
                                 ? Bf16GemmPath::Native
                                 : Bf16GemmPath::Widen;
  return path;
}

}  // namespace

Bf16GemmPath bf16GemmPath() { return currentPath(); }

bool bf16GemmHasNative() { return cpuHasAvx512Bf16(); }

void setBf16GemmPath(Bf16GemmPath path) {
  if (path == Bf16GemmPath::Native && !cpuHasAvx512Bf16())
    throw std::runtime_error("this CPU has no AVX512-BF16");
  currentPath() = path;
}

void validateGemmBf16(const GemmDesc& desc) {
  if (desc.dtype != DType::bf16)
    throw std::invalid_argument("gemm bf16: dtype " + std::string(dtypeName(desc.dtype)) +
                                " is not bf16");
  if (!desc.epilogue.empty())
    throw std::invalid_argument("gemm bf16: epilogues are not supported (f32 and f64 only)");
  if (desc.sumB && desc.bF32)
    throw std::invalid_argument("gemm bf16: sumB of an f32 B is not supported");
  GemmDesc f = desc;
  f.dtype = DType::f32;
  f.bF32 = false;
  f.validate();
}

void gemmBf16(const GemmDesc& desc, const void* a, const void* b, void* c, ThreadPool* pool,
              float* sumB) {
  validateGemmBf16(desc);
  if (desc.sumB && !sumB) throw std::invalid_argument("gemm bf16: sumB set but no output given");
  Bf16Gemm(desc, static_cast<const uint16_t*>(a), b, static_cast<uint16_t*>(c), sumB,
           pool ? *pool : ThreadPool::global())
      .run();
}

}  // namespace tgc::codegen
