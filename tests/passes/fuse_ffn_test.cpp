// fuse-ffn on the tiny Transformer with dropout inside the FFN (ffn_dropout 0.1, and the
// residual dropout): the pass rewrites the ReLU gradient of each of the 4 FFNs; the loss
// and every parameter's gradient are bit-identical to the unrewritten graph's in the
// interpreter, and compiled for the CPU (where the ReLU gradient becomes the dD GEMM's
// epilogue) they equal the interpreter's to float32 accuracy and the compiled unrewritten
// graph's bit for bit (the epilogue's alpha = s is one multiply of the sum while K = d_model
// fits one K block of the GEMM, as at every preset). With GELU the pass finds nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "frontend/frontend.h"
#include "ir/interpreter.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "runtime/executable.h"
#include "tests/runtime/exec_test_util.h"

using namespace tgc;

namespace {

constexpr int64_t kVocab = 23;

CompiledModel tinyModel(const std::string& activation) {
  ModelOptions o;
  o.preset = "tiny";
  o.sets = {{"src_vocab", std::to_string(kVocab)},
            {"tgt_vocab", std::to_string(kVocab)},
            {"ffn_dropout", "0.1"},
            {"activation", activation}};
  o.dims = {{"B", 3}, {"S", 5}, {"T", 4}};
  CompiledModel m = compileModelFile(std::string(TGC_SOURCE_DIR) + "/models/transformer.tg", o);
  // Outputs: the loss, then every parameter's gradient.
  Graph& g = *m.graph;
  Value* loss = g.outputs()[m.loss_output];
  std::vector<Value*> outs{loss};
  for (Value* gr : appendGradients(g, loss, trainableParameters(g))) outs.push_back(gr);
  g.setOutputs(outs);
  return m;
}

// Parameters small normal floats; token ids in [1, V) with the odd rows ending in padding;
// the seed and step 7.
std::map<std::string, Tensor> inputsFor(const Graph& g) {
  return tgc::testing::transformerInputs(g, 11, kVocab);
}

// ReLU tests of a dropout's output: one per rewritten FFN.
int testsOfDropout(const Graph& g) {
  int c = 0;
  for (const auto& n : g.nodes())
    c += n->op() == OpKind::Gt && n->operand(0)->name().ends_with("ffn.dropout");
  return c;
}

bool bitEqual(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(FuseFFN, TinyTransformerGradientsBitIdentical) {
  CompiledModel plain = tinyModel("relu"), fused = tinyModel("relu");
  PassContext ctx;
  ASSERT_TRUE(runFuseFFN(*fused.graph, ctx));
  EXPECT_EQ(testsOfDropout(*fused.graph), 4);  // 2 encoder + 2 decoder FFNs
  EXPECT_EQ(testsOfDropout(*plain.graph), 0);
  EXPECT_FALSE(runFuseFFN(*fused.graph, ctx));  // nothing left to rewrite

  const auto in = inputsFor(*plain.graph);
  const auto want = Interpreter().run(*plain.graph, in);
  const auto got = Interpreter().run(*fused.graph, in);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(bitEqual(got[i], want[i]))
        << "rewritten vs original, interpreter: " << plain.graph->outputs()[i]->name();

  auto exeFused = runtime::Executable::compile(*fused.graph, tgc::testing::testExecOptions());
  auto exePlain = runtime::Executable::compile(*plain.graph, tgc::testing::testExecOptions());
  const auto compiled = exeFused->run(in);
  const auto compiledPlain = exePlain->run(in);
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string& name = fused.graph->outputs()[i]->name();
    EXPECT_TRUE(tgc::testing::allClose(compiled[i], got[i], 1e-4, 1e-5)) << "compiled vs interpreter: " << name;
    EXPECT_TRUE(bitEqual(compiled[i], compiledPlain[i])) << "compiled, rewritten vs original: " << name;
  }
  // The ReLU gradient joined the dD GEMM: fewer launches, fewer values kept.
  EXPECT_LT(exeFused->stats().kernels, exePlain->stats().kernels);
}

TEST(FuseFFN, GeluIsLeftAlone) {
  CompiledModel m = tinyModel("gelu");
  PassContext ctx;
  EXPECT_FALSE(runFuseFFN(*m.graph, ctx));
}

}  // namespace
