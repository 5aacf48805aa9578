// support/float_mode.h: the guard flushes subnormals to zero and restores the mode, and the
// thread pool runs a job's tasks in the submitting thread's mode.
#include "support/float_mode.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "support/thread_pool.h"

namespace tgc {
namespace {

// 1e-20 * 1e-20 = 1e-40, below f32's smallest normal (1.18e-38): subnormal, or 0 flushed.
float tinyProduct() {
  volatile float a = 1e-20f, b = 1e-20f;
  return a * b;
}

TEST(FloatMode, TheGuardFlushesSubnormalsAndRestoresTheMode) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the float mode is x86-64's MXCSR";
#endif
  if (std::getenv("TGC_KEEP_SUBNORMALS")) GTEST_SKIP() << "TGC_KEEP_SUBNORMALS is set";
  const uint32_t before = floatMode();
  EXPECT_GT(tinyProduct(), 0.0f);
  {
    const FlushSubnormals flush;
    EXPECT_EQ(tinyProduct(), 0.0f);
    volatile float sub = 1e-40f;  // a subnormal operand reads as 0 (DAZ)
    EXPECT_EQ(sub * 1e30f, 0.0f);
  }
  EXPECT_EQ(floatMode(), before);
  EXPECT_GT(tinyProduct(), 0.0f);
}

TEST(FloatMode, PoolTasksRunInTheSubmittersMode) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the float mode is x86-64's MXCSR";
#endif
  if (std::getenv("TGC_KEEP_SUBNORMALS")) GTEST_SKIP() << "TGC_KEEP_SUBNORMALS is set";
  ThreadPool pool(3);
  for (bool flushed : {true, false, true}) {
    std::vector<float> got(3, -1.0f);
    auto run = [&] { pool.runOnThreads(3, [&](int t) { got[static_cast<size_t>(t)] = tinyProduct(); }); };
    if (flushed) {
      const FlushSubnormals flush;
      run();
    } else {
      run();
    }
    for (float g : got) {
      if (flushed)
        EXPECT_EQ(g, 0.0f);
      else
        EXPECT_GT(g, 0.0f);
    }
  }
}

}  // namespace
}  // namespace tgc
