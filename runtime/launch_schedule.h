// GEMM pairs: two independent GEMM launches run at the same time, one per thread.
//
// On the 2-core host one GEMM split over both threads reaches ~58-64% of the FMA peak, while
// two single-thread GEMMs side by side reach ~70% together (each thread keeps its own
// packed panels in its own L2, and there is no packing barrier). A training step has such
// pairs everywhere: dX = dY W^T and dW = X^T dY of every linear, Q/K/V projections.
//
// pairGemms looks at the launches in order; for each GEMM not yet paired it searches the
// next `window` launches for a GEMM of similar FLOPs, independent of it (neither writes
// what the other reads or writes), that can be brought next to it: either the later one
// moves up (it reads nothing the launches in between write, and writes nothing they read
// or write), or the earlier one moves down (the same test for it; e.g. a weight
// gradient's GEMM whose operand a kernel recomputes after the input gradient's GEMM).
// Each move is a legal reorder, and the two may then run at the same time. Sets are of
// logical buffers (slots), so views of one buffer count as the same buffer.
#pragma once

#include <vector>

namespace tgc::runtime {

struct LaunchAccess {
  std::vector<int> reads, writes;  // buffers (slot ids), in any order
  double flops = 0;                // > 0: a GEMM that may pair
};

struct PairSchedule {
  std::vector<int> order;    // new position -> original launch index
  // Per new position: the other half of its pair (a new position, always the adjacent
  // one), or -1.
  std::vector<int> partner;
  int pairs = 0;
};

struct PairOptions {
  int window = 16;         // how many launches ahead a partner may come from
  // The larger GEMM's FLOPs over the smaller's must stay below this: side by side, the
  // pair takes as long as the larger one. With one thread at ~73% of its peak and a split
  // GEMM at ~60% of two, a pair wins while the ratio is below ~1.5.
  double maxFlopRatio = 1.4;
};

PairSchedule pairGemms(const std::vector<LaunchAccess>& launches, const PairOptions& opts = {});

}  // namespace tgc::runtime
