// The clock of the kernel micro-benchmarks under tests/: wall time, or the process's CPU time
// (all its threads), which other load on a shared machine disturbs less.
#pragma once

#include <chrono>
#include <ctime>

namespace tgc::bench {

inline double seconds(bool cpu) {
  if (!cpu)
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace tgc::bench
