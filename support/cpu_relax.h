// The pause instruction of a spin-wait loop (eases the core's pipeline and the sibling
// hyperthread while a thread polls an atomic).
#pragma once

namespace tgc {

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace tgc
