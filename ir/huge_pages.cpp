#include "ir/huge_pages.h"

#include <cstdlib>

#include <sys/mman.h>

#include "ir/env_flag.h"

namespace tgc {

bool hugePagesEnabled() {
  static const bool enabled = !envFlag("TGC_NO_HUGE_PAGES");
  return enabled;
}

void* allocateLarge(size_t bytes, bool hugePages) {
  const bool huge = hugePages && bytes >= kHugePageBytes;
  void* p = nullptr;
  if (posix_memalign(&p, huge ? kHugePageBytes : 64, bytes == 0 ? 64 : bytes) != 0) return nullptr;
#if defined(MADV_HUGEPAGE)
  if (huge) madvise(p, bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);  // a hint
#endif
  return p;
}

}  // namespace tgc
