// Executables of graphs with generated kernels: results against the interpreter (serial and
// thread-split launches, poisoned freed memory), the stateful mode that updates parameters
// in place, and the kernel cache.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ir/interpreter.h"
#include "ir/parser.h"
#include "runtime/executable.h"
#include "runtime/param_store.h"
#include "tests/runtime/exec_test_util.h"

namespace tgc {
namespace {

using runtime::Executable;

void expectMatches(const Graph& g, runtime::ExecOptions opts, double tol = 1e-5) {
  auto exe = Executable::compile(g, opts);
  auto in = testing::randomInputs(g, 21);
  auto want = Interpreter().run(g, in);
  std::vector<Tensor> got;
  for (int rep = 0; rep < 2; ++rep) {  // a second run reuses the arena and the first's outputs
    const void* first = got.empty() ? nullptr : got[0].data();
    exe->run(in, got);
    ASSERT_EQ(got.size(), want.size());
    if (first) {
      EXPECT_EQ(got[0].data(), first) << "run " << rep << ": the outputs were allocated again";
    }
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(testing::allClose(got[i], want[i], tol, tol))
          << "output " << g.outputs()[i]->name() << ", run " << rep;
  }
}

// Big enough that the elementwise and row kernels are split over the threads.
constexpr const char* kMlp = R"(graph @mlp {
  %x = input() : f32[256,96]
  %w1 = input() : f32[96,160]
  %b1 = input() : f32[160]
  %w2 = input() : f32[160,33]
  %h = matmul(%x, %w1) : f32[256,160]
  %hb = add(%h, %b1) : f32[256,160]
  %r = relu(%hb) : f32[256,160]
  %o = matmul(%r, %w2) : f32[256,33]
  %p = softmax(%o) : f32[256,33]
  %flat = reshape(%p) {shape=[8448]} : f32[8448]
  %s = reduce_sum(%flat) {axes=[0]} : f32[]
  return %p, %s, %x
}
)";

TEST(ExecGraph, MlpMatchesTheInterpreter) {
  auto g = parseGraph(kMlp);
  expectMatches(*g, testing::testExecOptions());
}

TEST(ExecGraph, MlpMatchesOnOneThreadAndWithPoisonedFreedMemory) {
  auto g = parseGraph(kMlp);
  auto opts = testing::testExecOptions();
  opts.numThreads = 1;
  expectMatches(*g, opts);
  opts.numThreads = 3;  // more threads than cores: uneven chunks
  opts.poisonFreed = true;
  expectMatches(*g, opts);
}

TEST(ExecGraph, IdenticalKernelsAreCompiledOnce) {
  // Three exp launches of one shape (GEMMs between them, so no fusion can merge them) and
  // a neg: two kernels to compile, four launches with their own names.
  auto g = parseGraph(R"(graph @rep {
  %x = input() : f32[7,9]
  %w = input() : f32[9,9]
  %a = exp(%x) : f32[7,9]
  %b = matmul(%a, %w) : f32[7,9]
  %c = exp(%b) : f32[7,9]
  %d = matmul(%c, %w) : f32[7,9]
  %e = exp(%d) : f32[7,9]
  %f = matmul(%e, %w) : f32[7,9]
  %y = neg(%f) : f32[7,9]
  return %y
}
)");
  auto exe = Executable::compile(*g, testing::testExecOptions());
  EXPECT_EQ(exe->stats().kernels, 4);
  EXPECT_EQ(exe->stats().distinctKernels, 2);
  auto names = exe->launchNames();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), 7u) << "names not unique";
  expectMatches(*g, testing::testExecOptions());
}

TEST(ExecGraph, MissingAndMistypedInputsAreErrors) {
  auto g = parseGraph(kMlp);
  auto exe = Executable::compile(*g, testing::testExecOptions());
  auto in = testing::randomInputs(*g, 1);
  in.erase("w2");
  EXPECT_THROW(exe->run(in), std::invalid_argument);
  in = testing::randomInputs(*g, 1);
  in.insert_or_assign("b1", Tensor(TensorType{DType::f32, {161}}));
  EXPECT_THROW(exe->run(in), std::invalid_argument);
}

// Subnormals are flushed to zero in compiled CPU graphs (support/float_mode.h), in the
// generated kernels and in the GEMMs on every thread; the interpreter keeps them.
TEST(ExecGraph, SubnormalsAreFlushedToZero) {
  if (std::getenv("TGC_KEEP_SUBNORMALS")) GTEST_SKIP() << "TGC_KEEP_SUBNORMALS is set";
#if !defined(__x86_64__)
  GTEST_SKIP() << "flushing is x86-64's MXCSR";
#endif
  auto g = parseGraph(R"(graph @tiny {
  %a = input() : f32[64,64]
  %b = input() : f32[64,64]
  %p = mul(%a, %b) : f32[64,64]
  %m = matmul(%a, %b) : f32[64,64]
  return %p, %m
}
)");
  Tensor a(TensorType{DType::f32, {64, 64}}), b(TensorType{DType::f32, {64, 64}});
  for (int64_t i = 0; i < a.numel(); ++i) {
    a.setF(i, 1e-20);
    b.setF(i, 1e-20);  // each product 1e-40: subnormal in f32
  }
  const std::map<std::string, Tensor> in{{"a", a}, {"b", b}};
  const auto want = Interpreter().run(*g, in);
  EXPECT_GT(want[0].getF(0), 0.0);
  for (int threads : {1, 2}) {
    auto opts = testing::testExecOptions();
    opts.numThreads = threads;
    const auto got = Executable::compile(*g, opts)->run(in);
    for (int64_t i = 0; i < 64 * 64; ++i) {
      ASSERT_EQ(got[0].getF(i), 0.0) << i;
      ASSERT_EQ(got[1].getF(i), 0.0) << i;
    }
  }
}

// ---- the stateful mode --------------------------------------------------------------------

// An optimizer-like step: new.p = p - 0.1 * m' reads p element by element in the launch
// that writes it (in place, no copy); new.m is written after m's last reader (in place);
// q still reads p after new.q is computed, so new.q is copied back at the end.
constexpr const char* kStep = R"(graph @step {
  %p = input() {role="param"} : f32[300,7]
  %m = input() {role="state"} : f32[300,7]
  %q = input() {role="param"} : f32[5]
  %g = input() : f32[300,7]
  %c9 = constant() {value=[0.9]} : f32[]
  %c1 = constant() {value=[0.1]} : f32[]
  %mm = mul(%m, %c9) : f32[300,7]
  %gg = mul(%g, %c1) : f32[300,7]
  %new.m = add(%mm, %gg) : f32[300,7]
  %u = mul(%new.m, %c1) : f32[300,7]
  %new.p = sub(%p, %u) : f32[300,7]
  %new.q = mul(%q, %c9) : f32[5]
  %qq = add(%q, %new.q) : f32[5]
  %loss = reduce_sum(%qq) {axes=[0]} : f32[]
  return %loss, %new.p, %new.m, %new.q
}
)";

// kStep's executable in the stateful mode, and its state p, m, q taken from `ref`.
std::unique_ptr<Executable> compileStateful(const Graph& g, bool poison) {
  auto opts = testing::testExecOptions();
  opts.updateInPlace = true;
  opts.poisonFreed = poison;
  return Executable::compile(g, opts);
}
runtime::ParamStore stepState(const std::map<std::string, Tensor>& ref) {
  runtime::ParamStore store;
  for (const char* name : {"p", "m", "q"}) store.set(name, ref.at(name));
  return store;
}

TEST(ExecState, UpdatesInPlaceOverTwoStepsLikeTheInterpreter) {
  auto g = parseGraph(kStep);
  for (bool poison : {false, true}) {
    SCOPED_TRACE(poison ? "poisoned" : "plain");
    auto exe = compileStateful(*g, poison);
    EXPECT_EQ(exe->stateNames(), (std::vector<std::string>{"p", "m", "q"}));
    EXPECT_EQ(exe->stats().stateInPlace, 2);
    EXPECT_EQ(exe->stats().stateCopies, 1);

    auto ref = testing::randomInputs(*g, 8);
    runtime::ParamStore store = stepState(ref);
    const void* pData = store.at("p").data();
    const std::map<std::string, Tensor> batch{{"g", ref.at("g")}};
    for (int step = 0; step < 2; ++step) {
      auto want = Interpreter().run(*g, ref);
      auto got = exe->runStep(store, batch);
      ASSERT_EQ(got.size(), 1u);
      EXPECT_TRUE(testing::allClose(got.at("loss"), want[0], 1e-5, 1e-5)) << "step " << step;
      EXPECT_TRUE(testing::allClose(store.at("p"), want[1], 1e-6, 1e-6)) << "step " << step;
      EXPECT_TRUE(testing::allClose(store.at("m"), want[2], 1e-6, 1e-6)) << "step " << step;
      EXPECT_TRUE(testing::allClose(store.at("q"), want[3], 1e-6, 1e-6)) << "step " << step;
      ref.insert_or_assign("p", want[1]);
      ref.insert_or_assign("m", want[2]);
      ref.insert_or_assign("q", want[3]);
    }
    EXPECT_EQ(store.at("p").data(), pData) << "the store's tensor was replaced, not updated";
  }
}

// A step with an output that is not state (u, as a model's logits): runStep into a kept
// `out` writes over the tensors there instead of allocating new ones each step.
TEST(ExecState, RunStepIntoOutWritesOverTheLastStepsOutputs) {
  std::string text = kStep;
  const std::string ret = "return %loss,";
  text.replace(text.find(ret), ret.size(), "return %loss, %u,");
  auto g = parseGraph(text);
  for (bool poison : {false, true}) {
    SCOPED_TRACE(poison ? "poisoned" : "plain");
    auto exe = compileStateful(*g, poison);
    auto ref = testing::randomInputs(*g, 9);
    runtime::ParamStore store = stepState(ref);
    const std::map<std::string, Tensor> batch{{"g", ref.at("g")}};
    // A stale value under u's name (of u's type), one of another type under loss's, and a
    // name that is no output: written over, replaced, dropped.
    std::map<std::string, Tensor> out;
    out.emplace("u", Tensor(TensorType{DType::f32, {300, 7}}));
    out.emplace("loss", Tensor(TensorType{DType::f64, {}}));
    out.emplace("stray", Tensor(TensorType{DType::f32, {2}}));
    const void* uData = out.at("u").data();
    for (int step = 0; step < 2; ++step) {
      auto want = Interpreter().run(*g, ref);
      exe->runStep(store, batch, out);
      ASSERT_EQ(out.size(), 2u) << "step " << step;
      EXPECT_EQ(out.at("u").data(), uData) << "step " << step << ": u was allocated again";
      EXPECT_EQ(out.at("loss").dtype(), DType::f32);
      EXPECT_TRUE(testing::allClose(out.at("loss"), want[0], 1e-5, 1e-5)) << "step " << step;
      EXPECT_TRUE(testing::allClose(out.at("u"), want[1], 1e-6, 1e-6)) << "step " << step;
      ref.insert_or_assign("p", want[2]);
      ref.insert_or_assign("m", want[3]);
      ref.insert_or_assign("q", want[4]);
    }
  }
}

TEST(ExecState, PlainRunIsRefusedForAStatefulExecutable) {
  auto g = parseGraph(kStep);
  auto opts = testing::testExecOptions();
  opts.updateInPlace = true;
  auto exe = Executable::compile(*g, opts);
  EXPECT_THROW(exe->run(testing::randomInputs(*g, 1)), std::logic_error);
  runtime::ParamStore empty;
  EXPECT_THROW(exe->runStep(empty, {}), std::invalid_argument);
}

// ---- the kernel cache ---------------------------------------------------------------------

TEST(ExecCache, SecondCompileLoadsEveryKernelAndNoCacheLoadsNone) {
  auto g = parseGraph(kMlp);
  testing::ScratchDir dir("exec-cache");
  runtime::ExecOptions opts;
  opts.cacheDir = dir.str();
  auto first = Executable::compile(*g, opts);
  EXPECT_GT(first->stats().distinctKernels, 0);
  EXPECT_EQ(first->stats().cacheHits, 0);
  auto second = Executable::compile(*g, opts);
  EXPECT_EQ(second->stats().jitCompiles, second->stats().distinctKernels);
  EXPECT_EQ(second->stats().cacheHits, second->stats().distinctKernels);
  opts.useCache = false;
  auto third = Executable::compile(*g, opts);
  EXPECT_EQ(third->stats().cacheHits, 0);
  auto in = testing::randomInputs(*g, 2);
  auto a = second->run(in), b = third->run(in);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].bitwiseEqual(b[i]));
}

}  // namespace
}  // namespace tgc
