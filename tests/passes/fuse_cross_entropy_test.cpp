// fuse-cross-entropy on the tiny Transformer's loss graph (models/lib/nn.tg's
// label_smoothed_cross_entropy, and cross_entropy through smoothing 0): the graph has one
// softmax_cross_entropy afterwards, and its loss and every parameter's gradient equal the
// unfused graph's in the interpreter; compiled for the CPU (library kernels) they equal the
// interpreter's to float32 accuracy.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "frontend/frontend.h"
#include "ir/interpreter.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "runtime/executable.h"
#include "tests/runtime/exec_test_util.h"

using namespace tgc;

namespace {

constexpr int64_t kVocab = 29;

CompiledModel tinyModel(double smoothing) {
  ModelOptions o;
  o.preset = "tiny";
  o.sets = {{"src_vocab", std::to_string(kVocab)},
            {"tgt_vocab", std::to_string(kVocab)},
            {"p_drop", "0"},
            {"label_smoothing", std::to_string(smoothing)}};
  o.dims = {{"B", 3}, {"S", 5}, {"T", 4}};
  return compileModelFile(std::string(TGC_SOURCE_DIR) + "/models/transformer.tg", o);
}

// Random values for every input: parameters small floats, token ids in [1, V) with the odd
// rows ending in padding (id 0), scalars 7.
std::map<std::string, Tensor> inputsFor(const Graph& g) {
  return tgc::testing::transformerInputs(g, 5, kVocab);
}

int countOps(const Graph& g, OpKind k) {
  int c = 0;
  for (const auto& n : g.nodes()) c += n->op() == k;
  return c;
}

// The loss graph with gradients for every parameter appended: outputs loss, grads.
void appendAllGradients(CompiledModel& m) {
  Graph& g = *m.graph;
  Value* loss = g.outputs()[m.loss_output];
  std::vector<Value*> outs{loss};
  for (Value* gr : appendGradients(g, loss, trainableParameters(g))) outs.push_back(gr);
  g.setOutputs(outs);
}

class FuseCrossEntropy : public ::testing::TestWithParam<double> {};

TEST_P(FuseCrossEntropy, TinyTransformerLossAndGradientsUnchanged) {
  const double smoothing = GetParam();
  CompiledModel plain = tinyModel(smoothing), fused = tinyModel(smoothing);
  PassContext ctx;
  EXPECT_TRUE(runFuseCrossEntropy(*fused.graph, ctx));
  EXPECT_EQ(countOps(*fused.graph, OpKind::SoftmaxCrossEntropy), 1);
  EXPECT_EQ(countOps(*fused.graph, OpKind::LogSoftmax), 0);
  for (const auto& n : fused.graph->nodes()) {
    if (n->op() == OpKind::SoftmaxCrossEntropy) {
      EXPECT_NEAR(n->attrFloat("smoothing"), smoothing, 1e-7);
    }
  }
  appendAllGradients(plain);
  appendAllGradients(fused);
  EXPECT_EQ(countOps(*fused.graph, OpKind::SoftmaxCrossEntropyGrad), 1);

  const auto in = inputsFor(*plain.graph);
  const auto want = Interpreter().run(*plain.graph, in);
  const auto got = Interpreter().run(*fused.graph, in);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(tgc::testing::allClose(got[i], want[i], 1e-5, 1e-6))
        << "fused vs unfused interpreter: " << plain.graph->outputs()[i]->name();

  auto exe = runtime::Executable::compile(*fused.graph, tgc::testing::testExecOptions());
  EXPECT_GE(exe->stats().libraryCalls, 2);  // the loss forward and backward at least
  const auto compiled = exe->run(in);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(tgc::testing::allClose(compiled[i], got[i], 1e-4, 1e-5))
        << "compiled vs interpreter: " << fused.graph->outputs()[i]->name();
}

INSTANTIATE_TEST_SUITE_P(Smoothing, FuseCrossEntropy, ::testing::Values(0.1, 0.0));

}  // namespace
