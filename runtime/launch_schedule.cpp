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

}  // namespace

PairSchedule pairGemms(const std::vector<LaunchAccess>& launches, const PairOptions& opts) {
  const int n = static_cast<int>(launches.size());
  PairSchedule s;
  s.order.resize(static_cast<size_t>(n));
  std::iota(s.order.begin(), s.order.end(), 0);
  s.partner.assign(static_cast<size_t>(n), -1);
  std::unordered_set<int> written, touched;  // by the launches a candidate would move over
  for (int p = 0; p < n; ++p) {
    const LaunchAccess& first = launches[static_cast<size_t>(s.order[static_cast<size_t>(p)])];
    if (first.flops <= 0) continue;
    written.clear();
    touched.clear();
    int best = -1;
    double bestRatio = opts.maxFlopRatio;
    for (int q = p; q < n && q <= p + opts.window; ++q) {
      const LaunchAccess& l = launches[static_cast<size_t>(s.order[static_cast<size_t>(q)])];
      if (q > p && l.flops > 0 && !touchesAny(l.reads, written) && !touchesAny(l.writes, touched)) {
        const double ratio = std::max(l.flops, first.flops) / std::min(l.flops, first.flops);
        if (ratio < bestRatio) {  // the closest FLOPs; the nearest on a tie
          best = q;
          bestRatio = ratio;
        }
      }
      written.insert(l.writes.begin(), l.writes.end());
      touched.insert(l.writes.begin(), l.writes.end());
      touched.insert(l.reads.begin(), l.reads.end());
    }
    if (best < 0) continue;
    const int moved = s.order[static_cast<size_t>(best)];
    s.order.erase(s.order.begin() + best);
    s.order.insert(s.order.begin() + p + 1, moved);
    s.partner[static_cast<size_t>(p)] = p + 1;
    s.partner[static_cast<size_t>(p) + 1] = p;
    ++s.pairs;
    ++p;  // the partner is taken
  }
  return s;
}

}  // namespace tgc::runtime
