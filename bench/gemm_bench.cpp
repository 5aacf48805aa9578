// GEMM throughput of tgc against OpenBLAS (cblas_sgemm), side by side in one process, at
// the Transformer's shapes, and against the machine's measured FMA peak.
//
//   gemm_bench [--threads N] [--runs R] [--min-ms T] [--shapes all|transformer|quick|batched|step]
//              [--shape MxNxK[:flags]] [--no-blas] [--cold] [--alt kc=K,mc=M,nc=N] [--huge-operands]
//              [--clock wall|cpu] [--dtype f32|f64] [--settle-ms S] [--epilogue] [--best]
//
// Each figure is the median of R runs; a run repeats the product until it has taken at
// least T ms. tgc and OpenBLAS runs alternate, so a noisy neighbour hurts both alike, and
// each run starts S ms (default 200) after the previous one ended, once the other
// library's threads have stopped spinning.
// --clock cpu times with the process's CPU time divided by the thread count instead of
// the wall clock: what the wall time would be on idle cores, for a machine shared with
// other jobs (time spent spinning or waiting in either library still counts).
// --shapes step: the single products of the small preset's training step, with their
// transposes and bias-gradient column sums, and their total time weighted by how many of
// each the step runs.
// --shape MxNxK[:flags] runs that one product instead of a set (flags: any of a = A
// transposed, b = B transposed, s = sumB; e.g. 256x8000x1024:as), for profiling one shape.
// --alt kc=256,mc=72,nc=2048 runs a second tgc engine with those blocking parameters as
// the peer instead of OpenBLAS (its own JIT, alternating runs, no settle pauses): an A/B
// of the blocking in one process.
// --no-blas times tgc alone (no OpenBLAS runs, no settle pauses): for perf record and for
// several copies of the bench at once.
// --huge-operands puts A, B and C on 2 MiB pages (madvise(MADV_HUGEPAGE)), as a runtime
// arena that asked for them would.
// --cold writes 64 MiB before every timed call (not timed), so that each call reads its
// operands from DRAM, as a training step's GEMMs do, instead of from L3.
// --best takes the fastest of the R runs instead of their median: on a machine shared
// with other jobs, the run they disturbed least (many short runs, e.g. --runs 41 --min-ms 5
// --no-blas, resolve differences of a point or two that the median does not).
// --epilogue times tgc alone at the same shapes with a bias + ReLU epilogue
// (codegen/gemm_epilogue.h) against the plain product, and against the plain product
// followed by a separate bias + ReLU pass over C (what an unfused graph runs).
// On an AVX-512 host the program re-executes itself with OPENBLAS_CORETYPE=SkylakeX
// unless that variable is already set, so OpenBLAS uses its AVX-512 kernel.
#include <cblas.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fmt/format.h>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codegen/gemm.h"
#include "codegen/jit.h"
#include "support/thread_pool.h"

namespace {

using tgc::DType;
using tgc::ThreadPool;
using namespace tgc::codegen;
using Clock = std::chrono::steady_clock;

struct Options {
  int threads = ThreadPool::defaultNumThreads();
  int runs = 7;
  double minMs = 40;
  std::string shapes = "transformer";
  bool cpuClock = false;
  bool f64 = false;
  int settleMs = 200;
  bool epilogue = false;
  std::string shape;     // --shape: one product, "MxNxK[:flags]"
  bool noBlas = false;   // --no-blas
  std::string alt;       // --alt: blocking of a second tgc engine, the peer
  bool cold = false;     // --cold
  bool best = false;     // --best
};

// cfg with --alt's "key=value,..." applied (kc, mc, nc, directA: the largest n read with
// A unpacked); exits on a malformed string.
GemmKernelConfig withAlt(GemmKernelConfig cfg, const std::string& alt) {
  size_t pos = 0;
  while (pos < alt.size()) {
    const size_t end = std::min(alt.find(',', pos), alt.size());
    const std::string item = alt.substr(pos, end - pos);
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const long long v = eq == std::string::npos ? 0 : std::atoll(item.c_str() + eq + 1);
    if (key == "kc") cfg.kc = v;
    else if (key == "mc") cfg.mc = v;
    else if (key == "nc") cfg.nc = v;
    else if (key == "directA") cfg.directAMaxN = v;
    else {
      fmt::print(stderr, "gemm_bench: --alt wants kc=, mc=, nc=, directA= items, got '{}'\n", item);
      std::exit(2);
    }
    pos = end + 1;
  }
  try {
    cfg.validate();
  } catch (const std::exception& e) {
    fmt::print(stderr, "gemm_bench: --alt {}: {}\n", alt, e.what());
    std::exit(2);
  }
  return cfg;
}

// Seconds on the chosen clock (see --clock).
double now(const Options& opts) {
  if (!opts.cpuClock) return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (ts.tv_sec + ts.tv_nsec * 1e-9) / opts.threads;
}

struct Case {
  std::string name;
  int64_t batch, m, n, k;
  bool transA = false, transB = false;
  bool sumB = false;  // tgc also sums op(B)'s columns (GemmDesc::sumB); OpenBLAS does not
  int count = 1;      // products of this shape per training step (--shapes step)
};

// "MxNxK[:flags]" (--shape) as one case; exits on a malformed string.
Case parseShape(const std::string& text) {
  Case c{text, 1, 0, 0, 0};
  const size_t colon = text.find(':');
  const std::string dims = text.substr(0, colon);
  char x1 = 0, x2 = 0;
  long long m = 0, n = 0, k = 0;
  int used = 0;
  if (std::sscanf(dims.c_str(), "%lld%c%lld%c%lld%n", &m, &x1, &n, &x2, &k, &used) != 5 || x1 != 'x' ||
      x2 != 'x' || used != static_cast<int>(dims.size()) || m < 1 || n < 1 || k < 1) {
    fmt::print(stderr, "gemm_bench: --shape wants MxNxK[:flags], got '{}'\n", text);
    std::exit(2);
  }
  c.m = m, c.n = n, c.k = k;
  for (char f : colon == std::string::npos ? std::string() : text.substr(colon + 1)) {
    if (f == 'a') c.transA = true;
    else if (f == 'b') c.transB = true;
    else if (f == 's') c.sumB = true;
    else {
      fmt::print(stderr, "gemm_bench: --shape flags are a (A^T), b (B^T), s (sumB); got '{}'\n", f);
      std::exit(2);
    }
  }
  c.name = fmt::format("{}x{}x{}{}{}{}", m, n, k, c.transA ? " A^T" : "", c.transB ? " B^T" : "",
                       c.sumB ? " +sumB" : "");
  return c;
}

std::vector<Case> casesFor(const std::string& which) {
  std::vector<Case> cs;
  if (which.rfind("shape:", 0) == 0) return {parseShape(which.substr(6))};
  if (which == "batched") {  // the batched products alone, for quick A/B runs
    cs.push_back({"64 x (128x128x64)", 64, 128, 128, 64});
    cs.push_back({"64 x (128x64x128) B^T", 64, 128, 64, 128, false, true});
    cs.push_back({"16 x (512x512x64) A^T", 16, 512, 512, 64, true, false});
    cs.push_back({"128x128x64 (one item, hot)", 1, 128, 128, 64});  // the first, in cache
    return cs;
  }
  if (which == "step") {
    // The single products of the small preset's training step (B=16 x 64 tokens, d_model
    // 256, FFN 1024, vocabulary 8000), as `tgc run` issues them: forward x W, dX = dY W^T,
    // dW = X^T dY with the bias gradient summed from the packed dY (sumB). The epilogues
    // (bias, ReLU, masks) are left out.
    auto add = [&](int count, int64_t m, int64_t n, int64_t k, bool ta, bool tb, bool sumB) {
      cs.push_back({fmt::format("{}x{}x{}{}{}{} x{}", m, n, k, ta ? " A^T" : "", tb ? " B^T" : "",
                                sumB ? " +sumB" : "", count),
                    1, m, n, k, ta, tb, sumB, count});
    };
    add(36, 1024, 256, 256, false, false, false);  // attention projections, forward
    add(36, 1024, 256, 256, false, true, false);   // their dX
    add(36, 256, 256, 1024, true, false, true);    // their dW and bias gradient
    add(6, 1024, 1024, 256, false, false, false);  // FFN linear1
    add(6, 1024, 256, 1024, false, false, false);  // FFN linear2
    add(6, 1024, 1024, 256, false, true, false);   // dH of linear2
    add(6, 1024, 256, 1024, false, true, false);   // dX of linear1
    add(6, 256, 1024, 1024, true, false, true);    // dW of linear1
    add(6, 1024, 256, 1024, true, false, true);    // dW of linear2
    add(1, 1024, 8000, 256, false, false, false);  // generator projection (logits)
    add(1, 1024, 256, 8000, false, true, false);   // its dA (dY W^T, K = vocabulary)
    add(1, 256, 8000, 1024, true, false, true);    // its dW and bias gradient
    return cs;
  }
  std::vector<int64_t> tokens = which == "quick" ? std::vector<int64_t>{512} : std::vector<int64_t>{512, 1024, 2048};
  for (int64_t t : tokens) {
    cs.push_back({fmt::format("{}x512x512", t), 1, t, 512, 512});
    cs.push_back({fmt::format("{}x2048x512", t), 1, t, 2048, 512});
    cs.push_back({fmt::format("{}x512x2048", t), 1, t, 512, 2048});
  }
  cs.push_back({"64 x (128x128x64)", 64, 128, 128, 64});
  if (which == "all") {
    // The backward pass's products: dX = dY W^T and dW = X^T dY.
    cs.push_back({"1024x512x2048 B^T", 1, 1024, 512, 2048, false, true});
    cs.push_back({"512x2048x1024 A^T", 1, 512, 2048, 1024, true, false});
    cs.push_back({"64 x (128x64x128) B^T", 64, 128, 64, 128, false, true});
    cs.push_back({"1000x1000x1000", 1, 1000, 1000, 1000});
  }
  return cs;
}

// Appends the seconds per call of fn, averaged over a run of at least opts.minMs.
//
// Both the warm-up (as long as the timed run) and the timed run are loops that end on the
// clock, not a count guessed from one call: after the settle pause or another library's
// run the first calls are slow (cold caches, cores the host has just handed back), and a
// count taken from one slow call left a timed window of a few milliseconds. With OpenBLAS
// between tgc's runs, 64 x (128x128x64) measured 27-38% of peak that way, 55-60% now
// (60-66% without OpenBLAS in the process's loop).
void timeIt(const Options& opts, const std::function<void()>& fn, std::vector<double>& samples) {
  const double warmS = std::max(opts.minMs, 1.0) / 1e3, minS = opts.minMs / 1e3;
  const double w0 = now(opts);
  do fn();  // warm-up: packing buffers, JIT, OpenBLAS threads, the caches
  while (now(opts) - w0 < warmS);
  if (opts.cold) {  // each call timed alone, after the caches were overwritten
    static std::vector<char> evict(size_t{64} << 20);
    double total = 0;
    int64_t reps = 0;
    do {
      for (size_t i = 0; i < evict.size(); i += 64) evict[i] = static_cast<char>(evict[i] + 1);
      const double t = now(opts);
      fn();
      total += now(opts) - t;
      ++reps;
    } while (total < minS);
    samples.push_back(total / static_cast<double>(reps));
    return;
  }
  int64_t reps = 0;
  const double start = now(opts);
  double elapsed = 0;
  do {
    fn();
    ++reps;
    elapsed = now(opts) - start;
  } while (elapsed < minS);
  samples.push_back(elapsed / static_cast<double>(reps));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The figure of a set of runs' times: their median, or with --best the fastest.
double pick(const Options& opts, const std::vector<double>& v) {
  return opts.best ? *std::min_element(v.begin(), v.end()) : median(v);
}

// A loop of independent vector FMAs, JIT-compiled for the host: enough accumulators to
// cover the FMA latency on every FMA pipe. Returns GFLOP/s on `threads` threads at once.
double measureFmaPeak(Jit& jit, ThreadPool& pool, int threads, bool cpuClock) {
  const int lanes = jit.target().vectorBits() / 32;
  const int accs = jit.target().vectorRegisters() - 4;
  static int serial = 0;
  const std::string name = fmt::format("tgc_fma_peak_{}", serial++);
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto mod = std::make_unique<llvm::Module>(name, *ctx);
  llvm::IRBuilder<> b(*ctx);
  auto* vt = llvm::FixedVectorType::get(b.getFloatTy(), lanes);
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), {b.getInt64Ty(), b.getPtrTy()}, false),
                                    llvm::Function::ExternalLinkage, name, *mod);
  auto* entry = llvm::BasicBlock::Create(*ctx, "entry", fn);
  auto* loop = llvm::BasicBlock::Create(*ctx, "loop", fn);
  auto* exit = llvm::BasicBlock::Create(*ctx, "exit", fn);
  b.SetInsertPoint(entry);
  b.CreateBr(loop);
  b.SetInsertPoint(loop);
  auto* i = b.CreatePHI(b.getInt64Ty(), 2);
  std::vector<llvm::PHINode*> phis;
  std::vector<llvm::Value*> acc;
  auto* x = llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(lanes), llvm::ConstantFP::get(b.getFloatTy(), 0.9999999));
  auto* y = llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(lanes), llvm::ConstantFP::get(b.getFloatTy(), 1e-7));
  for (int a = 0; a < accs; ++a) {
    phis.push_back(b.CreatePHI(vt, 2));
    acc.push_back(phis.back());
  }
  for (int u = 0; u < 4; ++u)
    for (int a = 0; a < accs; ++a) acc[a] = b.CreateIntrinsic(llvm::Intrinsic::fma, {vt}, {acc[a], x, y});
  auto* next = b.CreateAdd(i, b.getInt64(1));
  b.CreateCondBr(b.CreateICmpULT(next, fn->getArg(0)), loop, exit);
  i->addIncoming(b.getInt64(0), entry);
  i->addIncoming(next, loop);
  for (int a = 0; a < accs; ++a) {
    phis[a]->addIncoming(llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(lanes),
                                                        llvm::ConstantFP::get(b.getFloatTy(), 1.0 + a)),
                         entry);
    phis[a]->addIncoming(acc[a], loop);
  }
  b.SetInsertPoint(exit);
  llvm::Value* sum = acc[0];
  for (int a = 1; a < accs; ++a) sum = b.CreateFAdd(sum, acc[a]);
  b.CreateStore(sum, fn->getArg(1));
  b.CreateRetVoid();
  jit.addModule(std::move(mod), std::move(ctx));
  auto* kernel = jit.lookupAs<void(int64_t, float*)>(name);

  const int64_t iters = 20'000'000;
  std::vector<double> best(threads, 0);
  for (int rep = 0; rep < 5; ++rep)
    pool.runOnThreads(threads, [&](int t) {
      alignas(64) float out[16];
      timespec c0, c1;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
      auto t0 = Clock::now();
      kernel(iters, out);
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
      if (cpuClock) s = (c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) * 1e-9;
      best[t] = std::max(best[t], 2.0 * lanes * accs * 4 * iters / s / 1e9);
    });
  double total = 0;
  for (double g : best) total += g;
  return total;
}

void blasGemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
              int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda,
              b, ldb, 0.0f, c, ldc);
}
void blasGemm(bool ta, bool tb, int m, int n, int k, const double* a, int lda, const double* b, int ldb,
              double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0, a, lda,
              b, ldb, 0.0, c, ldc);
}

// --huge-operands: A, B and C on 2 MiB pages (transparent huge pages asked for with
// madvise), as a runtime arena that asked for them would give; else the allocator's pages.
// --skew-operands: the same placement on 4 KiB pages (what is left is the skew below).
bool gHugeOperands = false, gSkewOperands = false;
template <class T>
struct OperandAllocator {
  using value_type = T;
  OperandAllocator() = default;
  template <class U>
  OperandAllocator(const OperandAllocator<U>&) {}
  // Each operand starts a different number of cache lines into its first page (an arena's
  // operands sit at arbitrary 64-byte offsets; all at 2 MiB boundaries, A, B and C would
  // start in the same cache sets). The block's start is kept just before the operand.
  T* allocate(size_t n) {
    if (!gHugeOperands && !gSkewOperands) return std::allocator<T>().allocate(n);
    const size_t kPage = gHugeOperands ? size_t{2} << 20 : 4096;
    static int serial = 0;
    const size_t offset = 64 * (1 + (17 * serial++) % 61);
    const size_t bytes = (offset + n * sizeof(T) + kPage - 1) / kPage * kPage;
    char* p = static_cast<char*>(std::aligned_alloc(kPage, bytes));
    if (!p) throw std::bad_alloc();
    if (gHugeOperands) madvise(p, bytes, MADV_HUGEPAGE);
    reinterpret_cast<char**>(p + offset)[-1] = p;
    return reinterpret_cast<T*>(p + offset);
  }
  void deallocate(T* p, size_t n) {
    if (gHugeOperands || gSkewOperands) std::free(reinterpret_cast<char**>(p)[-1]);
    else std::allocator<T>().deallocate(p, n);
  }
  bool operator==(const OperandAllocator&) const { return true; }
};
template <class T>
using Operand = std::vector<T, OperandAllocator<T>>;

template <class T, class A>
void fill(std::vector<T, A>& v, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-1, 1);
  for (auto& x : v) x = static_cast<T>(d(rng));
}

// The table of shapes for element type T; returns the ratios tgc / OpenBLAS.
template <class T>
std::vector<double> runShapes(const Options& opts, ThreadPool& pool, double peak) {
  const DType dtype = sizeof(T) == 4 ? DType::f32 : DType::f64;
  const GemmEngine& engine = GemmEngine::host(dtype);
  const auto& cfg = engine.config();
  fmt::print("tgc kernel {} (kc {}, mc {}, nc {}, unpacked A for n <= {})\n\n", cfg.name(), cfg.kc, cfg.mc, cfg.nc,
             cfg.directAMaxN);
  // --alt: the peer is a second engine with other blocking, compiled by its own JIT.
  std::unique_ptr<Jit> altJit;
  std::unique_ptr<GemmEngine> alt;
  if (!opts.alt.empty()) {
    altJit = std::make_unique<Jit>(JitOptions::fromEnv());
    alt = std::make_unique<GemmEngine>(*altJit, withAlt(cfg, opts.alt));
    fmt::print("peer: tgc {} with kc {}, mc {}, nc {} (--alt {})\n\n", alt->config().name(), alt->config().kc,
               alt->config().mc, alt->config().nc, opts.alt);
  }
  // "runs": the slowest and fastest of tgc's runs as % of peak, so that a reader sees how
  // far the host moved the figure it picked.
  fmt::print("{:<30} {:>12} {:>14} {:>12} {:>10} {:>10} {:>10}\n", "shape (batch x MxNxK)", "tgc GFLOP/s",
             alt ? "alt GF/s" : "OpenBLAS GF/s", alt ? "tgc/alt" : "tgc/OpenBLAS", "tgc/peak", "runs", "max|diff|");
  std::vector<double> ratios;
  struct {
    double flops = 0, tgcS = 0, blasS = 0;  // weighted by Case::count
  } total;
  for (const Case& c : casesFor(opts.shapes)) {
    GemmDesc d = GemmDesc::contiguous(dtype, c.m, c.n, c.k, c.transA, c.transB);
    if (c.batch > 1) d.addBatch(c.batch);
    d.sumB = c.sumB;
    Operand<T> a(c.batch * c.m * c.k), b(c.batch * c.k * c.n), ct(c.batch * c.m * c.n), co(c.batch * c.m * c.n);
    std::vector<T> sums(c.n);
    GemmEpilogueOperands sumOut;
    sumOut.sumB = sums.data();
    fill(a, 1);
    fill(b, 2);
    auto tgcRun = [&] { engine.run(d, a.data(), b.data(), ct.data(), &pool, sumOut); };
    auto blasOne = [&](int64_t i) {
      blasGemm(c.transA, c.transB, static_cast<int>(c.m), static_cast<int>(c.n), static_cast<int>(c.k),
               a.data() + i * c.m * c.k, static_cast<int>(d.lda), b.data() + i * c.k * c.n, static_cast<int>(d.ldb),
               co.data() + i * c.m * c.n, static_cast<int>(d.ldc));
    };
    // Batched products: OpenBLAS gets the better of its own threading per product and
    // one single-threaded product per thread (how frameworks drive it).
    auto blasLoop = [&] {
      for (int64_t i = 0; i < c.batch; ++i) blasOne(i);
    };
    auto blasSplit = [&] {
      pool.parallelFor(c.batch, [&](int64_t b0, int64_t b1) {
        for (int64_t i = b0; i < b1; ++i) blasOne(i);
      });
    };
    // After a call OpenBLAS's threads keep spinning for a while (its THREAD_TIMEOUT, about
    // 0.1 s) and would take a core from whatever runs next: let every run settle first.
    auto settle = [&] { std::this_thread::sleep_for(std::chrono::milliseconds(opts.settleMs)); };
    auto altRun = [&] { alt->run(d, a.data(), b.data(), co.data(), &pool, sumOut); };
    std::vector<double> st, so, ss;
    for (int r = 0; r < opts.runs; ++r) {
      if (alt) {
        timeIt(opts, tgcRun, st);
        timeIt(opts, altRun, so);
        continue;
      }
      if (opts.noBlas) {
        timeIt(opts, tgcRun, st);
        continue;
      }
      settle();
      timeIt(opts, tgcRun, st);
      settle();
      timeIt(opts, blasLoop, so);
      if (c.batch > 1) {
        openblas_set_num_threads(1);
        settle();
        timeIt(opts, blasSplit, ss);
        openblas_set_num_threads(opts.threads);
      }
    }
    if (opts.noBlas && !alt) blasLoop();  // once, for the max|diff| check
    double tgcS = pick(opts, st), blasS = opts.noBlas && !alt ? tgcS : pick(opts, so);
    if (!ss.empty()) blasS = std::min(blasS, pick(opts, ss));
    double diff = 0;
    for (size_t i = 0; i < ct.size(); ++i) diff = std::max(diff, std::abs(double(ct[i]) - double(co[i])));
    const double flops = 2.0 * c.batch * c.m * c.n * c.k;
    const double gt = flops / tgcS / 1e9, go = flops / blasS / 1e9;
    ratios.push_back(gt / go);
    total.flops += c.count * flops;
    total.tgcS += c.count * tgcS;
    total.blasS += c.count * blasS;
    const auto [fastS, slowS] = std::minmax_element(st.begin(), st.end());
    const std::string runs = fmt::format("{:.0f}-{:.0f}%", 100 * flops / *slowS / 1e9 / peak,
                                         100 * flops / *fastS / 1e9 / peak);
    fmt::print("{:<30} {:>12.1f} {:>14.1f} {:>12.2f} {:>9.0f}% {:>10} {:>10.1e}\n", c.name, gt, go, gt / go,
               100 * gt / peak, runs, diff);
    std::fflush(stdout);
  }
  if (opts.shapes == "step")
    fmt::print("\nthe step's {:.1f} GFLOP of products at these rates: tgc {:.1f} ms ({:.1f} GFLOP/s, {:.0f}% of "
               "peak), {} {:.1f} ms ({:.1f} GFLOP/s)\n",
               total.flops / 1e9, total.tgcS * 1e3, total.flops / total.tgcS / 1e9,
               100 * total.flops / total.tgcS / 1e9 / peak, alt ? "alt" : "OpenBLAS", total.blasS * 1e3,
               total.flops / total.blasS / 1e9);
  return ratios;
}

// --epilogue: the cost of a bias + ReLU epilogue, fused and as a separate pass.
template <class T>
void runEpilogues(const Options& opts, ThreadPool& pool) {
  const DType dtype = sizeof(T) == 4 ? DType::f32 : DType::f64;
  const GemmEngine& engine = GemmEngine::host(dtype);
  fmt::print("{:<30} {:>10} {:>10} {:>12} {:>12} {:>14}\n", "shape (batch x MxNxK)", "plain ms",
             "fused ms", "separate ms", "fused/plain", "fused/separate");
  for (const Case& c : casesFor(opts.shapes)) {
    GemmDesc plain = GemmDesc::contiguous(dtype, c.m, c.n, c.k, c.transA, c.transB);
    if (c.batch > 1) plain.addBatch(c.batch);
    GemmDesc fused = plain;
    fused.epilogue.bias = true;
    fused.epilogue.activation = GemmActivation::relu;
    std::vector<T> a(c.batch * c.m * c.k), b(c.batch * c.k * c.n), ct(c.batch * c.m * c.n), bias(c.n);
    fill(a, 1);
    fill(b, 2);
    fill(bias, 3);
    GemmEpilogueOperands ops;
    ops.bias = bias.data();
    auto plainRun = [&] { engine.run(plain, a.data(), b.data(), ct.data(), &pool); };
    auto fusedRun = [&] { engine.run(fused, a.data(), b.data(), ct.data(), &pool, ops); };
    auto separateRun = [&] {
      plainRun();
      const int64_t rows = c.batch * c.m;
      pool.parallelFor(rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          T* row = ct.data() + r * c.n;
          for (int64_t j = 0; j < c.n; ++j) row[j] = std::max(row[j] + bias[j], T(0));
        }
      });
    };
    std::vector<double> sp, sf, ss;
    for (int r = 0; r < opts.runs; ++r) {
      timeIt(opts, plainRun, sp);
      timeIt(opts, fusedRun, sf);
      timeIt(opts, separateRun, ss);
    }
    const double p = pick(opts, sp), f = pick(opts, sf), s = pick(opts, ss);
    fmt::print("{:<30} {:>10.3f} {:>10.3f} {:>12.3f} {:>12.3f} {:>14.3f}\n", c.name, p * 1e3, f * 1e3, s * 1e3,
               f / p, f / s);
    std::fflush(stdout);
  }
}

int run(const Options& opts) {
  Jit jit(JitOptions::fromEnv());
  ThreadPool pool(opts.threads);
  fmt::print("host: {} ({}-bit vectors), {} threads, {}\n", jit.target().cpu, jit.target().vectorBits(),
             opts.threads, opts.f64 ? "f64 (cblas_dgemm)" : "f32 (cblas_sgemm)");
  if (opts.epilogue) {
    if (opts.f64)
      runEpilogues<double>(opts, pool);
    else
      runEpilogues<float>(opts, pool);
    return 0;
  }
  openblas_set_num_threads(opts.threads);
  const char* coreEnv = std::getenv("OPENBLAS_CORETYPE");
  fmt::print("OpenBLAS: {} core {}, OPENBLAS_CORETYPE={}, {} threads\n", OPENBLAS_VERSION,
             openblas_get_corename(), coreEnv ? coreEnv : "(unset)", openblas_get_num_threads());

  const double peak1 = measureFmaPeak(jit, pool, 1, opts.cpuClock);
  const double peak32 = measureFmaPeak(jit, pool, opts.threads, opts.cpuClock);
  // FMAs on doubles run at the same rate on half as many lanes.
  const double peak = opts.f64 ? peak32 / 2 : peak32;
  fmt::print("measured FMA peak ({} clock, f32): {:.1f} GFLOP/s on 1 thread, {:.1f} GFLOP/s on {} threads{}\n",
             opts.cpuClock ? "cpu" : "wall", peak1, peak32, opts.threads,
             opts.f64 ? fmt::format(" (f64: {:.1f})", peak) : "");

  std::vector<double> ratios = opts.f64 ? runShapes<double>(opts, pool, peak) : runShapes<float>(opts, pool, peak);
  double geo = 0;
  for (double r : ratios) geo += std::log(r);
  fmt::print("\ngeometric mean tgc/OpenBLAS: {:.2f}\n", std::exp(geo / ratios.size()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opts;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        fmt::print(stderr, "gemm_bench: {} needs a value\n", arg);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--threads") {
      opts.threads = std::max(1, std::atoi(value().c_str()));
    } else if (arg == "--runs") {
      opts.runs = std::max(1, std::atoi(value().c_str()));
    } else if (arg == "--min-ms") {
      opts.minMs = std::max(1.0, std::atof(value().c_str()));
    } else if (arg == "--shapes") {
      opts.shapes = value();
      if (opts.shapes != "all" && opts.shapes != "transformer" && opts.shapes != "quick" &&
          opts.shapes != "batched" && opts.shapes != "step") {
        fmt::print(stderr, "gemm_bench: --shapes must be all, transformer, quick, batched or step\n");
        return 2;
      }
    } else if (arg == "--shape") {
      opts.shape = value();
      parseShape(opts.shape);  // exits when malformed
    } else if (arg == "--alt") {
      opts.alt = value();
    } else if (arg == "--huge-operands") {
      gHugeOperands = true;
    } else if (arg == "--skew-operands") {
      gSkewOperands = true;
    } else if (arg == "--no-blas") {
      opts.noBlas = true;
    } else if (arg == "--cold") {
      opts.cold = true;
    } else if (arg == "--best") {
      opts.best = true;
    } else if (arg == "--epilogue") {
      opts.epilogue = true;
    } else if (arg == "--settle-ms") {
      opts.settleMs = std::max(0, std::atoi(value().c_str()));
    } else if (arg == "--dtype") {
      std::string t = value();
      if (t != "f32" && t != "f64") {
        fmt::print(stderr, "gemm_bench: --dtype must be f32 or f64\n");
        return 2;
      }
      opts.f64 = t == "f64";
    } else if (arg == "--clock") {
      std::string c = value();
      if (c != "wall" && c != "cpu") {
        fmt::print(stderr, "gemm_bench: --clock must be wall or cpu\n");
        return 2;
      }
      opts.cpuClock = c == "cpu";
    } else {
      fmt::print(stderr,
                 "usage: gemm_bench [--threads N] [--runs R] [--min-ms T] [--shapes all|transformer|quick|batched|step] "
                 "[--shape MxNxK[:abs]] [--no-blas] [--cold] [--huge-operands] [--alt kc=K,mc=M,nc=N] [--clock wall|cpu] [--dtype f32|f64] [--settle-ms S] [--best] "
                 "[--epilogue]\n");
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  if (!opts.shape.empty()) opts.shapes = "shape:" + opts.shape;
  // OpenBLAS picks its kernel when it loads; on AVX-512 hosts ask for the AVX-512 one.
  if (!std::getenv("OPENBLAS_CORETYPE") && TargetSpec::host().hasFeature("avx512f")) {
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: go on with the default
  }
  try {
    return run(opts);
  } catch (const std::exception& e) {
    fmt::print(stderr, "gemm_bench: {}\n", e.what());
    return 1;
  }
}
