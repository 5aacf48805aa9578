// The trainer's step backends (runtime/train/step_backend.h) on the CPU: the CPU backend is
// the stateful Executable over the host store, byte for byte and without moving a tensor;
// the averaging graph a device backend runs gives the CPU backend's moving averages; the
// trainer reaches the backend for its state. (The CUDA backend: tests/runtime/cuda_train_test.cpp.)
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "frontend/frontend.h"
#include "passes/train_step.h"
#include "runtime/executable.h"
#include "runtime/train/step_backend.h"
#include "runtime/train/trainer.h"
#include "tests/train/trainer_test_util.h"

using namespace tgc;
using namespace tgc::train;

namespace {

constexpr int64_t kVocab = 12;

// The micro model's guarded training step at B=4, S=6, T=5, as the trainer builds it.
std::unique_ptr<Graph> microStep(std::vector<ParamInit>* params) {
  ModelOptions o = traintest::microModel("0.1").options(
      "train", {{"B", 4}, {"S", 6}, {"T", 5}},
      {{"src_vocab", std::to_string(kVocab)}, {"tgt_vocab", std::to_string(kVocab)}});
  CompiledModel m = compileModelFile(traintest::microModel().path, o);
  m.graph->setOutputs({m.graph->outputs()[static_cast<size_t>(m.loss_output)]});
  buildTrainStep(*m.graph, OptimizerConfig{});
  guardNonFinite(*m.graph);
  *params = m.params;
  return std::move(m.graph);
}

Tensor scalarI64(int64_t v) {
  Tensor t(TensorType{DType::i64, {}});
  t.setI(0, v);
  return t;
}

std::map<std::string, Tensor> batch(int64_t step) {
  std::mt19937_64 rng(static_cast<uint64_t>(step));
  auto ids = [&](Shape s) {
    Tensor t(TensorType{DType::i64, std::move(s)});
    for (int64_t i = 0; i < t.numel(); ++i) t.setI(i, 1 + static_cast<int64_t>(rng() % (kVocab - 1)));
    return t;
  };
  return {{"src", ids({4, 6})}, {"tgt_in", ids({4, 5})}, {"tgt_out", ids({4, 5})},
          {"seed", scalarI64(3)}, {"step", scalarI64(step)}};
}

bool sameBytes(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Three steps through the CPU backend and through the stateful Executable itself: the same
// outputs and state bit for bit, and every state tensor still at its address (updated in
// place: the backend copies nothing).
TEST(StepBackendTest, CpuBackendIsTheStatefulExecutableInPlace) {
  std::vector<ParamInit> params;
  auto g = microStep(&params);
  runtime::ParamStore ref(initParams(params, 9));
  ref.addZeroState(*g);

  auto backend = makeStepBackend(Target::cpu, traintest::trainExecOptions());
  EXPECT_EQ(backend->describe(), "CPU");
  backend->editState() = ref;
  const int step = backend->compile(*g);
  EXPECT_GT(backend->info(step).distinctKernels, 10);
  std::map<std::string, const void*> where;
  for (const auto& [name, t] : backend->state().tensors()) where[name] = t.data();

  auto opts = traintest::trainExecOptions();
  opts.updateInPlace = true;
  auto exe = runtime::Executable::compile(*g, opts);
  for (int64_t s = 1; s <= 3; ++s) {
    const auto got = backend->run(step, batch(s));
    const auto want = exe->runStep(ref, batch(s));
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, t] : want) EXPECT_TRUE(sameBytes(got.at(name), t)) << name;
    EXPECT_EQ(got.at("finite").getI(0), 1);
  }
  const runtime::ParamStore& state = backend->state();
  ASSERT_EQ(state.names(), ref.names());
  for (const auto& [name, t] : ref.tensors()) {
    EXPECT_TRUE(sameBytes(state.at(name), t)) << name;
    EXPECT_EQ(state.at(name).data(), where.at(name)) << name << " moved";
  }
  EXPECT_FALSE(sameBytes(state.at(params[0].name), initParams(params, 9).at(params[0].name)));
  EXPECT_TRUE(backend->holds("adam.m." + params[0].name));
  EXPECT_FALSE(backend->holds("ema." + params[0].name));
}

// The averaging graph (what the CUDA backend runs on the device), compiled for the CPU,
// against the CPU backend's loop: the first update starts ema.X as X, later ones mix.
TEST(StepBackendTest, AveragesGraphMatchesTheCpuBackend) {
  std::map<std::string, TensorType> types{{"a.weight", TensorType{DType::f32, {7, 5}}},
                                          {"b.bias", TensorType{DType::f32, {5}}},
                                          {"c.gamma", TensorType{DType::f32, {3, 2, 4}}}};
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  auto randomize = [&](runtime::ParamStore& s) {
    for (const auto& [name, t] : types) {
      Tensor x(t);
      for (int64_t i = 0; i < x.numel(); ++i) x.as<float>()[i] = normal(rng);
      s.set(name, std::move(x));
    }
  };
  auto backend = makeStepBackend(Target::cpu, traintest::trainExecOptions());
  randomize(backend->editState());
  backend->editState().set("ids", Tensor(TensorType{DType::i64, {3}}));  // not averaged
  std::vector<std::string> names;
  for (const auto& [name, t] : types) names.push_back(name);
  names.push_back("ids");

  auto opts = traintest::trainExecOptions();
  opts.updateInPlace = true;
  auto g = averagesGraph(types);
  auto exe = runtime::Executable::compile(*g, opts);
  EXPECT_EQ(exe->stateNames().size(), types.size());
  runtime::ParamStore ref = backend->state();
  for (const auto& [name, t] : types) ref.set("ema." + name, ref.at(name));

  for (const float decay : {0.1f, 0.5f, 0.9f}) {
    SCOPED_TRACE(decay);
    backend->updateAverages(names, decay);
    Tensor d(TensorType{DType::f32, {}});
    d.as<float>()[0] = decay;
    std::map<std::string, Tensor> in{{"decay", d}};  // the CPU reads parameters as inputs
    for (const auto& [name, t] : types) in.emplace(name, ref.at(name));
    exe->runStep(ref, in);
    for (const auto& [name, t] : types) {
      const Tensor& got = ref.at("ema." + name);
      const Tensor& want = backend->state().at("ema." + name);
      for (int64_t i = 0; i < t.numel(); ++i)
        EXPECT_NEAR(got.as<float>()[i], want.as<float>()[i], 1e-6f * (1 + std::fabs(want.as<float>()[i])))
            << name << "[" << i << "]";
    }
    // The next round moves the parameters, so the averages lag behind them.
    randomize(backend->editState());
    for (const auto& [name, t] : types) ref.set(name, backend->state().at(name));
  }
  EXPECT_FALSE(backend->holds("ema.ids"));
  EXPECT_THROW(averagesGraph({{"ids", TensorType{DType::i64, {3}}}}), std::invalid_argument);
}

// The trainer's state is the backend's: an edit through store() reaches the next step, and
// the checkpoint holds what state() shows.
TEST(StepBackendTest, TrainerStateIsTheBackends) {
  traintest::ScratchDir dir("tgc-backend");
  Trainer t(traintest::microModel("0"), traintest::microData(), traintest::microConfig(), dir.str(),
            traintest::trainExecOptions());
  EXPECT_EQ(t.backend().describe(), "CPU");
  t.step();
  const std::string gain = "encoder.layers.0.norm1.gamma";
  EXPECT_EQ(&t.state(), &t.backend().state());
  EXPECT_TRUE(t.state().contains("ema." + gain));
  t.store().at(gain).setF(0, std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(std::isnan(t.step().loss));  // the edited value was used
  EXPECT_EQ(t.skipped(), 1);
}

}  // namespace
