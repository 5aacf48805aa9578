#include "runtime/launch_schedule.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

namespace tgc::runtime {

namespace {

bool touchesAny(const std::vector<int>& buffers, const std::unordered_set<int>& set) {
  return std::any_of(buffers.begin(), buffers.end(), [&](int b) { return set.count(b) > 0; });
}

bool touchesAny(const std::vector<int>& buffers, const std::vector<int>& others) {
  return std::any_of(buffers.begin(), buffers.end(), [&](int b) {
    return std::find(others.begin(), others.end(), b) != others.end();
  });
}

}  // namespace

PairSchedule pairGemms(const std::vector<LaunchAccess>& launches, const PairOptions& opts) {
  const size_t n = launches.size();
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::vector<int> partnerOf(n, -1);  // by launch index
  PairSchedule s;
  // Written / touched (read or written) by the launches strictly between the two.
  std::unordered_set<int> written, touched;
  for (size_t p = 0; p < n; ++p) {
    const int i = order[p];
    const LaunchAccess& first = launches[static_cast<size_t>(i)];
    if (first.flops <= 0 || partnerOf[static_cast<size_t>(i)] >= 0) continue;
    written.clear();
    touched.clear();
    size_t best = 0;
    bool bestSinks = false;
    double bestRatio = opts.maxFlopRatio;
    for (size_t q = p + 1; q < n && q <= p + static_cast<size_t>(opts.window); ++q) {
      const int j = order[q];
      const LaunchAccess& l = launches[static_cast<size_t>(j)];
      if (l.flops > 0 && partnerOf[static_cast<size_t>(j)] < 0 &&
          !touchesAny(l.reads, first.writes) && !touchesAny(l.writes, first.reads) &&
          !touchesAny(l.writes, first.writes)) {
        // The two may run at once; one of them must be able to move next to the other.
        const bool hoist = !touchesAny(l.reads, written) && !touchesAny(l.writes, touched);
        const bool sink = !touchesAny(first.reads, written) && !touchesAny(first.writes, touched);
        const double ratio = std::max(l.flops, first.flops) / std::min(l.flops, first.flops);
        if ((hoist || sink) && ratio < bestRatio) {  // the closest FLOPs; the nearest on a tie
          best = q;
          bestSinks = !hoist;
          bestRatio = ratio;
        }
      }
      written.insert(l.writes.begin(), l.writes.end());
      touched.insert(l.writes.begin(), l.writes.end());
      touched.insert(l.reads.begin(), l.reads.end());
    }
    if (best == 0) continue;
    const int j = order[best];
    partnerOf[static_cast<size_t>(i)] = j;
    partnerOf[static_cast<size_t>(j)] = i;
    ++s.pairs;
    if (bestSinks) {
      // The first moves down, just before its partner; the launch now at p is looked at next.
      order.erase(order.begin() + static_cast<std::ptrdiff_t>(p));
      order.insert(order.begin() + static_cast<std::ptrdiff_t>(best) - 1, i);
      --p;  // (wraps at 0; the loop's ++p undoes it)
    } else {
      order.erase(order.begin() + static_cast<std::ptrdiff_t>(best));
      order.insert(order.begin() + static_cast<std::ptrdiff_t>(p) + 1, j);
    }
  }
  // Moves keep every pair adjacent: a launch moves past whole pairs, and lands next to an
  // unpaired launch or between two pairs.
  std::vector<int> position(n);
  for (size_t q = 0; q < n; ++q) position[static_cast<size_t>(order[q])] = static_cast<int>(q);
  s.partner.assign(n, -1);
  for (size_t q = 0; q < n; ++q)
    if (const int o = partnerOf[static_cast<size_t>(order[q])]; o >= 0)
      s.partner[q] = position[static_cast<size_t>(o)];
  s.order = std::move(order);
  return s;
}

}  // namespace tgc::runtime
