// The floating-point mode of a thread (on x86-64, its MXCSR) and a guard that flushes
// subnormal floats to zero while it lives (FTZ: results; DAZ: operands).
//
// The CPU executables run under the guard: an FMA that meets a subnormal operand takes a
// microcode assist, and gradients that shrink into the subnormal
// range (below 1.2e-38 in f32) made the step that read them 5.5x slower (gpt.tg small, B 64,
// T 44, from random parameters: 1,960 ms a step kept, 357 ms flushed). Values that small are 0 to
// any training. The thread pool hands a job's mode to the workers that run it
// (support/thread_pool.h), so a parallel kernel runs in its caller's mode. TGC_KEEP_SUBNORMALS=1
// leaves the mode alone (for A/B runs). Elsewhere than x86-64 both are no-ops.
#pragma once

#include <cstdint>

namespace tgc {

// The calling thread's mode (its control bits; 0 where there is none to read), and setting it.
uint32_t floatMode();
void setFloatMode(uint32_t mode);

class FlushSubnormals {
 public:
  FlushSubnormals();
  ~FlushSubnormals();
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

 private:
  uint32_t saved_;
  bool active_;
};

}  // namespace tgc
