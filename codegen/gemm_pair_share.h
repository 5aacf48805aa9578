// Two products run side by side, one per thread (a GEMM pair: runtime/gemm_pairs.h). Each
// is sized to take as long as the other, but they never do exactly: their efficiencies
// differ, and the host slows one core and not the other. The thread that finishes first
// would then idle (6-8% of the pairs' thread time in the small training step). With a
// GemmPairShare it helps instead: while a product runs a packed panel of B, it offers the
// panel's blocks of rows, and the idle thread takes some of them.
//
// A block of rows writes its own part of C, over the panel's whole K in order, whichever
// thread runs it, so the results are the same bits as without the help.
#pragma once

#include <atomic>
#include <cstdint>

namespace tgc::codegen {

class GemmPairShare {
 public:
  // The work one product offers while one packed panel is current: blocks [0, blocks),
  // run(context, i) computes block i. Lives on the offering thread's stack.
  struct Offer {
    void (*run)(const void* context, int64_t block) = nullptr;
    const void* context = nullptr;
    int64_t blocks = 0;
    // On a cache line of its own: the helper's increments would otherwise bounce the line
    // of the owner's stack that holds it.
    alignas(64) std::atomic<int64_t> next{0};
  };

  // Which share, and which side of it, a product runs on (no share: not half of a pair).
  struct Side {
    GemmPairShare* share = nullptr;
    int side = 0;
  };

  // The product on `side` (0 or 1) runs the offer's blocks, the other side's thread taking
  // some when it has finished its own product. Returns when every block has run, and no
  // helper can touch the offer any more.
  void share(int side, Offer& offer);

  // The product on `side` has finished: no more offers come from it.
  void finish(int side);

  // Called on `side`'s thread once its own product has finished: runs blocks of the other
  // side's offers until that product finishes too. Returns the seconds spent running
  // blocks. The two sides must run at the same time (ThreadPool::runsSideBySide): help()
  // waits for the other side to finish.
  double help(int side);

 private:
  std::atomic<Offer*> offer_[2] = {nullptr, nullptr};
  std::atomic<int> visitors_[2] = {0, 0};  // helpers that may hold offer_[side]
  std::atomic<bool> finished_[2] = {false, false};
};

}  // namespace tgc::codegen
