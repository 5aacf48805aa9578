#include "codegen/gemm.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <type_traits>

#include "codegen/gemm_batched.h"
#include "codegen/gemm_pack.h"
#include "codegen/gemm_pair_share.h"
#include "codegen/gemm_scratch.h"
#include "codegen/gemm_small_m.h"
#include "codegen/jit.h"
#include "ir/env_flag.h"
#include "support/thread_pool.h"

namespace tgc::codegen {

// ---- GemmDesc ---------------------------------------------------------------------------

GemmDesc GemmDesc::contiguous(DType dtype, int64_t m, int64_t n, int64_t k, bool transA,
                              bool transB) {
  GemmDesc d;
  d.dtype = dtype;
  d.m = m;
  d.n = n;
  d.k = k;
  d.transA = transA;
  d.transB = transB;
  d.lda = std::max<int64_t>(1, transA ? m : k);
  d.ldb = std::max<int64_t>(1, transB ? k : n);
  d.ldc = std::max<int64_t>(1, n);
  return d;
}

GemmDesc& GemmDesc::addBatch(int64_t count, bool broadcastA, bool broadcastB) {
  // Each new dimension is outermost: its stride spans everything added before.
  auto span = [&](const std::vector<int64_t>& strides, int64_t matrix) {
    int64_t s = matrix;
    for (size_t i = 0; i < batch.size(); ++i)
      if (strides[i] != 0) s = std::max(s, strides[i] * batch[i]);
    return s;
  };
  int64_t sa = broadcastA ? 0 : span(strideA, (transA ? k : m) * lda);
  int64_t sb = broadcastB ? 0 : span(strideB, (transB ? n : k) * ldb);
  int64_t sc = span(strideC, m * ldc);
  batch.insert(batch.begin(), count);
  strideA.insert(strideA.begin(), sa);
  strideB.insert(strideB.begin(), sb);
  strideC.insert(strideC.begin(), sc);
  return *this;
}

int64_t GemmDesc::batchCount() const {
  int64_t n = 1;
  for (int64_t d : batch) n *= d;
  return n;
}

void GemmDesc::validate() const {
  auto bad = [](const std::string& why) { throw std::invalid_argument("gemm: " + why); };
  if (dtype != DType::f32 && dtype != DType::f64)
    bad(fmt::format("dtype {} is not supported (f32 or f64)", dtypeName(dtype)));
  if (m < 0 || n < 0 || k < 0) bad(fmt::format("negative size m={} n={} k={}", m, n, k));
  const int64_t minLda = std::max<int64_t>(1, transA ? m : k);
  const int64_t minLdb = std::max<int64_t>(1, transB ? k : n);
  const int64_t minLdc = std::max<int64_t>(1, n);
  if (lda < minLda) bad(fmt::format("lda={} is less than {}", lda, minLda));
  if (ldb < minLdb) bad(fmt::format("ldb={} is less than {}", ldb, minLdb));
  if (ldc < minLdc) bad(fmt::format("ldc={} is less than {}", ldc, minLdc));
  if (strideA.size() != batch.size() || strideB.size() != batch.size() ||
      strideC.size() != batch.size())
    bad(fmt::format("{} batch dimensions but {}/{}/{} strides for A/B/C", batch.size(),
                    strideA.size(), strideB.size(), strideC.size()));
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i] < 0) bad(fmt::format("batch dimension {} is negative ({})", i, batch[i]));
    if (strideA[i] < 0 || strideB[i] < 0 || strideC[i] < 0)
      bad(fmt::format("negative stride in batch dimension {}", i));
    if (strideC[i] == 0 && batch[i] > 1)
      bad(fmt::format("C cannot broadcast: batch dimension {} has {} items and C stride 0", i,
                      batch[i]));
  }
  auto operand = [&](const char* what, int64_t ld, const std::vector<int64_t>& strides) {
    if (ld < minLdc) bad(fmt::format("epilogue {}: leading dimension {} is less than {}", what, ld, minLdc));
    if (strides.size() != batch.size())
      bad(fmt::format("epilogue {}: {} batch strides for {} batch dimensions", what, strides.size(),
                      batch.size()));
    for (int64_t s : strides)
      if (s < 0) bad(fmt::format("epilogue {}: negative batch stride", what));
  };
  if (bF32) bad("an f32 B is for bf16 products only");
  if (sumB && batchCount() != 1)
    bad(fmt::format("sumB needs a single product, not a batch of {}", batchCount()));
  if (epilogue.addend) operand("addend", epilogue.ldAddend, epilogue.strideAddend);
  if (epilogue.mask != GemmMask::none) operand("mask", epilogue.ldMask, epilogue.strideMask);
}

namespace {

thread_local Scratch tPackA;
thread_local Scratch tPackB;
thread_local Scratch tSumB;  // per k block column sums of packed B (GemmDesc::sumB)

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// out[j] = sum over k of op(B)(k, j), straight from B: for products that pack nothing
// (k == 0, alpha == 0, no rows).
template <class T>
void sumColumnsOfB(const GemmDesc& d, const T* b, T* out) {
  for (int64_t j = 0; j < d.n; ++j) {
    T s = 0;
    for (int64_t k = 0; k < d.k; ++k) s += d.transB ? b[j * d.ldb + k] : b[k * d.ldb + j];
    out[j] = s;
  }
}

// C = beta * C for an m x n matrix (alpha == 0 or k == 0); beta == 0 writes zeros
// without reading C, as BLAS does.
template <class T>
void scaleC(T* c, int64_t m, int64_t n, int64_t ldc, T beta) {
  for (int64_t i = 0; i < m; ++i) {
    T* row = c + i * ldc;
    if (beta == T(0))
      std::fill(row, row + n, T(0));
    else if (beta != T(1))
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
  }
}

template <class T>
struct Kernels {
  GemmMicroKernel<T>* packed;
  GemmMicroKernelDirectA<T>* direct;
};

// The epilogue of one product: its kernel (null: none) and operands at batch item's (0, 0).
template <class T>
struct Epilogue {
  GemmEpilogueKernel<T>* fn = nullptr;
  const T* bias = nullptr;
  const T* addend = nullptr;
  int64_t ldAddend = 0;
  const unsigned char* mask = nullptr;
  int64_t ldMask = 0, maskBytes = 0;  // maskBytes: size of one mask element
  T scale = 1;
  T* sumB = nullptr;  // GemmDesc::sumB's output (n values), else null

  // Applies it to the rows x cols block of C at (row, col); c is the product's C.
  void apply(T* c, int64_t ldc, int64_t row, int64_t col, int64_t rows, int64_t cols) const {
    fn(c + row * ldc + col, ldc, rows, cols, bias ? bias + col : nullptr,
       addend ? addend + row * ldAddend + col : nullptr, ldAddend,
       mask ? mask + (row * ldMask + col) * maskBytes : nullptr, ldMask, scale);
  }
};

// Runs fn over [0, n) in chunks of at most `want` items taken from a shared counter. The
// chunk count is a multiple of the thread count and chunks differ by at most one item, so
// that on idle cores every thread gets the same work (171 items in chunks of 24 gave one
// thread 4 chunks and the other 3 and a remainder of 3).
template <class Fn>
void balancedChunks(ThreadPool& pool, int64_t n, int64_t want, const Fn& fn) {
  const int64_t threads = pool.numThreads();
  const int64_t chunks = std::min(n, ceilDiv(ceilDiv(n, want), threads) * threads);
  pool.parallelForDynamic(chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) fn(ch * n / chunks, (ch + 1) * n / chunks);
  });
}

using batched::PrefetchPlan;  // codegen/gemm_batched.h

// TGC_GEMM_SHARE_COARSE=1: a pair's half offers mc-row blocks to the end (for A/B runs).
bool coarseTail() {
  static const bool on = envFlag("TGC_GEMM_SHARE_COARSE");
  return on;
}

// The blocks of rows a GEMM pair's half offers (GemmPairShare::Offer): mc rows each, but
// the last mc rows or less in blocks of a quarter of that (whole slivers), so that a
// helper who arrives near the end still finds work, and the two threads finish closer
// together (the small step's pairs idled 1.2-1.4% of their thread time against 3.3-4.0%).
// Any split gives the same bits: each row's products run over K in order.
class ShareBlocks {
 public:
  ShareBlocks(int64_t m, int64_t mc, int64_t mr)
      : m_(m), mc_(mc), coarse_(std::max<int64_t>(0, ceilDiv(m - mc, mc))),
        fine_(coarseTail() ? mc : std::max(mr, mc / 4 / mr * mr)) {}
  int64_t count() const { return coarse_ + ceilDiv(m_ - coarse_ * mc_, fine_); }
  // The first row of block i; begin(count()) is m.
  int64_t begin(int64_t i) const {
    return std::min(m_, i <= coarse_ ? i * mc_ : coarse_ * mc_ + (i - coarse_) * fine_);
  }

 private:
  int64_t m_, mc_, coarse_, fine_;
};

// Packed B is kept to about this size (the k x nc panels of all of K), so that it stays in
// the last-level cache while every row block of A streams past it...
constexpr int64_t kPackedBBytes = 4 << 20;
// ...unless all of B fits in this: each further column block packs all of A again, and at
// 4 MiB the generator's dA product (1024 x 256, K = 8000, B^T; B is 8 MB) took two blocks
// and transposed its 32 MB A twice (one block: +5% CPU-clock on 2 threads). A B larger
// than this keeps 4 MiB panels (8 MiB panels measured 2% slower on 256 x 8000 x 1024).
constexpr int64_t kOneBlockBBytes = 8 << 20;

// TGC_NO_GEMM_PREFETCH_A=1 turns off the prefetch of the next A block (for A/B runs).
bool noAPrefetch() {
  static const bool off = envFlag("TGC_NO_GEMM_PREFETCH_A");
  return off;
}

// TGC_NO_GEMM_K_SPLIT=1 turns off K super-blocks (for A/B runs): B over all of K in
// narrower column blocks instead.
bool noKSplit() {
  static const bool off = envFlag("TGC_NO_GEMM_K_SPLIT");
  return off;
}

}  // namespace

// All of B in one panel when it fits kOneBlockBBytes. Else panels of kPackedBBytes, shaped
// by the lesser of two extra costs, in elements moved: each further column block packs all
// of A again (m x k, from memory), each further K super-block brings C back from the last
// level cache to read and write it (2 x m x n; the micro-kernel reads and writes C once per
// kc block anyway, but within a super-block that C block is still in L2).
// The generator's dA (1024 x 512, K = 8000, B^T 16 MB) had 128-column panels over all of
// K and transposed its 32 MB A four times; super-blocks of 2048 k by all 512 columns pack
// it once.
GemmBBlocking gemmBBlocking(const GemmKernelConfig& cfg, const GemmDesc& d) {
  const int64_t elemBytes = cfg.elementBytes();
  const int64_t nPadded = ceilDiv(d.n, cfg.nr) * cfg.nr;
  if (d.k * nPadded * elemBytes <= kOneBlockBBytes) return {nPadded, d.k};
  auto columnsFor = [&](int64_t ks) {
    return std::min(nPadded, std::clamp<int64_t>(kPackedBBytes / elemBytes / ks / cfg.nr * cfg.nr, cfg.nr, cfg.nc));
  };
  auto cost = [&](const GemmBBlocking& b) {
    return (ceilDiv(d.n, b.nc) - 1) * d.m * d.k + (ceilDiv(d.k, b.ks) - 1) * 2 * d.m * d.n;
  };
  GemmBBlocking best{columnsFor(d.k), d.k};
  if (noKSplit()) return best;
  for (int64_t ks = cfg.kc; ks < d.k; ks += cfg.kc)
    if (const GemmBBlocking b{columnsFor(ks), ks}; cost(b) < cost(best)) best = b;
  return best;
}

namespace {

// One product C = alpha * op(A) op(B) + beta * C, split over `pool` when it is given.
//
// For each block of nc columns (and K super-block, when B over all of K is too large:
// gemmBBlocking), B is packed at once (by all threads), then blocks of rows (or, for few
// rows, of B slivers) are handed out dynamically; each walks the super-block's K, packing
// its A rows kc columns at a time. So there is one barrier per packed panel, not two per
// kc step, and a block of C is finished while it is still in cache.
template <class T>
void product(const GemmKernelConfig& cfg, Kernels<T> kern, const GemmDesc& d, const T* a,
             const T* b, T* c, const Epilogue<T>& epi, ThreadPool* pool, const PrefetchPlan& next = {},
             GemmPairShare::Side share = {}, const GemmPackedB* pre = nullptr) {
  const T alpha = static_cast<T>(d.alpha), beta = static_cast<T>(d.beta);
  if (d.k == 0 || alpha == T(0)) {
    if (epi.sumB) sumColumnsOfB(d, b, epi.sumB);
    scaleC(c, d.m, d.n, d.ldc, beta);
    if (epi.fn) epi.apply(c, d.ldc, 0, 0, d.m, d.n);
    return;
  }
  const int threads = pool ? pool->numThreads() : 1;
  // Few rows: B read in place, not packed (codegen/gemm_small_m.h). Half of a GEMM pair
  // runs it alone, offering nothing (the same bits as outside a pair).
  if constexpr (std::is_same_v<T, float>) {
    if (small_m::applies(d)) {
      auto columns = [&](int64_t j0, int64_t j1) {
        small_m::product(d, a, b, c, j0, j1);
        if (epi.fn) epi.apply(c, d.ldc, 0, j0, d.m, j1 - j0);
      };
      const int64_t blocks = ceilDiv(d.n, small_m::kColumnBlock);
      // Split only when each thread gets at least ~64K multiply-adds.
      if (threads > 1 && blocks >= threads && d.m * d.n * d.k >= 65536 * threads)
        balancedChunks(*pool, blocks, ceilDiv(blocks, 2 * threads), [&](int64_t s0, int64_t s1) {
          columns(s0 * small_m::kColumnBlock, std::min(d.n, s1 * small_m::kColumnBlock));
        });
      else
        columns(0, d.n);
      return;
    }
  }
  const int64_t MR = cfg.mr, NR = cfg.nr;
  const int64_t mSlivers = ceilDiv(d.m, MR);
  const int64_t kBlocks = ceilDiv(d.k, cfg.kc);
  // Few columns: each A sliver would serve too few tiles to repay packing it.
  const bool directA = !d.transA && d.n <= cfg.directAMaxN;
  const GemmBBlocking blocking = gemmBBlocking(cfg, d);
  const int64_t nc = blocking.nc, ks = blocking.ks;

  for (int64_t jc = 0; jc < d.n; jc += nc) {
    const int64_t ncur = std::min(nc, d.n - jc);
    const int64_t nSlivers = ceilDiv(ncur, NR);
    // The kc x (nSlivers * NR) panel of k block pc starts at bp + (pc - k0) * panelRow.
    const int64_t panelRow = nSlivers * NR;
    T* scratch = pre ? nullptr : tPackB.get<T>(std::min(ks, d.k) * panelRow);
    // Column sums (sumB): one row of panelRow partial sums per k block of all of K.
    T* sums = epi.sumB ? tSumB.get<T>(kBlocks * panelRow) : nullptr;

    for (int64_t k0 = 0; k0 < d.k; k0 += ks) {
      const int64_t k1 = std::min(d.k, k0 + ks);
      // Packed before the first call (GemmEngine::packB), or now into this thread's scratch.
      const T* bp = pre ? pre->panel<T>(jc / nc, k0 / ks) : scratch;
      const int64_t kb0 = k0 / cfg.kc, kbCount = ceilDiv(k1 - k0, cfg.kc);
      // Packing work: (k block, sliver) units; a range of them packs sliver runs per block.
      auto packUnits = [&](int64_t u0, int64_t u1) {
        for (int64_t kb = u0 / nSlivers; kb * nSlivers < u1; ++kb) {
          const int64_t s0 = std::max(u0, kb * nSlivers) - kb * nSlivers;
          const int64_t s1 = std::min(u1, (kb + 1) * nSlivers) - kb * nSlivers;
          const int64_t pc = k0 + kb * cfg.kc;
          const int64_t kcur = std::min(cfg.kc, k1 - pc);
          T* panel = scratch + (pc - k0) * panelRow;
          pack::packB(b, d.ldb, d.transB, jc, ncur, pc, kcur, cfg.nr, s0, s1, panel);
          if (sums)
            for (int64_t s = s0; s < s1; ++s)
              pack::sumColumns(panel + s * kcur * NR, kcur, cfg.nr, sums + (kb0 + kb) * panelRow + s * NR);
        }
      };
      const int64_t units = kbCount * nSlivers;
      if (!pre && threads > 1 && (k1 - k0) * panelRow >= 32768)
        pool->parallelForDynamic(units, ceilDiv(units, 4 * threads), packUnits);
      else if (!pre)
        packUnits(0, units);
      if (sums && k1 == d.k)  // k blocks in order: the same sums whichever thread packed which block
        for (int64_t j = 0; j < ncur; ++j) {
          T total = 0;
          for (int64_t kb = 0; kb < kBlocks; ++kb) total += sums[kb * panelRow + j];
          epi.sumB[jc + j] = total;
        }

      // Rows [i0, i0 + rows) times B slivers [js0, js1), over k in [k0, k1): per kc step,
      // pack A (unless read directly), then walk the tiles with the B sliver (L1) outer and
      // the A slivers (L2) inner.
      // The next block's A is prefetched while it is below prefetchEnd (past i0 + rows
      // when the following rows are likely to run next on this thread).
      auto work = [&](int64_t i0, int64_t rows, int64_t js0, int64_t js1, int64_t prefetchEnd) {
        // Kernel calls of this piece of work, over which `next` is spread.
        const int64_t calls = ceilDiv(rows, cfg.mc) * kbCount * (js1 - js0);
        int64_t call = 0;
        for (int64_t ic = i0; ic < i0 + rows; ic += cfg.mc) {
          const int64_t mcur = std::min(cfg.mc, i0 + rows - ic);
          const int64_t aSlivers = ceilDiv(mcur, MR);
          for (int64_t pc = k0; pc < k1; pc += cfg.kc) {
            const int64_t kcur = std::min(cfg.kc, k1 - pc);
            const T betaNow = pc == 0 ? beta : T(1);  // later k blocks accumulate
            T* ap = nullptr;
            if (!directA) {
              ap = tPackA.get<T>(aSlivers * MR * kcur);
              pack::packA(a, d.lda, d.transA, ic, mcur, pc, kcur, cfg.mr, ap);
            }
            // The part of A that the next block packs, fetched into L2 over this block's
            // calls (not for batch items, whose calls prefetch the next item instead).
            pack::SourceLines nextA;
            if (!directA && next.empty() && !noAPrefetch()) {
              const bool lastK = pc + cfg.kc >= k1;
              const int64_t npc = lastK ? k0 : pc + cfg.kc;
              const int64_t nic = lastK ? ic + cfg.mc : ic;
              if (nic < prefetchEnd)
                nextA = pack::SourceLines(a, d.lda, d.transA, nic, std::min(cfg.mc, prefetchEnd - nic), npc,
                                          std::min(cfg.kc, k1 - npc));
            }
            const T* panel = bp + (pc - k0) * panelRow;
            for (int64_t js = js0; js < js1; ++js) {
              nextA.prefetch(js - js0, js1 - js0);
              const int64_t nr = std::min(NR, ncur - js * NR);
              const T* bs = panel + js * kcur * NR;
              T* ct = c + ic * d.ldc + jc + js * NR;
              if (directA)
                kern.direct(kcur, a + ic * d.lda + pc, d.lda, bs, ct, d.ldc, mcur, nr, alpha, betaNow);
              else
                kern.packed(kcur, ap, bs, ct, d.ldc, mcur, nr, alpha, betaNow);
              // The last K block: these tiles are final and still in L1.
              if (epi.fn && pc + kcur == d.k) epi.apply(c, d.ldc, ic, jc + js * NR, mcur, nr);
              if (!next.empty()) next.issue(call++, calls);
            }
          }
        }
      };
      // The threads take chunks of about half their share from a counter, so that the work
      // balances itself when a core is slowed by other load (smaller chunks reuse each B
      // sliver over fewer rows, and measured slower).
      if (threads == 1 && share.share && next.empty()) {
        // Half of a GEMM pair: blocks of rows, which the other thread takes some of once
        // its own product has finished (codegen/gemm_pair_share.h); the last ones finer.
        const ShareBlocks blocks(d.m, cfg.mc, MR);
        auto block = [&](int64_t i) {
          // A fine block prefetches only its own rows: the next may run on the other thread.
          const int64_t r0 = blocks.begin(i), r1 = blocks.begin(i + 1);
          work(r0, r1 - r0, 0, nSlivers, r1 - r0 < cfg.mc ? r1 : d.m);
        };
        GemmPairShare::Offer offer;
        offer.run = [](const void* context, int64_t i) { (*static_cast<const decltype(block)*>(context))(i); };
        offer.context = &block;
        offer.blocks = blocks.count();
        share.share->share(share.side, offer);
      } else if (threads == 1) {
        work(0, d.m, 0, nSlivers, d.m);
      } else if (mSlivers >= 2 * threads || mSlivers >= nSlivers) {
        // Rows: each chunk packs its own A rows; B is shared. Chunks of at most mc rows,
        // and of at least 4 slivers, so that B slivers are reused from L1.
        const int64_t want = std::clamp<int64_t>(ceilDiv(mSlivers, 2 * threads), std::min<int64_t>(4, mSlivers),
                                                 cfg.mc / MR);
        balancedChunks(*pool, mSlivers, want, [&](int64_t s0, int64_t s1) {
          work(s0 * MR, std::min(d.m, s1 * MR) - s0 * MR, 0, nSlivers, std::min(d.m, s1 * MR));
        });
      } else {
        // Few rows, many columns: split the B slivers; each chunk packs all of A (small).
        balancedChunks(*pool, nSlivers, ceilDiv(nSlivers, 2 * threads),
                       [&](int64_t s0, int64_t s1) { work(0, d.m, s0, s1, d.m); });
      }
    }
  }
}

}  // namespace

// ---- GemmEngine -------------------------------------------------------------------------

GemmEngine::GemmEngine(Jit& jit, const GemmKernelConfig& config) : jit_(&jit), config_(config) {
  config_.validate();
  const std::string packed = "tgc_gemm_ukernel_" + config_.name();
  const std::string direct = "tgc_gemm_ukernel_direct_a_" + config_.name();
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto module = std::make_unique<llvm::Module>("tgc_gemm_" + config_.name(), *ctx);
  emitGemmMicroKernel(*module, config_, packed, GemmAForm::packed);
  emitGemmMicroKernel(*module, config_, direct, GemmAForm::direct);
  jit.addModule(std::move(module), std::move(ctx));
  kernel_ = jit.lookup(packed);
  kernelDirectA_ = jit.lookup(direct);
}

GemmEngine& GemmEngine::host(DType dtype) {
  static Jit jit(JitOptions::fromEnv());
  static GemmEngine f32(jit, GemmKernelConfig::forTarget(jit.target(), DType::f32));
  if (dtype == DType::f32) return f32;
  if (dtype == DType::f64) {
    static GemmEngine f64(jit, GemmKernelConfig::forTarget(jit.target(), DType::f64));
    return f64;
  }
  throw std::invalid_argument(fmt::format("gemm: dtype {} is not supported (f32 or f64)", dtypeName(dtype)));
}

void* GemmEngine::epilogueKernel(const GemmEpilogue& epi) const {
  if (epi.empty()) return nullptr;
  std::atomic<void*>& slot = epilogues_[static_cast<size_t>(epi.variant())];
  if (void* fn = slot.load(std::memory_order_acquire)) return fn;
  std::lock_guard<std::mutex> lock(epilogueMutex_);
  if (void* fn = slot.load(std::memory_order_relaxed)) return fn;
  const std::string name = "tgc_gemm_epilogue_" + config_.name() + "_" + epi.tag();
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto module = std::make_unique<llvm::Module>(name, *ctx);
  emitGemmEpilogue(*module, epi, config_.dtype, config_.lanes, name);
  jit_->addModule(std::move(module), std::move(ctx));
  void* fn = jit_->lookup(name);
  slot.store(fn, std::memory_order_release);
  return fn;
}

std::shared_ptr<const GemmPackedB> GemmEngine::packB(const GemmDesc& d, const void* b) const {
  d.validate();
  if (d.dtype != config_.dtype || d.batchCount() != 1 || d.sumB || d.bF32 || d.k == 0 || d.n == 0)
    return nullptr;
  if (d.dtype == DType::f32 && small_m::applies(d)) return nullptr;
  // Items small enough for the batched path stay on it (their B is small, and a row's
  // bits there do not depend on how many rows the product has).
  if (batched::smallItems(config_, d)) return nullptr;
  auto out = std::make_shared<GemmPackedB>();
  out->dtype = d.dtype;
  out->n = d.n;
  out->k = d.k;
  out->transB = d.transB;
  out->blocking = gemmBBlocking(config_, d);
  const int64_t nc = out->blocking.nc, ks = out->blocking.ks, NR = config_.nr;
  const int64_t align = 64 / config_.elementBytes();
  int64_t total = 0;
  for (int64_t jc = 0; jc < d.n; jc += nc)
    for (int64_t k0 = 0; k0 < d.k; k0 += ks) {
      out->offsets.push_back(total);
      total += ceilDiv((std::min(d.k, k0 + ks) - k0) * ceilDiv(std::min(nc, d.n - jc), NR) * NR, align) * align;
    }
  auto fill = [&](auto* data, const auto* src) {
    size_t panel = 0;
    for (int64_t jc = 0; jc < d.n; jc += nc) {
      const int64_t ncur = std::min(nc, d.n - jc), nSlivers = ceilDiv(ncur, NR);
      for (int64_t k0 = 0; k0 < d.k; k0 += ks, ++panel) {
        auto* bp = data + out->offsets[panel];
        for (int64_t pc = k0; pc < std::min(d.k, k0 + ks); pc += config_.kc) {
          const int64_t kcur = std::min(config_.kc, std::min(d.k, k0 + ks) - pc);
          pack::packB(src, d.ldb, d.transB, jc, ncur, pc, kcur, NR, 0, nSlivers,
                      bp + (pc - k0) * nSlivers * NR);
        }
      }
    }
  };
  if (d.dtype == DType::f32)
    fill(static_cast<float*>(out->data = out->storage.get<float>(total)), static_cast<const float*>(b));
  else
    fill(static_cast<double*>(out->data = out->storage.get<double>(total)), static_cast<const double*>(b));
  return out;
}

template <class T>
void GemmEngine::runTyped(const GemmDesc& d, const T* a, const T* b, T* c, ThreadPool& pool,
                          const GemmEpilogueOperands& operands, GemmPairShare::Side share,
                          const GemmPackedB* packedB) const {
  const int64_t count = d.batchCount();
  if (packedB && (count != 1 || packedB->n != d.n || packedB->k != d.k ||
                  packedB->transB != d.transB || packedB->dtype != d.dtype))
    throw std::invalid_argument("gemm: the packed B was packed for another product");
  if (d.sumB && d.n > 0) {
    if (!operands.sumB) throw std::invalid_argument("gemm: sumB is set but its output is missing");
    if (d.m == 0) sumColumnsOfB(d, b, static_cast<T*>(operands.sumB));  // no product runs
  }
  if (count == 0 || d.m == 0 || d.n == 0) return;
  const Kernels<T> kern{reinterpret_cast<GemmMicroKernel<T>*>(kernel_),
                        reinterpret_cast<GemmMicroKernelDirectA<T>*>(kernelDirectA_)};
  const GemmEpilogue& e = d.epilogue;
  Epilogue<T> epi0;
  epi0.fn = reinterpret_cast<GemmEpilogueKernel<T>*>(epilogueKernel(e));
  if (epi0.fn) {
    auto need = [](const void* p, const char* what) {
      if (!p) throw std::invalid_argument(fmt::format("gemm: the epilogue's {} is missing", what));
      return p;
    };
    if (e.bias) epi0.bias = static_cast<const T*>(need(operands.bias, "bias"));
    if (e.addend) epi0.addend = static_cast<const T*>(need(operands.addend, "addend"));
    if (e.mask != GemmMask::none)
      epi0.mask = static_cast<const unsigned char*>(need(operands.mask, "mask"));
    epi0.ldAddend = e.ldAddend;
    epi0.ldMask = e.ldMask;
    epi0.maskBytes = e.mask == GemmMask::nonzero ? 1 : static_cast<int64_t>(sizeof(T));
    epi0.scale = static_cast<T>(e.scale);
  }
  if (d.sumB) epi0.sumB = static_cast<T*>(operands.sumB);

  // Element offsets of batch item `index` (batch dimensions in row-major order).
  struct Offsets {
    int64_t a = 0, b = 0, c = 0, addend = 0, mask = 0;
  };
  auto offsets = [&](int64_t index) {
    Offsets o;
    for (size_t dim = d.batch.size(); dim-- > 0;) {
      const int64_t i = index % d.batch[dim];
      index /= d.batch[dim];
      o.a += i * d.strideA[dim];
      o.b += i * d.strideB[dim];
      o.c += i * d.strideC[dim];
      if (epi0.addend) o.addend += i * e.strideAddend[dim];
      if (epi0.mask) o.mask += i * e.strideMask[dim];
    }
    return o;
  };
  auto itemOf = [&](int64_t index) {
    const Offsets o = offsets(index);
    Epilogue<T> epi = epi0;
    if (epi.addend) epi.addend += o.addend;
    if (epi.mask) epi.mask += o.mask * epi.maskBytes;
    return batched::Item<T, Epilogue<T>>{a + o.a, b + o.b, c + o.c, epi};
  };
  auto item = [&](int64_t index, ThreadPool* inner, const PrefetchPlan& next) {
    const auto it = itemOf(index);
    product(config_, kern, d, it.a, it.b, it.c, it.epi, inner, next,
            count == 1 ? share : GemmPairShare::Side{}, packedB);
  };

  const int threads = pool.numThreads();
  // Whole products per thread when they share out evenly; else each one split.
  if (threads == 1 || (count >= threads && (count % threads == 0 || count >= 4 * threads))) {
    // Each thread takes runs of consecutive items; while it computes one, the operands
    // of the next are prefetched into L2 when both fit there with room to spare.
    const int64_t spanA = (d.transA ? d.k : d.m) * d.lda, spanB = (d.transB ? d.n : d.k) * d.ldb;
    const bool prefetch = static_cast<int64_t>(sizeof(T)) * (spanA + spanB) <= batched::kItemOperandBytes;
    // Small items pack B for a run of items (codegen/gemm_batched.h), unless they have so
    // few rows that B is read in place (codegen/gemm_small_m.h, in product()).
    bool fewRows = false;
    if constexpr (std::is_same_v<T, float>) fewRows = small_m::applies(d);
    const bool small = !packedB && !fewRows && batched::smallItems(config_, d);
    balancedChunks(pool, count, ceilDiv(count, 4 * threads), [&](int64_t b0, int64_t b1) {
      if (small) return batched::runItems<T>(config_, kern.packed, kern.direct, d, b0, b1, itemOf);
      for (int64_t i = b0; i < b1; ++i) {
        PrefetchPlan next;
        if (prefetch && i + 1 < b1) {
          const Offsets o = offsets(i + 1);
          next.begin[0] = reinterpret_cast<const char*>(a + o.a);
          next.bytes[0] = spanA * static_cast<int64_t>(sizeof(T));
          next.begin[1] = reinterpret_cast<const char*>(b + o.b);
          next.bytes[1] = spanB * static_cast<int64_t>(sizeof(T));
        }
        item(i, nullptr, next);
      }
    });
  } else {
    for (int64_t i = 0; i < count; ++i) item(i, &pool, {});
  }
}

void GemmEngine::run(const GemmDesc& desc, const void* a, const void* b, void* c,
                     ThreadPool* pool, const GemmEpilogueOperands& epi, GemmPairShare::Side share,
                     const GemmPackedB* packedB) const {
  desc.validate();
  if (desc.dtype != config_.dtype)
    throw std::invalid_argument(fmt::format("gemm: {} operands given to the {} engine",
                                            dtypeName(desc.dtype), dtypeName(config_.dtype)));
  ThreadPool& p = pool ? *pool : ThreadPool::global();
  if (desc.dtype == DType::f32)
    runTyped(desc, static_cast<const float*>(a), static_cast<const float*>(b), static_cast<float*>(c), p,
             epi, share, packedB);
  else
    runTyped(desc, static_cast<const double*>(a), static_cast<const double*>(b), static_cast<double*>(c), p,
             epi, share, packedB);
}

void gemm(const GemmDesc& desc, const void* a, const void* b, void* c, ThreadPool* pool,
          const GemmEpilogueOperands& epi, GemmPairShare::Side share, const GemmPackedB* packedB) {
  desc.validate();
  GemmEngine::host(desc.dtype).run(desc, a, b, c, pool, epi, share, packedB);
}

}  // namespace tgc::codegen
