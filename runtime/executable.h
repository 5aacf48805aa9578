// A graph compiled for the CPU: kernels, a memory plan and the launch order.
//
// Executable::compile walks the graph in order and asks codegen::classify how each node
// runs: generated kernels (lowered to Kernel IR, emitted as LLVM IR, JIT-compiled; the
// on-disk cache makes a second compile of the same graph fast), the packed GEMM for
// matmul, views for reshape (the operand's memory under a new shape), hand-written library
// kernels for the fused ops (codegen/library.h; each result its own buffer), and inputs and
// constants placed by the runtime. Every intermediate buffer lives in one arena at an
// offset from the memory plan (runtime/memory_plan.h); graph inputs are read where the
// caller keeps them (zero-copy); outputs are copied out of the arena at the end of a run.
// Before the first launch, run and runStep scan the integer inputs that reach an index
// operand (runtime/index_bounds.h): an index outside its table or a target outside the
// logits is an IRError naming the op, the input, the position and the value, since the
// kernels themselves would read it as zeros.
//
// Training steps run in the stateful mode (ExecOptions::updateInPlace): each output named
// new.X whose input X has the same type is written into X's own storage (a ParamStore
// tensor), so parameters and optimizer state are updated in place with no copy when X is
// read for the last time no later than new.X is written. Otherwise new.X goes to the arena
// and is copied into X after the last launch (counted in ExecStats::stateCopies).
//
// GEMM pairs (ExecOptions::gemmPairs, with a pool of 2 threads): an independent GEMM of
// similar FLOPs is moved next to an earlier one (runtime/launch_schedule.h) and the two run
// at the same time, one per thread, each on the single-thread path. They share one step of
// the memory plan, so nothing live in one of them shares bytes with the other's buffers.
// The thread that finishes its GEMM first takes blocks of rows of the other's
// (ExecOptions::gemmPairHelp, codegen/gemm_pair_share.h), so the two end together.
//
// Debug mode (ExecOptions::poisonFreed, or TGC_POISON=1): the arena starts filled with NaN
// bytes, and after each launch (after both launches of a pair) every arena buffer that died
// there is overwritten with NaN (floats) or 0xA5 bytes (integers), so a wrong memory plan
// fails tests loudly.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "codegen/gemm.h"
#include "codegen/lower.h"
#include "ir/graph.h"
#include "ir/tensor.h"
#include "runtime/gradcheck.h"

namespace tgc {
class ThreadPool;
}

namespace tgc::runtime {

class ParamStore;

// Weights packed for the GEMMs (codegen::GemmEngine::packB), keyed by their memory and the
// product's B shape and blocking, shared by the executables of one ExecOptions.
class PackedWeights {
 public:
  // The panels of b for d, packed now unless an executable packed them already; null where
  // packB is (the product does not pack B).
  std::shared_ptr<const codegen::GemmPackedB> get(const codegen::GemmDesc& d, const void* b);
  // The weights hold new values: pack again on next use.
  void clear();

 private:
  std::mutex mutex_;
  std::map<std::tuple<const void*, int, int64_t, int64_t, int64_t, bool, int64_t, int64_t>,
           std::shared_ptr<const codegen::GemmPackedB>>
      packed_;
};

struct ExecOptions {
  bool useCache = true;   // the on-disk kernel cache (codegen/jit.h)
  std::string cacheDir;   // empty: $TGC_CACHE_DIR, $XDG_CACHE_HOME/tgc or ~/.cache/tgc
  bool poisonFreed = false;
  int numThreads = 0;     // 0: the process-wide pool (TGC_NUM_THREADS, else every core)
  bool updateInPlace = false;  // the stateful mode: new.X is written into X (runStep)
  // Inference: every input of role "param" holds the same values in every run (the
  // caller compiles again for new ones), so a GEMM whose B is one packs it at the first
  // run and keeps it (codegen::GemmEngine::packB).
  bool constantParams = false;
  // ... and where given, the executables compiled with it share the packed B of one weight
  // (a decoder compiled for many batch sizes packs each weight once, not once per shape).
  std::shared_ptr<PackedWeights> packedWeights;
  // Inputs the caller hands over to be written: a dynamic_update_slice of one (or of the
  // result of one, in a chain) writes in the caller's tensor itself when nothing reads the
  // value after it, and an output computed there is not copied into `out` (its entry keeps
  // what it held; outputInDonatedInput tells which). A key/value cache updated one position
  // a step then moves one row, not the whole cache.
  std::vector<std::string> donatedInputs;
  bool profile = false;   // time every launch (Executable::profile)
  bool fuse = true;       // generic fusion (codegen/fusion_groups.h); TGC_NO_FUSION=1: off
  // The forward fusion passes (passes/fusion.h) on the graph before it is compiled; off where
  // the caller ran its own pipeline (tgc run), so that what runs is what it printed.
  bool forwardFusions = true;
  // With a pool of exactly 2 threads: independent GEMMs of similar FLOPs run side by side,
  // one per thread (runtime/launch_schedule.h); TGC_NO_GEMM_PAIRS=1: off.
  bool gemmPairs = true;
  // The half of a pair that finishes first helps the other; TGC_NO_GEMM_PAIR_HELP=1: off.
  bool gemmPairHelp = true;

  // Defaults, with TGC_NO_CACHE=1 turning the cache off, TGC_POISON=1 poisoning,
  // TGC_PROFILE=1 profiling, TGC_NO_FUSION=1 one kernel per node, TGC_NO_GEMM_PAIRS=1 no
  // GEMM pairs and TGC_NO_GEMM_PAIR_HELP=1 no help between their halves.
  static ExecOptions fromEnv();
};

struct ExecStats {
  int kernels = 0;  // generated kernel launches
  // Kernel nodes computed inside another node's launch: a kernel's (never in memory) or a
  // GEMM's (a bias gradient summed as the GEMM packs B, runtime/gemm_epilogue.h; a weight's
  // cast to bf16 rounded as it packs B, runtime/gemm_cast_fold.h)
  int fusedNodes = 0;
  int castsInGemms = 0;  // of those, the casts to bf16 folded into GEMMs
  int distinctKernels = 0;  // compiled kernels: launches of identical kernels share one
  int gemms = 0;    // GEMM launches
  int gemmPairs = 0;  // pairs of GEMM launches run at the same time, one per thread
  int libraryCalls = 0;  // library kernel launches (fused ops, codegen/library.h)
  int views = 0;    // reshapes that share their operand's memory
  // reduce_sum over a batched matmul's batch dims, computed as one GEMM (weight gradients)
  int foldedReductions = 0;
  int64_t arenaBytes = 0;     // the planned arena
  int64_t bufferBytes = 0;    // every arena buffer added up: the arena without reuse
  int64_t peakLiveBytes = 0;  // the most bytes live at one launch (a bound on any plan)
  int64_t constantBytes = 0;  // constants materialized at compile time
  int64_t cacheHits = 0;      // distinct kernels loaded from the on-disk cache
  int64_t jitCompiles = 0;    // distinct kernels added to the JIT (hits included)
  double compileSeconds = 0;  // lowering, planning and code generation (or cache loads)
  int stateInPlace = 0;       // new.X written straight into X's storage
  int stateCopies = 0;        // new.X computed elsewhere and copied into X after the run
};

// The kernels of a graph as Executable::compile lowers them: one per fusion group, or per
// Kernel node without `fuse` (dead nodes removed), names made unique with suffixes _2, _3,
// ... For dumps (`tgc compile --emit=kernel|llvm|asm`).
std::vector<codegen::kir::Kernel> lowerGraphKernels(const Graph& g,
                                                    bool fuse = ExecOptions::fromEnv().fuse);

class Executable {
 public:
  // Throws IRError naming the node for an op the CPU backend cannot run, and
  // codegen::JitError when LLVM fails.
  static std::unique_ptr<Executable> compile(const Graph& g,
                                             const ExecOptions& opts = ExecOptions::fromEnv());
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  // Runs on `inputs` (every graph input by name, with its exact type; read in place, not
  // copied) and returns the outputs in order. Not for stateful executables. One run at a
  // time: the arena belongs to the executable.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs);
  // The same, with the outputs written into `out`: a tensor already at an output's index
  // and of its type is written over in place, any other is replaced (see runStep below).
  void run(const std::map<std::string, Tensor>& inputs, std::vector<Tensor>& out);
  // The same with the inputs looked up in `inputs`, then in `more` (the parameters, say, so
  // that a caller need not copy them into one map with the data).
  void run(const std::map<std::string, Tensor>& inputs, const std::map<std::string, Tensor>& more,
           std::vector<Tensor>& out);

  // The stateful mode: `store` holds every state input (stateNames()), `batch` the other
  // inputs. The state tensors are updated in place; the other outputs are returned by
  // name (loss, metrics, grad_norm, lr for a training step).
  std::map<std::string, Tensor> runStep(ParamStore& store,
                                        const std::map<std::string, Tensor>& batch);
  // The same, with the outputs written into `out` (which then holds exactly them): a
  // tensor already there under an output's name and of its type is written over in place,
  // any other is replaced. A loop that keeps `out` from one step to the next allocates
  // nothing per step; fresh tensors cost page faults on every step (the small preset's
  // 32 MB logits: ~2,000 faults a step and the kernel zeroing the pages).
  void runStep(ParamStore& store, const std::map<std::string, Tensor>& batch,
               std::map<std::string, Tensor>& out);

  // Under ExecOptions::constantParams: the parameters hold new values from the next run on
  // (the B packed from them is dropped and packed again then).
  void paramsChanged();

  // Whether output i is computed in a donated input (ExecOptions::donatedInputs) and so
  // left out of run()'s `out`.
  bool outputInDonatedInput(size_t i) const;

  // Inputs X paired with an output new.X (empty unless updateInPlace).
  const std::vector<std::string>& stateNames() const;
  const ExecStats& stats() const;
  // Launch names in order ("gemm:<value>" for GEMMs, "lib:<first result>" for library
  // kernels), for tests and profiles.
  std::vector<std::string> launchNames() const;

  // The step each launch runs in, in launch order: a pair of GEMMs run side by side shares
  // one step (so one memory-plan slot in time); every other launch has its own.
  std::vector<int> launchSteps() const;

  // With ExecOptions::profile: wall time per launch summed over the runs so far, in
  // launch order. A launch of a GEMM pair is timed on its own thread; stepSeconds is the
  // wall time of the pair as a whole (both halves hold it), for totals that count it once.
  struct LaunchTime {
    std::string name;
    bool gemm = false;
    double seconds = 0;
    int64_t runs = 0;
    int partner = -1;  // the index of the launch it ran beside, or -1
    double stepSeconds = 0;  // with a partner: the pair's wall time (else not needed)
  };
  std::vector<LaunchTime> profile() const;

  // The arena buffers, for tests of the plan: each graph value placed in the arena (views
  // share their operand's entry) with its byte range and live launches.

  struct ArenaBuffer {
    std::string value;
    int64_t offset = 0, bytes = 0;
    int first = 0, last = 0;
  };
  std::vector<ArenaBuffer> arenaBuffers() const;

  struct Impl;

 private:
  explicit Executable(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Gradient checking (runtime/gradcheck.h) through compiled code: the graph promoted to
// float64 (promoteToF64) and compiled once, then run for every evaluation.
GraphBackend cpuF64Backend(const ExecOptions& opts = ExecOptions::fromEnv());

}  // namespace tgc::runtime
