#include "support/float_mode.h"

#include <cstdlib>
#include <string_view>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace tgc {

namespace {

#if defined(__x86_64__)
constexpr uint32_t kFlushToZero = 0x8000;      // MXCSR.FTZ
constexpr uint32_t kDenormalsAreZero = 0x0040;  // MXCSR.DAZ
#endif

bool keepSubnormals() {
  static const bool keep = [] {
    const char* v = std::getenv("TGC_KEEP_SUBNORMALS");
    return v && *v && std::string_view(v) != "0";
  }();
  return keep;
}

}  // namespace

#if defined(__x86_64__)
// The control bits only: the low six are sticky exception flags, not a mode.
uint32_t floatMode() { return _mm_getcsr() & ~0x3Fu; }
void setFloatMode(uint32_t mode) { _mm_setcsr(mode); }
#else
uint32_t floatMode() { return 0; }
void setFloatMode(uint32_t) {}
#endif

FlushSubnormals::FlushSubnormals() : saved_(floatMode()), active_(!keepSubnormals()) {
#if defined(__x86_64__)
  if (active_) setFloatMode(saved_ | kFlushToZero | kDenormalsAreZero);
#endif
}

FlushSubnormals::~FlushSubnormals() {
  if (active_) setFloatMode(saved_);
}

}  // namespace tgc
