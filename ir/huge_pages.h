// Large buffers on 2 MiB pages (transparent huge pages, where the kernel's THP mode is
// "madvise" as on Debian, or "always").
//
// A training step streams over every parameter, Adam moment and gradient (base: 1.6 GB of
// AdamW traffic a step) and over an arena of hundreds of MiB; in 4 KiB pages each 2 MiB of
// that is 512 TLB entries. Tensors, the arena and the GEMM packing buffers on 2 MiB pages:
// base bf16 step 869-898 ms against 891-912 (median 879 against 909), base fp32 1610-1731
// against 1706-1783, in alternating runs on a 2-vCPU Zen 4, the same resident size
// (bench/README.md, "What each switch buys"; TGC_NO_HUGE_PAGES=1 for the 4 KiB runs).
#pragma once

#include <cstddef>

namespace tgc {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Whether large buffers ask for 2 MiB pages: yes unless TGC_NO_HUGE_PAGES=1 (A/B runs).
bool hugePagesEnabled();

// At least `bytes` of memory, 64-byte aligned, released with std::free; nullptr when out of
// memory. With `huge`, from 2 MiB up it is 2 MiB aligned and its whole 2 MiB stretches are
// marked MADV_HUGEPAGE (the tail stays in 4 KiB pages, so no page is touched that the buffer
// does not use: the resident size is the same).
void* allocateLarge(size_t bytes, bool huge = hugePagesEnabled());

}  // namespace tgc
