// `tgc run` end to end: hand-computed results, output files, --print, random inputs, --f64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "runtime/safetensors.h"
#include "tests/tools/tool_test_util.h"

namespace tgc {
namespace {

using testing::runTgc;
using testing::TempDir;

// y = x @ w, r = relu(y - 6), m = y > 6, s = sum of r's rows.
constexpr const char* kGraph = R"(graph @e2e {
  %x = input() : f32[2,3]
  %w = input() : f32[3,2]
  %y = matmul(%x, %w) : f32[2,2]
  %c = constant() {value=[6.0]} : f32[]
  %d = sub(%y, %c) : f32[2,2]
  %r = relu(%d) : f32[2,2]
  %m = gt(%y, %c) : bool[2,2]
  %s = reduce_sum(%r) {axes=[1]} : f32[2]
  return %y, %r, %m, %s
}
)";

// x = [[1,2,3],[4,5,6]], w = [[1,0],[0,1],[1,1]]  =>  y = [[4,5],[10,11]].
TensorFile handInputs() {
  TensorFile in;
  in.tensors.emplace("x", Tensor({DType::f32, {2, 3}}, {1, 2, 3, 4, 5, 6}));
  in.tensors.emplace("w", Tensor({DType::f32, {3, 2}}, {1, 0, 0, 1, 1, 1}));
  return in;
}

TEST(ToolRunTest, ComputesAHandCheckedGraph) {
  TempDir dir;
  const std::string graph = dir.write("e2e.tir", kGraph);
  writeSafetensors(dir.file("in.safetensors"), handInputs());
  auto r = runTgc({"run", graph, "--inputs", dir.file("in.safetensors"), "--outputs",
                   dir.file("out.safetensors")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");  // only --print (or no --outputs) prints
  EXPECT_EQ(r.err, "");

  TensorFile out = readSafetensors(dir.file("out.safetensors"));
  EXPECT_EQ(out.metadata.at("graph"), "e2e");
  ASSERT_EQ(out.tensors.size(), 4u);
  EXPECT_EQ(out.tensors.at("y").type(), (TensorType{DType::f32, {2, 2}}));
  EXPECT_EQ(out.tensors.at("y").toDoubles(), (std::vector<double>{4, 5, 10, 11}));
  EXPECT_EQ(out.tensors.at("r").toDoubles(), (std::vector<double>{0, 0, 4, 5}));
  EXPECT_EQ(out.tensors.at("m").type(), (TensorType{DType::boolean, {2, 2}}));
  EXPECT_EQ(out.tensors.at("m").toDoubles(), (std::vector<double>{0, 0, 1, 1}));
  EXPECT_EQ(out.tensors.at("s").type(), (TensorType{DType::f32, {2}}));
  EXPECT_EQ(out.tensors.at("s").toDoubles(), (std::vector<double>{0, 9}));
}

TEST(ToolRunTest, PrintSummarizesEachResult) {
  TempDir dir;
  const std::string graph = dir.write("e2e.tir", kGraph);
  writeSafetensors(dir.file("in.safetensors"), handInputs());
  auto r = runTgc({"run", graph, "--inputs", dir.file("in.safetensors"), "--print"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "%y: f32[2,2]  min 4  max 11  mean 7.5\n"
            "  [4, 5, 10, 11]\n"
            "%r: f32[2,2]  min 0  max 5  mean 2.25\n"
            "  [0, 0, 4, 5]\n"
            "%m: bool[2,2]  min 0  max 1  mean 0.5\n"
            "  [false, false, true, true]\n"
            "%s: f32[2]  min 0  max 9  mean 4.5\n"
            "  [0, 9]\n");
}

TEST(ToolRunTest, PrintShowsTheFirstValuesNaNsAndEmptyTensors) {
  TempDir dir;
  const std::string graph = dir.write("g.tir", R"(graph @g {
  %a = input() : f64[10]
  %b = input() : i64[0,3]
  %l = log(%a) : f64[10]
  return %l, %b
}
)");
  TensorFile in;
  in.tensors.emplace("a", Tensor({DType::f64, {10}}, {-1, 1, 1, 1, 1, 1, 1, 1, 1, -2}));
  in.tensors.emplace("b", Tensor({DType::i64, {0, 3}}));
  writeSafetensors(dir.file("in.safetensors"), in);
  auto r = runTgc({"run", graph, "--inputs", dir.file("in.safetensors")});  // no --outputs
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "%l: f64[10]  min 0  max 0  mean 0  nan 2\n"
            "  [nan, 0, 0, 0, 0, 0, 0, 0, ...] (first 8 of 10)\n"
            "%b: i64[0,3]  (empty)\n");
}

TEST(ToolRunTest, F64PromotesFloatResults) {
  TempDir dir;
  const std::string graph = dir.write("e2e.tir", kGraph);
  writeSafetensors(dir.file("in.safetensors"), handInputs());
  auto r = runTgc({"run", graph, "--inputs", dir.file("in.safetensors"), "--f64", "--outputs",
                   dir.file("out.safetensors")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  TensorFile out = readSafetensors(dir.file("out.safetensors"));
  EXPECT_EQ(out.tensors.at("y").type(), (TensorType{DType::f64, {2, 2}}));
  EXPECT_EQ(out.tensors.at("y").toDoubles(), (std::vector<double>{4, 5, 10, 11}));
  EXPECT_EQ(out.tensors.at("s").dtype(), DType::f64);
  EXPECT_EQ(out.tensors.at("m").dtype(), DType::boolean);  // not a float: unchanged

  // With --f64, inputs may be given in any float dtype of the declared shape.
  TensorFile wide;
  for (const auto& [name, t] : handInputs().tensors)
    wide.tensors.emplace(name, Tensor({DType::f64, t.shape()}, t.toDoubles()));
  writeSafetensors(dir.file("in64.safetensors"), wide);
  r = runTgc({"run", graph, "--inputs", dir.file("in64.safetensors"), "--f64", "--outputs",
              dir.file("out64.safetensors")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(readSafetensors(dir.file("out64.safetensors"))
                  .tensors.at("y")
                  .bitwiseEqual(out.tensors.at("y")));
}

// Returns its inputs, so the generated values can be inspected.
constexpr const char* kEcho = R"(graph @echo {
  %a = input() : i64[200]
  %b = input() : i32[3]
  %f = input() : f32[500]
  %h = input() : bf16[4]
  %p = input() : bool[64]
  return %a, %b, %f, %h, %p
}
)";

TensorFile runEcho(const TempDir& dir, std::vector<std::string> extra) {
  const std::string graph = dir.write("echo.tir", kEcho);
  std::vector<std::string> args{"run", graph, "--outputs", dir.file("echo.safetensors")};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = runTgc(args);
  EXPECT_EQ(r.exit_code, 0) << testing::commandLine(args) << "\n" << r.err;
  return readSafetensors(dir.file("echo.safetensors"));
}

TEST(ToolRunTest, RandomInputsAreDeterministicPerSeedAndName) {
  TempDir dir;
  TensorFile first = runEcho(dir, {"--random-inputs", "5"});
  TensorFile again = runEcho(dir, {"--random-inputs", "5"});
  TensorFile other = runEcho(dir, {"--random-inputs", "6"});
  ASSERT_EQ(first.tensors.size(), 5u);
  EXPECT_EQ(first.metadata.at("random_inputs_seed"), "5");
  for (const auto& [name, t] : first.tensors) {
    EXPECT_TRUE(t.bitwiseEqual(again.tensors.at(name))) << name;
    EXPECT_FALSE(t.bitwiseEqual(other.tensors.at(name))) << name;
  }

  // Giving %b changes neither the other inputs' values nor their order of generation.
  TensorFile given;
  given.tensors.emplace("b", Tensor({DType::i32, {3}}, {7, 8, 9}));
  writeSafetensors(dir.file("b.safetensors"), given);
  TensorFile partial =
      runEcho(dir, {"--random-inputs", "5", "--inputs", dir.file("b.safetensors")});
  EXPECT_EQ(partial.tensors.at("b").toDoubles(), (std::vector<double>{7, 8, 9}));
  for (const char* name : {"a", "f", "h", "p"})
    EXPECT_TRUE(partial.tensors.at(name).bitwiseEqual(first.tensors.at(name))) << name;
}

TEST(ToolRunTest, RandomInputsFollowTheirRanges) {
  TempDir dir;
  TensorFile u = runEcho(dir, {"--random-inputs", "11", "--int-range", "-3,4"});
  std::set<int64_t> seen;
  for (double v : u.tensors.at("a").toDoubles()) seen.insert(static_cast<int64_t>(v));
  EXPECT_EQ(seen, (std::set<int64_t>{-3, -2, -1, 0, 1, 2, 3}));  // 200 draws hit all 7 values
  double lo = 1, hi = -1;
  for (double v : u.tensors.at("f").toDoubles()) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_GE(lo, -1.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_LT(lo, -0.9);  // 500 uniform draws spread over the interval
  EXPECT_GT(hi, 0.9);
  std::set<double> bools;
  for (double v : u.tensors.at("p").toDoubles()) bools.insert(v);
  EXPECT_EQ(bools, (std::set<double>{0, 1}));

  // The default integer range is [0, 10).
  TensorFile d = runEcho(dir, {"--random-inputs", "11"});
  for (double v : d.tensors.at("a").toDoubles()) {
    EXPECT_GE(v, 0);
    EXPECT_LT(v, 10);
  }

  // Normal: mean near 0, spread near 1, and values outside [-1, 1) that uniform never gives.
  TensorFile n = runEcho(dir, {"--random-inputs", "11", "--dist", "normal"});
  std::vector<double> f = n.tensors.at("f").toDoubles();
  double sum = 0, sq = 0;
  int outside = 0;
  for (double v : f) sum += v, sq += v * v, outside += std::abs(v) > 1;
  double mean = sum / f.size(), var = sq / f.size() - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.15);
  EXPECT_NEAR(var, 1.0, 0.2);
  EXPECT_GT(outside, 100);  // about 32% of 500
}

TEST(ToolRunTest, ExtraTensorsAreIgnoredWithAWarning) {
  TempDir dir;
  const std::string graph = dir.write("e2e.tir", kGraph);
  TensorFile in = handInputs();
  in.tensors.emplace("unused", Tensor({DType::i32, {1}}));
  writeSafetensors(dir.file("in.safetensors"), in);
  auto r = runTgc({"run", graph, "--inputs", dir.file("in.safetensors"), "--outputs",
                   dir.file("out.safetensors")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: " + dir.file("in.safetensors") +
                       ": tensor 'unused' is not an input of graph @e2e; ignored"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(readSafetensors(dir.file("out.safetensors")).tensors.at("y").toDoubles(),
            (std::vector<double>{4, 5, 10, 11}));
}

TEST(ToolRunTest, AValueReturnedTwiceIsWrittenOnce) {
  TempDir dir;
  const std::string graph = dir.write("twice.tir", R"(graph @twice {
  %x = input() : i32[2]
  %y = neg(%x) : i32[2]
  return %y, %x, %y
}
)");
  TensorFile in;
  in.tensors.emplace("x", Tensor({DType::i32, {2}}, {3, -4}));
  writeSafetensors(dir.file("in.safetensors"), in);
  auto r = runTgc({"run", graph, "-i", dir.file("in.safetensors"), "-o",
                   dir.file("out.safetensors"), "--print"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  TensorFile out = readSafetensors(dir.file("out.safetensors"));
  ASSERT_EQ(out.tensors.size(), 2u);
  EXPECT_EQ(out.tensors.at("y").toDoubles(), (std::vector<double>{-3, 4}));
  EXPECT_EQ(out.tensors.at("x").toDoubles(), (std::vector<double>{3, -4}));
  EXPECT_EQ(r.out,
            "%y: i32[2]  min -3  max 4  mean 0.5\n  [-3, 4]\n"
            "%x: i32[2]  min -4  max 3  mean -0.5\n  [3, -4]\n"
            "%y: i32[2]  min -3  max 4  mean 0.5\n  [-3, 4]\n");
}

}  // namespace
}  // namespace tgc
