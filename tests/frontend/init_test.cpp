// Parameter initialization: deterministic in (seed, name), with the documented statistics.
#include <gtest/gtest.h>

#include <cmath>

#include "frontend/frontend.h"
#include "frontend/model_stats.h"
#include "tests/frontend/fe_test_util.h"

namespace tgc {
namespace {

double mean(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.getF(i);
  return s / static_cast<double>(t.numel());
}
double stddev(const Tensor& t) {
  double m = mean(t), s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += (t.getF(i) - m) * (t.getF(i) - m);
  return std::sqrt(s / static_cast<double>(t.numel()));
}
double maxAbs(const Tensor& t) {
  double r = 0;
  for (int64_t i = 0; i < t.numel(); ++i) r = std::max(r, std::abs(t.getF(i)));
  return r;
}

TEST(InitTest, DeterministicInSeedAndNameNotOrder) {
  ParamInit a{"enc.w", "normal", 0.02, {DType::f32, {64, 64}}};
  ParamInit b{"enc.v", "normal", 0.02, {DType::f32, {64, 64}}};
  auto one = initParams({a, b}, 7);
  auto two = initParams({b, a}, 7);
  EXPECT_TRUE(one.at("enc.w").bitwiseEqual(two.at("enc.w")));
  EXPECT_TRUE(one.at("enc.v").bitwiseEqual(two.at("enc.v")));
  EXPECT_FALSE(one.at("enc.w").bitwiseEqual(one.at("enc.v")));  // names key the streams
  EXPECT_FALSE(initParam(a, 8).bitwiseEqual(one.at("enc.w")));   // so does the seed
}

TEST(InitTest, DistributionsHaveTheDocumentedScale) {
  Tensor xu = initParam({"w", "xavier_uniform", 1.0, {DType::f64, {256, 512}}}, 1);
  double bound = std::sqrt(6.0 / (256 + 512));
  EXPECT_LE(maxAbs(xu), bound);
  EXPECT_GT(maxAbs(xu), 0.99 * bound);
  EXPECT_NEAR(stddev(xu), bound / std::sqrt(3.0), 0.01 * bound);
  EXPECT_NEAR(mean(xu), 0.0, 0.01 * bound);

  Tensor xn = initParam({"w", "xavier_normal", 2.0, {DType::f64, {256, 512}}}, 1);
  EXPECT_NEAR(stddev(xn), 2.0 * std::sqrt(2.0 / (256 + 512)), 0.002);

  Tensor n = initParam({"w", "normal", 0.02, {DType::f32, {100000}}}, 3);
  EXPECT_NEAR(stddev(n), 0.02, 0.0005);
  EXPECT_NEAR(mean(n), 0.0, 0.0005);

  Tensor u = initParam({"w", "uniform", 0.5, {DType::f32, {100000}}}, 3);
  EXPECT_LE(maxAbs(u), 0.5);
  EXPECT_NEAR(stddev(u), 0.5 / std::sqrt(3.0), 0.005);

  EXPECT_EQ(maxAbs(initParam({"z", "zeros", 0, {DType::f32, {7}}}, 1)), 0.0);
  Tensor ones = initParam({"o", "ones", 0, {DType::bf16, {3}}}, 1);
  Tensor c = initParam({"c", "constant", 0.25, {DType::f64, {2, 2}}}, 1);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(ones.getF(i), 1.0);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(c.getF(i), 0.25);
  EXPECT_THROW(initParam({"x", "bogus", 0, {DType::f32, {1}}}, 1), std::invalid_argument);
  EXPECT_EQ(initParam({"e", "xavier_uniform", 1.0, {DType::f32, {16, 0}}}, 1).numel(), 0);
}

TEST(InitTest, ParamsOfACompiledModelInitialize) {
  auto m = testing::compileText(R"(
module M() {
  param w: f32[8, 4] = xavier_uniform
  param g: f32[4] = ones
  fn forward(x) { return x @ w * g }
}
let m = M()
graph g(x: f32[2, 8]) { output y = m(x) }
)");
  auto values = initParams(m.params, 42);
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values.at("m.w").type(), m.graph->findValue("m.w")->type());
  EXPECT_EQ(values.at("m.g").getF(3), 1.0);
}

TEST(StatsTest, CountsParametersOpsAndFlops) {
  auto m = testing::compileText(R"(
graph g(a: f32[3, 4, 5], b: f32[5, 6]) {
  let c = a @ b
  output y = softmax(relu(c), axis=-1)
}
)");
  GraphStats s = computeStats(*m.graph);
  EXPECT_EQ(s.param_count, 0);
  EXPECT_EQ(s.op_counts.at("matmul"), 1);
  EXPECT_EQ(s.op_counts.at("input"), 2);
  EXPECT_DOUBLE_EQ(s.flops_by_op.at("matmul"), 2.0 * 3 * 4 * 6 * 5);
  EXPECT_DOUBLE_EQ(s.flops_by_op.at("relu"), 72.0);
  EXPECT_DOUBLE_EQ(s.flops_by_op.at("softmax"), 5.0 * 72);
  EXPECT_DOUBLE_EQ(s.flops, 2.0 * 3 * 4 * 6 * 5 + 72 + 5 * 72);
  std::string text = formatStats(s);
  EXPECT_NE(text.find("parameters: 0"), std::string::npos) << text;
  EXPECT_NE(text.find("matmul"), std::string::npos) << text;
}

}  // namespace
}  // namespace tgc
