// What the CUDA emitter needs to know about a kernel before printing it (the mapping in
// codegen/cuda/cuda_emitter.h): which Vector loops can be spread over a block's threads,
// the reductions in them, where __syncthreads() is needed, and the launch geometry.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/cuda/cuda_emitter.h"
#include "codegen/kernel_ir.h"

namespace tgc::codegen::cuda {

// A local accumulated in a spread loop only through `acc = op(acc, e)` (or op(e, acc)).
struct Reduction {
  int var = -1;
  kir::BinaryOp op = kir::BinaryOp::Add;  // Add, Mul, Max or Min
};

struct SpreadLoop {
  std::vector<Reduction> reductions;
  // The loop stores a buffer the kernel also loads: other threads may read what it writes
  // (sync after) or still read what it overwrites (sync before).
  bool syncBefore = false;
  bool syncAfter = false;
};

struct KernelAnalysis {
  Mapping mapping = Mapping::ThreadPerIteration;
  LaunchGeometry launch;
  std::vector<bool> isLocal;  // per variable: assigned somewhere (not a loop variable)
  std::vector<bool> isRead;   // per variable: some expression reads it
  // Vector loops to spread (only used under BlockPerIteration, outside other spread loops).
  std::unordered_map<const kir::Stmt*, SpreadLoop> spread;
  std::vector<bool> loaded;  // per buffer: some expression loads it
  // ThreadPerElement: the perfect nest (its loops, outermost first, and the statements
  // inside), or two when the body is `if (c) nest else nest` (a last block of the
  // parallel range that is shorter); flatExtents: each level's largest extent.
  struct FlatNest {
    std::vector<const kir::Stmt*> loops;
    const std::vector<kir::StmtP>* body = nullptr;
  };
  std::vector<FlatNest> flat;
  const kir::Stmt* flatIf = nullptr;
  std::vector<int64_t> flatExtents;

  // A uniform store to `buffer` (done by thread 0) needs __syncthreads() around it.
  bool storeNeedsSync(int buffer) const { return loaded[buffer]; }
};

KernelAnalysis analyze(const kir::Kernel& k);

// The C++ literal of the identity of a reduction's combine for a type ("-0.0f" for f32 add).
std::string reductionIdentity(kir::BinaryOp op, DType type);

}  // namespace tgc::codegen::cuda
