#include "codegen/gemm_pair_share.h"

#include <chrono>

#include <sched.h>

#include "support/cpu_relax.h"

namespace tgc::codegen {

namespace {

// A wait that polls: after kSpinPolls polls it yields the core on each one (as
// ThreadPool's waits do): when other processes keep the cores busy, the thread waited for
// may be the one that needs this core.
class Backoff {
 public:
  void poll() {
    if (++polls_ < kSpinPolls)
      cpuRelax();
    else
      sched_yield();
  }
  void reset() { polls_ = 0; }

 private:
  static constexpr int kSpinPolls = 200;
  int polls_ = 0;
};

// Runs the blocks of `o` that nobody has taken yet; returns how many.
int64_t runBlocks(GemmPairShare::Offer& o) {
  int64_t ran = 0;
  for (int64_t i = o.next.fetch_add(1, std::memory_order_relaxed); i < o.blocks;
       i = o.next.fetch_add(1, std::memory_order_relaxed), ++ran)
    o.run(o.context, i);
  return ran;
}

}  // namespace

// The offer is published, and withdrawn before it goes out of scope. A helper announces
// itself in visitors_ before it reads offer_, and leaves after its last block; all of
// these are sequentially consistent, so once share() has withdrawn the offer and then read
// no visitors, no helper holds the offer or runs one of its blocks.
// The offer is withdrawn also when a block throws (a guard), so no helper finds it
// after share() has unwound; its blocks not yet taken are then not run.
void GemmPairShare::share(int side, Offer& offer) {
  struct Withdraw {
    GemmPairShare& s;
    int side;
    Offer& offer;
    ~Withdraw() {
      offer.next.store(offer.blocks);  // after a throw, a helper stops after its block
      s.offer_[side].store(nullptr);
      Backoff wait;
      while (s.visitors_[side].load() != 0) wait.poll();
    }
  } withdraw{*this, side, offer};
  offer_[side].store(&offer);
  runBlocks(offer);
}

void GemmPairShare::finish(int side) { finished_[side].store(true, std::memory_order_release); }

double GemmPairShare::help(int side) {
  const int other = 1 - side;
  double seconds = 0;
  Backoff idle;
  while (!finished_[other].load(std::memory_order_acquire)) {
    if (!offer_[other].load(std::memory_order_relaxed)) {  // packing, or between panels
      idle.poll();
      continue;
    }
    int64_t ran = 0;
    {
      struct Visit {  // leaves also when a block throws, so the owner does not wait for ever
        std::atomic<int>& visitors;
        explicit Visit(std::atomic<int>& v) : visitors(v) { visitors.fetch_add(1); }
        ~Visit() { visitors.fetch_sub(1); }
      } visit(visitors_[other]);
      if (Offer* o = offer_[other].load()) {
        const auto t0 = std::chrono::steady_clock::now();
        ran = runBlocks(*o);
        if (ran) seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    }
    if (ran)
      idle.reset();
    else
      idle.poll();  // every block taken: the owner is finishing its last one
  }
  return seconds;
}

}  // namespace tgc::codegen
