// Executable's state: its slots (where each buffer lives), its launches and Executable::Impl,
// shared by executable.cpp (compiling and planning) and executable_run.cpp (running).
#pragma once

#include <chrono>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "codegen/gemm.h"
#include "codegen/jit.h"
#include "codegen/library.h"
#include "runtime/executable.h"
#include "runtime/index_bounds.h"
#include "support/thread_pool.h"

namespace tgc::runtime {

namespace kir = codegen::kir;

// Where a buffer lives. Views share their operand's slot.
enum class SlotKind { Arena, Input, Constant, Alias, Output };

struct Slot {
  SlotKind kind = SlotKind::Arena;
  // Input: position in Impl::inputs; Constant: in Impl::constants; Alias: the slot whose
  // memory this one uses (new.X written into X's storage); Output: the result tensor (its
  // position in Impl::outputs) the value is computed in.
  int index = -1;
  int64_t offset = 0;  // Arena: from the memory plan; Alias: bytes into the aliased memory
  int64_t bytes = 0;
  DType dtype = DType::f32;
  std::string name;    // the graph value that owns the memory
  int first = -1;      // Arena: the launch that writes it
  int lastUse = -1;    // the last launch reading it (kEnd: read after the last launch)
};

struct Launch {
  enum class Kind { Kernel, Gemm, Library } kind = Kind::Kernel;
  std::string name;
  kir::KernelFn fn = nullptr;
  int64_t extent = 1;  // Kernel: the parallel extent
  int64_t grain = 1;   // Kernel: the smallest chunk of the parallel range per thread
  bool parallel = false;
  codegen::GemmDesc gemm;     // Gemm: slots are A, B, C
  bool gemmZeroK = false;     // an empty contraction: C is all zeros
  bool gemmConstantB = false;  // B is a parameter under ExecOptions::constantParams
  std::shared_ptr<const codegen::GemmPackedB> packedB;  // ... packed at the first run
  codegen::LibraryKernel library;  // Library: slots are the operands, then the results
  size_t libraryOperands = 0;
  bool updatesOperand = false;  // Library: dynamic_update_slice, which may write in place
  std::vector<int> slots;     // one per kernel buffer (Gemm: A, B, C)
  std::vector<bool> writes;   // per slot: written by the launch (else only read)
  int partner = -1;           // the launch of its GEMM pair (runs beside it), or -1
  std::vector<void*> ptrs;    // resolved at the start of each run
  std::vector<int> dying;     // arena slots last used here (poisoned after it)
  double seconds = 0;         // with ExecOptions::profile: time spent, over all runs
  double stepSeconds = 0;     // ... and the wall time of its pair (== seconds unpaired)
  int64_t runs = 0;
};

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

inline double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Executable::Impl {
  static constexpr int kEnd = std::numeric_limits<int>::max();

  ExecOptions opts;
  std::vector<std::unique_ptr<codegen::Jit>> jits;  // own the compiled kernels
  std::unique_ptr<ThreadPool> ownPool;
  ThreadPool* pool = nullptr;
  ThreadPool serial{1};  // each half of a GEMM pair runs on one thread (no workers: shared)

  std::vector<Slot> slots;
  std::vector<Launch> launches;
  std::vector<int> stepOf;  // per launch: its step (a GEMM pair shares one)
  std::vector<Tensor> constants;
  struct IO {
    std::string name;
    TensorType type;
    int slot = -1;
    bool bound = false;  // an output computed right in its result tensor, not copied there
  };
  std::vector<IO> inputs, outputs;
  std::vector<bool> outputIsState;  // per output: a new.X written back into X
  std::vector<bool> outputInDonated;  // per output: computed in a donated input's tensor
  struct StateCopy {
    int src, dst;
    int64_t bytes;
  };
  std::vector<StateCopy> copies;
  std::vector<std::string> stateNames;
  // Integer inputs used as indices (runtime/index_bounds.h), each with its input's position
  // in `inputs` as its slot; run and runStep check them before the first launch.
  std::vector<IndexBound> indexBounds;

  std::unique_ptr<void, AlignedFree> arena;
  std::vector<void*> slotPtr;
  ExecStats stats;

  void build(const Graph& g);
  void scheduleGemmPairs(std::vector<int>& loweredLaunch);
  // The step of a launch index; -1 (never used) and kEnd (read after the run) map to
  // themselves.
  int stepAt(int launch) const {
    return launch < 0 || launch == kEnd ? launch : stepOf[static_cast<size_t>(launch)];
  }
  void pairState(std::vector<codegen::LoweredKernel>& lowered,
                 const std::vector<int>& loweredLaunch);
  void placeUpdatesInPlace();
  void plan();
  void generateCode(std::vector<codegen::LoweredKernel>& lowered,
                    const std::vector<int>& loweredLaunch);
  void execute(const std::vector<void*>& inputPtrs, const std::vector<Tensor*>& results);
  // Runs with the inputs at `inputPtrs` and the outputs written into `results` (one per
  // output, state outputs excepted under skipState, in output order): a tensor of the
  // output's type is written over, any other is replaced.
  void runInto(const std::vector<void*>& inputPtrs, bool skipState, std::vector<Tensor>& results);
  // Throws IRError for the first index input outside its bound (one input's pointer each).
  void checkIndices(const std::vector<void*>& inputPtrs) const {
    for (const IndexBound& b : indexBounds)
      checkIndexBound(b, inputPtrs[static_cast<size_t>(b.slot)]);
  }
  void runKernel(Launch& l);
  void runGemm(Launch& l, ThreadPool* p, codegen::GemmPairShare::Side share = {});
  void poisonDying(const Launch& l);
};

}  // namespace tgc::runtime
