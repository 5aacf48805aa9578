#include "runtime/memory_plan.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace tgc::runtime {

MemoryPlan planMemory(const std::vector<BufferLifetime>& buffers) {
  const size_t n = buffers.size();
  MemoryPlan plan;
  plan.offsets.assign(n, 0);
  int lastLaunch = 0;
  for (const BufferLifetime& b : buffers) {
    if (b.bytes < 0 || b.first < 0 || b.last < b.first)
      throw std::invalid_argument("planMemory: a buffer has a negative size or an empty lifetime");
    plan.totalBytes += alignedSize(b.bytes);
    lastLaunch = std::max(lastLaunch, b.last);
  }

  // Peak live bytes, from a sweep over the launches.
  std::vector<int64_t> delta(static_cast<size_t>(lastLaunch) + 2, 0);
  for (const BufferLifetime& b : buffers) {
    delta[static_cast<size_t>(b.first)] += alignedSize(b.bytes);
    delta[static_cast<size_t>(b.last) + 1] -= alignedSize(b.bytes);
  }
  int64_t live = 0;
  for (int64_t d : delta) plan.peakLiveBytes = std::max(plan.peakLiveBytes, live += d);

  // Largest first; equal sizes by start, so the order (and the plan) is deterministic.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].first < buffers[b].first;
  });

  struct Placed {
    int64_t begin, end;
  };
  std::vector<size_t> placed;  // buffer indices, in placement order
  std::vector<Placed> conflicts;
  for (size_t i : order) {
    const BufferLifetime& b = buffers[i];
    const int64_t size = alignedSize(b.bytes);
    if (size == 0) continue;  // offset 0; it occupies nothing
    conflicts.clear();
    for (size_t j : placed)
      if (livesOverlap(b, buffers[j]))
        conflicts.push_back({plan.offsets[j], plan.offsets[j] + alignedSize(buffers[j].bytes)});
    std::sort(conflicts.begin(), conflicts.end(),
              [](const Placed& x, const Placed& y) { return x.begin < y.begin; });
    // Best fit: the smallest gap between conflicting buffers that holds this one; else on
    // top of them all.
    int64_t best = -1, bestGap = 0, cursor = 0;
    for (const Placed& c : conflicts) {
      if (c.begin - cursor >= size && (best < 0 || c.begin - cursor < bestGap)) {
        best = cursor;
        bestGap = c.begin - cursor;
      }
      cursor = std::max(cursor, c.end);
    }
    plan.offsets[i] = best >= 0 ? best : cursor;
    plan.arenaBytes = std::max(plan.arenaBytes, plan.offsets[i] + size);
    placed.push_back(i);
  }
  return plan;
}

}  // namespace tgc::runtime
