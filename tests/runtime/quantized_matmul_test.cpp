// The quantize pass and quantized_matmul compiled for the CPU: which matmuls it takes, the
// compiled op bit for bit against the reference interpreter (the same rounding and exact
// sums), within quantization error of the f32 product, and the packing kept between runs
// only while the weights' buffer is the same.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "ir/interpreter.h"
#include "ir/parser.h"
#include "passes/pass.h"
#include "passes/passes.h"
#include "runtime/executable.h"
#include "tests/runtime/exec_test_util.h"

namespace tgc {
namespace {

const char* kGraph = R"(
graph @g {
  %x = input() : f32[2,5,96]
  %w = input() {role="param"} : f32[96,40]
  %e = input() {role="param"} : f32[40,96]
  %a = input() : f32[2,40,7]
  %h = matmul(%x, %w) : f32[2,5,40]
  %tied = matmul(%x, %e) {transpose_b=true} : f32[2,5,40]
  %act = matmul(%h, %a) : f32[2,5,7]
  return %h, %tied, %act
}
)";

int count(const Graph& g, OpKind k) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op() == k;
  return n;
}

TEST(Quantize, TakesParameterWeightsOnly) {
  auto g = parseGraph(kGraph);
  PassContext ctx;
  EXPECT_TRUE(runQuantize(*g, ctx));
  EXPECT_EQ(count(*g, OpKind::QuantizedMatmul), 1);  // not the tied projection, not x @ a
  EXPECT_EQ(count(*g, OpKind::MatMul), 2);
  EXPECT_TRUE(g->findValue("h")->def()->attrBool("weights_constant"));
  EXPECT_FALSE(runQuantize(*g, ctx));
}

TEST(Quantize, CompiledMatchesTheInterpreterBitForBit) {
  auto g = parseGraph(kGraph);
  auto plain = parseGraph(kGraph);
  PassContext ctx;
  runQuantize(*g, ctx);
  auto in = testing::randomInputs(*g, 3);
  const auto ref = Interpreter().run(*g, in);
  const auto exact = Interpreter().run(*plain, in);
  auto exe = runtime::Executable::compile(*g, testing::testExecOptions());
  for (int run = 0; run < 2; ++run) {  // the second run reuses the packed weights
    const auto got = exe->run(in);
    ASSERT_EQ(std::memcmp(got[0].data(), ref[0].data(), got[0].nbytes()), 0) << "run " << run;
  }
  // Quantization error: a few percent of the largest value of the f32 product.
  double err = 0, mag = 0;
  for (int64_t i = 0; i < exact[0].numel(); ++i) {
    err = std::max(err, std::fabs(ref[0].getF(i) - exact[0].getF(i)));
    mag = std::max(mag, std::fabs(exact[0].getF(i)));
  }
  EXPECT_LT(err, 0.03 * mag);
  EXPECT_GT(err, 0.0);  // (it did quantize)

  // Without weights_constant every run packs the weights it is given.
  std::string text = kGraph;
  text.replace(text.find("matmul(%x, %w)"), 14, "quantized_matmul(%x, %w) {weights_constant=false}");
  g = parseGraph(text);
  auto each = runtime::Executable::compile(*g, testing::testExecOptions());
  for (int run = 0; run < 2; ++run) {
    Tensor w2(in.at("w").type());
    for (int64_t i = 0; i < w2.numel(); ++i) w2.setF(i, std::sin(0.1 * static_cast<double>(i + run)));
    in.insert_or_assign("w", w2);
    const auto want = Interpreter().run(*g, in);
    const auto got = each->run(in);
    EXPECT_EQ(std::memcmp(got[0].data(), want[0].data(), got[0].nbytes()), 0) << "run " << run;
  }
}

}  // namespace
}  // namespace tgc
