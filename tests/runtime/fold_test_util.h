// Helpers shared by the GEMM fold tests (bias-gradient and epilogue folds,
// runtime/gemm_epilogue.h): one graph text for several dtypes, and a compiled graph checked
// against the interpreter and its launch counts.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "runtime/executable.h"
#include "tests/runtime/exec_test_util.h"

namespace tgc::testing {

// The graph text with every "T" type prefix ("T[") made the given dtype, parsed.
inline std::unique_ptr<Graph> parseAs(std::string text, DType dt = DType::f32) {
  const std::string name(dtypeName(dt));
  for (size_t p = text.find("T["); p != std::string::npos; p = text.find("T[", p))
    text.replace(p, 1, name);
  return parseGraph(text);
}

struct LaunchCounts {
  int gemms, kernels;
};

// Compiles g with and without poisoned freed memory, checks every output against the
// interpreter on random inputs from `seed` (1e-12 in f64, 2e-5 in f32) and the launch counts.
inline void expectCompiledMatches(const Graph& g, LaunchCounts want, uint64_t seed,
                                  runtime::ExecOptions o = testExecOptions()) {
  auto in = randomInputs(g, seed);
  auto ref = Interpreter().run(g, in);
  const bool f64 = g.outputs()[0]->type().dtype == DType::f64;
  const double tol = f64 ? 1e-12 : 2e-5;
  for (bool poison : {false, true}) {
    SCOPED_TRACE(poison ? "poisoned" : "plain");
    o.poisonFreed = poison;
    auto exe = runtime::Executable::compile(g, o);
    EXPECT_EQ(exe->stats().gemms, want.gemms);
    EXPECT_EQ(exe->stats().kernels, want.kernels);
    auto got = exe->run(in);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(allClose(got[i], ref[i], tol, tol)) << "output " << i;
  }
}

}  // namespace tgc::testing
