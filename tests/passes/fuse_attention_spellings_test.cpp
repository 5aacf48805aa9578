// The spellings of attention in tests/lit/passes/fuse-attention-spellings.tg, of the norms in
// fuse-norms-spellings.tg and of GELU in fuse-activations-spellings.tg (whose RUN lines check what each fuses into): each graph, after
// its passes, gives the outputs of the graph as written on the interpreter, on random inputs
// (bool masks random with the first key always allowed, so that no row is fully masked).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "frontend/frontend.h"
#include "ir/interpreter.h"
#include "ir/verifier.h"
#include "passes/pass.h"
#include "passes/passes.h"

namespace tgc {
namespace {

const char* kFile = TGC_SOURCE_DIR "/tests/lit/passes/fuse-attention-spellings.tg";
const char* kNormsFile = TGC_SOURCE_DIR "/tests/lit/passes/fuse-norms-spellings.tg";
const char* kActivationsFile = TGC_SOURCE_DIR "/tests/lit/passes/fuse-activations-spellings.tg";

std::map<std::string, Tensor> randomInputs(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::map<std::string, Tensor> in;
  for (const Node* n : g.inputs()) {
    Tensor t(n->result()->type());
    const Shape& s = t.shape();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (t.dtype() == DType::boolean)
        t.setI(i, s.empty() || i % s.back() == 0 || rng() % 4 != 0);
      else
        t.setF(i, normal(rng));
    }
    in[n->result()->name()] = std::move(t);
  }
  return in;
}

int count(const Graph& g, std::initializer_list<OpKind> ops) {
  int n = 0;
  for (const auto& node : g.nodes())
    for (OpKind op : ops) n += node->op() == op;
  return n;
}

// Both graphs on the interpreter, in f64 and in their own dtype.
void expectSameOutputs(const Graph& written, const Graph& fused) {
  const auto in = randomInputs(written, 11);
  for (bool promote : {true, false}) {
    InterpreterOptions opts{.promote_to_f64 = promote};
    auto want = Interpreter(opts).run(written, in);
    auto got = Interpreter(opts).run(fused, in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t r = 0; r < want.size(); ++r)
      for (int64_t i = 0; i < want[r].numel(); ++i) {
        ASSERT_TRUE(std::isfinite(got[r].getF(i))) << i;
        ASSERT_NEAR(got[r].getF(i), want[r].getF(i), promote ? 1e-12 : 2e-5) << i;
      }
  }
}

// Each graph of `file` (at least `atLeast` of them), compiled as written and compiled then
// rewritten by `fuse`: check(name, fused) looks at the rewritten graph, then both run.
void forEachSpelling(const char* file, size_t atLeast, const std::function<void(Graph&)>& fuse,
                     const std::function<void(const std::string&, const Graph&)>& check) {
  const std::vector<std::string> graphs = compileModelFile(file).graph_names;
  ASSERT_GE(graphs.size(), atLeast);
  for (const std::string& name : graphs) {
    SCOPED_TRACE(name);
    ModelOptions o;
    o.graph = name;
    CompiledModel written = compileModelFile(file, o);
    CompiledModel fused = compileModelFile(file, o);
    fuse(*fused.graph);
    ASSERT_TRUE(verifyGraph(*fused.graph).empty());
    check(name, *fused.graph);
    expectSameOutputs(*written.graph, *fused.graph);
  }
}

TEST(FuseAttentionSpellings, EachFusesAndMatchesTheGraphAsWritten) {
  forEachSpelling(
      kFile, 12,
      [](Graph& g) {
        PassContext ctx;
        runCanonicalize(g, ctx);
        runFuseAttention(g, ctx);
      },
      [](const std::string&, const Graph& g) { EXPECT_EQ(count(g, {OpKind::FusedAttention}), 1); });
}

TEST(FuseNormsSpellings, EachFusesAndMatchesTheGraphAsWritten) {
  forEachSpelling(
      kNormsFile, 9,
      [](Graph& g) {
        PassContext ctx;
        runFuseNorms(g, ctx);
      },
      [](const std::string& name, const Graph& g) {
        const bool near = name.starts_with("near_");
        EXPECT_EQ(count(g, {OpKind::LayerNorm, OpKind::RmsNorm}), near ? 0 : 1);
        EXPECT_EQ(count(g, {OpKind::Rsqrt, OpKind::Sqrt}), near ? 1 : 0);
      });
}

TEST(FuseActivationsSpellings, EachFusesAndMatchesTheGraphAsWritten) {
  forEachSpelling(
      kActivationsFile, 9,
      [](Graph& g) {
        PassContext ctx;
        runFuseActivations(g, ctx);
      },
      [](const std::string& name, const Graph& g) {
        const bool near = name.starts_with("near_");
        const OpKind want = name.starts_with("silu_")      ? OpKind::Silu
                            : name.starts_with("sigmoid_") ? OpKind::Sigmoid
                                                           : OpKind::Gelu;
        if (near) {  // one transcendental op of the graph as written, and no activation op
          EXPECT_EQ(count(g, {OpKind::Gelu, OpKind::Silu}), 0);
          EXPECT_EQ(count(g, {OpKind::Tanh, OpKind::Erf, OpKind::Exp, OpKind::Sigmoid}), 1);
        } else {
          EXPECT_EQ(count(g, {want}), 1);
          EXPECT_EQ(count(g, {OpKind::Tanh, OpKind::Erf, OpKind::Exp}), 0);
        }
      });
}

}  // namespace
}  // namespace tgc
