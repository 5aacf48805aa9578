// Helpers for the CUDA runtime tests: tests that need a GPU skip visibly, naming why there
// is none ("no CUDA device: cannot load ... libcuda.so.1 ..."), so a run without a GPU
// shows exactly what was not proved.
#pragma once

#include <gtest/gtest.h>

#include "codegen/cuda/nvrtc.h"
#include "runtime/cuda/driver.h"

#define TGC_REQUIRE_CUDA_DEVICE()                                                \
  do {                                                                           \
    if (std::string why = ::tgc::runtime::cuda::noDeviceReason(); !why.empty()) \
      GTEST_SKIP() << why;                                                       \
  } while (0)

#define TGC_REQUIRE_NVRTC()                                                               \
  do {                                                                                    \
    if (std::string why = ::tgc::codegen::cuda::nvrtcUnavailableReason(); !why.empty()) \
      GTEST_SKIP() << "no NVRTC: " << why;                                                \
  } while (0)
