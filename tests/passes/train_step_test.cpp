// The training-step graph (forward + backward + AdamW) against AdamW written out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "ir/builder.h"
#include "ir/interpreter.h"
#include "ir/verifier.h"
#include "ir/printer.h"
#include "passes/default_pipeline.h"
#include "passes/train_step.h"

using namespace tgc;

namespace {
TensorType f64(Shape s) { return {DType::f64, std::move(s)}; }

// loss = sum((w - x)^2) + 0.5 * b^2
std::unique_ptr<Graph> quadratic() {
  auto g = std::make_unique<Graph>("quad");
  Builder b(*g);
  Value* w = b.input("w", f64({3}), "param");
  Value* bias = b.input("b", f64({}), "param");
  Value* x = b.input("x", f64({3}));
  Value* d = b.sub(w, x);
  Value* loss = b.add(b.reduce(OpKind::ReduceSum, b.mul(d, d), {0}),
                      b.mul(b.mul(bias, bias), b.scalar(DType::f64, 0.5)), "loss");
  g->setOutputs({loss});
  return g;
}
}  // namespace

TEST(TrainStep, AdamWWithScheduleAndClippingMatchesHandWritten) {
  OptimizerConfig cfg;
  cfg.warmup = 4;
  cfg.d_model = 16;
  cfg.lr_scale = 2.0;
  cfg.clip_norm = 0.5;  // active: the first gradients are larger
  cfg.weight_decay = 0.01;
  auto g = quadratic();
  EXPECT_EQ(buildTrainStep(*g, cfg), 2u);
  ASSERT_TRUE(verifyGraph(*g).empty());
  // Outputs: loss, grad_norm, lr, then (new p, new m, new v) per parameter in input order.
  ASSERT_EQ(g->outputs().size(), 3u + 6u);
  EXPECT_EQ(g->outputs()[3]->name(), "new.w");
  EXPECT_EQ(g->outputs()[4]->name(), "new.adam.m.w");
  EXPECT_EQ(g->outputs()[8]->name(), "new.adam.v.b");

  std::vector<double> w{1.0, -2.0, 0.5}, x{0.3, 0.1, -0.4}, m(3), v(3);
  double bias = 0.7, mb = 0, vb = 0;
  Interpreter interp;
  for (int64_t step = 1; step <= 5; ++step) {
    std::map<std::string, Tensor> in;
    in.emplace("w", Tensor(f64({3}), w));
    in.emplace("b", Tensor(f64({}), {bias}));
    in.emplace("x", Tensor(f64({3}), x));
    in.emplace("adam.m.w", Tensor(f64({3}), m));
    in.emplace("adam.v.w", Tensor(f64({3}), v));
    in.emplace("adam.m.b", Tensor(f64({}), {mb}));
    in.emplace("adam.v.b", Tensor(f64({}), {vb}));
    Tensor st(TensorType{DType::i64, {}});
    st.setI(0, step);
    in.emplace("step", st);
    auto out = interp.run(*g, in);

    // By hand.
    std::vector<double> gw(3);
    double loss = 0.5 * bias * bias, sq = bias * bias;
    for (int i = 0; i < 3; ++i) {
      loss += (w[i] - x[i]) * (w[i] - x[i]);
      gw[i] = 2 * (w[i] - x[i]);
      sq += gw[i] * gw[i];
    }
    double gb = bias;
    double norm = std::sqrt(sq);
    double clip = std::min(1.0, cfg.clip_norm / (norm + 1e-6));
    double s = static_cast<double>(step);
    double lr = cfg.lr_scale / std::sqrt(16.0) * std::min(1 / std::sqrt(s), s * std::pow(4.0, -1.5));
    EXPECT_NEAR(scheduledLearningRate(cfg, step), lr, 1e-15);
    auto adam = [&](double& p, double& mm, double& vv, double gr) {
      gr *= clip;
      mm = 0.9 * mm + 0.1 * gr;
      vv = 0.98 * vv + 0.02 * gr * gr;
      double mhat = mm / (1 - std::pow(0.9, s)), vhat = vv / (1 - std::pow(0.98, s));
      p -= lr * (mhat / (std::sqrt(vhat) + 1e-9) + 0.01 * p);
    };
    for (int i = 0; i < 3; ++i) adam(w[i], m[i], v[i], gw[i]);
    adam(bias, mb, vb, gb);

    EXPECT_NEAR(out[0].getF(0), loss, 1e-12) << "step " << step;
    EXPECT_NEAR(out[1].getF(0), norm, 1e-12);
    EXPECT_NEAR(out[2].getF(0), lr, 1e-15);
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(out[3].getF(i), w[i], 1e-12) << "step " << step << " w[" << i << "]";
      EXPECT_NEAR(out[4].getF(i), m[i], 1e-12);
      EXPECT_NEAR(out[5].getF(i), v[i], 1e-12);
    }
    EXPECT_NEAR(out[6].getF(0), bias, 1e-12);
    // Feed the graph's own state forward so the steps chain as in training.
    w = out[3].toDoubles();
    m = out[4].toDoubles();
    v = out[5].toDoubles();
    bias = out[6].getF(0);
    mb = out[7].getF(0);
    vb = out[8].getF(0);
  }
}

TEST(TrainStep, ConstantScheduleWithoutClippingDescends) {
  OptimizerConfig cfg;
  cfg.schedule = "constant";
  cfg.lr = 0.1;
  cfg.clip_norm = 0;
  auto g = quadratic();
  buildTrainStep(*g, cfg);
  std::vector<double> w{1.0, -2.0, 0.5};
  double bias = 0.7;
  std::map<std::string, Tensor> state;
  for (const char* n : {"adam.m.w", "adam.v.w"}) state.emplace(n, Tensor(f64({3})));
  for (const char* n : {"adam.m.b", "adam.v.b"}) state.emplace(n, Tensor(f64({})));
  double first = 0, last = 0;
  for (int64_t step = 1; step <= 200; ++step) {
    std::map<std::string, Tensor> in = state;
    in.emplace("w", Tensor(f64({3}), w));
    in.emplace("b", Tensor(f64({}), {bias}));
    in.emplace("x", Tensor(f64({3}), {0.3, 0.1, -0.4}));
    Tensor st(TensorType{DType::i64, {}});
    st.setI(0, step);
    in.emplace("step", st);
    auto out = Interpreter().run(*g, in);
    if (step == 1) first = out[0].getF(0);
    last = out[0].getF(0);
    EXPECT_EQ(out[2].getF(0), 0.1);
    w = out[3].toDoubles();
    bias = out[6].getF(0);
    state.at("adam.m.w") = out[4];
    state.at("adam.v.w") = out[5];
    state.at("adam.m.b") = out[7];
    state.at("adam.v.b") = out[8];
  }
  EXPECT_GT(first, 1.0);
  EXPECT_LT(last, 1e-3);
}

TEST(TrainStep, RejectsUnknownSchedule) {
  OptimizerConfig cfg;
  cfg.schedule = "cosine";
  auto g = quadratic();
  EXPECT_THROW(buildTrainStep(*g, cfg), IRError);
}

TEST(TrainStep, AdamWWithoutGradientsSaysToRunAutodiff) {
  auto g = quadratic();
  PassContext ctx;
  PassManager pm(parsePipeline("adamw"));
  try {
    pm.run(*g, ctx);
    FAIL() << "adamw ran without gradients";
  } catch (const PassError& e) {
    EXPECT_NE(std::string(e.what()).find("run autodiff first"), std::string::npos) << e.what();
  }
}

// buildTrainStep is the default training pipeline, pass by pass: the same graph as running
// its text, and autodiff leaves one gradient output per parameter for adamw.
TEST(TrainStep, IsTheDefaultPipelineRunByThePassManager) {
  OptimizerConfig cfg;
  cfg.weight_decay = 0.01;
  auto built = quadratic();
  buildTrainStep(*built, cfg);

  PipelineMode mode;
  mode.kind = PipelineMode::Kind::TrainStep;
  const Pipeline pipeline = defaultPipeline(mode);
  EXPECT_TRUE(pipeline.contains("autodiff"));
  EXPECT_TRUE(pipeline.contains("adamw"));
  auto g = quadratic();
  PassContext ctx;
  ctx.optimizer = cfg;
  PassManager pm(parsePipeline(pipeline.str()), PassManagerOptions{});
  pm.run(*g, ctx);
  EXPECT_EQ(printGraph(*g), printGraph(*built));

  auto diffed = quadratic();
  PassManager(parsePipeline("autodiff")).run(*diffed);
  ASSERT_EQ(diffed->outputs().size(), 3u);  // loss, d/dw, d/db
  EXPECT_EQ(diffed->outputs()[1]->name(), "grad.w");
  EXPECT_EQ(diffed->outputs()[2]->type(), f64({}));
}

TEST(DefaultPipeline, FollowsTheModeAndRefusesWhatItCannotBuild) {
  PipelineMode fwd;
  EXPECT_EQ(defaultPipeline(fwd).str(), "fuse-norms,fuse-activations,fuse-attention,fuse-cross-entropy");
  fwd.quantize = true;
  EXPECT_EQ(defaultPipeline(fwd).str(),
            "fuse-norms,fuse-activations,fuse-attention,fuse-cross-entropy,quantize");
  PipelineMode grad;
  grad.kind = PipelineMode::Kind::Gradients;
  grad.precision = DType::bf16;
  EXPECT_EQ(defaultPipeline(grad).str(),
            "fuse-norms,fuse-activations,fuse-attention,fuse-cross-entropy,mixed-precision,autodiff,"
            "merge-casts");
  grad.quantize = true;
  EXPECT_THROW(defaultPipeline(grad), PassError);
  PipelineMode f16;
  f16.precision = DType::f16;
  EXPECT_THROW(defaultPipeline(f16), PassError);
  EXPECT_EQ(parsePipelineFor("none", fwd).steps.size(), 0u);
  EXPECT_EQ(parsePipelineFor("default,dce", PipelineMode{}).str(),
            "fuse-norms,fuse-activations,fuse-attention,fuse-cross-entropy,dce");
}
