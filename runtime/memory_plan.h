// The memory plan: where each intermediate buffer of an executable lives in one arena.
//
// Launches run in a fixed order, so a buffer is live from the launch that writes it to the
// last launch that reads it (inclusive at both ends: a launch's operands and results are
// never placed on top of each other). Buffers whose live ranges do not intersect may share
// bytes. The planner places the largest buffers first, each at the lowest 64-byte aligned
// offset that fits between the buffers already placed that are live at the same time
// ("greedy by size", which packs Transformer graphs close to their peak live size).
// The executable numbers steps, not launches: the two launches of a GEMM pair run at the
// same time and share one step (runtime/launch_schedule.h), so their buffers never meet.
#pragma once

#include <cstdint>
#include <vector>

namespace tgc::runtime {

inline constexpr int64_t kArenaAlignment = 64;

struct BufferLifetime {
  int64_t bytes = 0;
  int first = 0;  // the step (launch index) that writes it
  int last = 0;   // the last step that reads it (>= first)
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // per buffer, a multiple of kArenaAlignment
  int64_t arenaBytes = 0;        // the arena's size
  int64_t totalBytes = 0;        // sum of all buffers (aligned): the size without reuse
  // The largest sum of (aligned) buffer sizes live at one launch: no plan can be smaller.
  int64_t peakLiveBytes = 0;
};

MemoryPlan planMemory(const std::vector<BufferLifetime>& buffers);

// True when the two buffers are live at some common launch.
inline bool livesOverlap(const BufferLifetime& a, const BufferLifetime& b) {
  return a.first <= b.last && b.first <= a.last;
}

// Rounds up to kArenaAlignment (a zero-byte buffer still takes no space).
inline int64_t alignedSize(int64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

}  // namespace tgc::runtime
