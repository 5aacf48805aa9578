// The tiny Transformer trained through its generated backward graph and AdamW step graph,
// executed by the reference interpreter.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "frontend/frontend.h"
#include "ir/interpreter.h"
#include "passes/autodiff.h"
#include "passes/train_step.h"

using namespace tgc;

namespace {

constexpr int64_t kVocab = 24;

CompiledModel tinyModel(std::vector<std::pair<std::string, std::string>> sets) {
  ModelOptions o;
  o.preset = "tiny";
  o.sets = {{"src_vocab", std::to_string(kVocab)}, {"tgt_vocab", std::to_string(kVocab)}};
  o.sets.insert(o.sets.end(), sets.begin(), sets.end());
  o.dims = {{"B", 2}, {"S", 5}, {"T", 5}};
  return compileModelFile(std::string(TGC_SOURCE_DIR) + "/models/transformer.tg", o);
}

Tensor tokens(Shape shape, std::vector<int64_t> ids) {
  Tensor t(TensorType{DType::i64, std::move(shape)});
  for (size_t i = 0; i < ids.size(); ++i) t.setI(static_cast<int64_t>(i), ids[i]);
  return t;
}

Tensor scalarI64(int64_t v) {
  Tensor t(TensorType{DType::i64, {}});
  t.setI(0, v);
  return t;
}

// One fixed batch: the second row of each sequence ends in padding (id 0).
std::map<std::string, Tensor> fixedBatch() {
  std::map<std::string, Tensor> in;
  in.emplace("src", tokens({2, 5}, {5, 9, 3, 17, 2, 7, 11, 4, 0, 0}));
  in.emplace("tgt_in", tokens({2, 5}, {1, 12, 6, 20, 8, 1, 14, 3, 0, 0}));
  in.emplace("tgt_out", tokens({2, 5}, {12, 6, 20, 8, 2, 14, 3, 2, 0, 0}));
  in.emplace("seed", scalarI64(1234));
  in.emplace("step", scalarI64(1));
  return in;
}

// Moves the loss to outputs[0], dropping the other outputs.
void keepOnlyLoss(CompiledModel& m) {
  ASSERT_GE(m.loss_output, 0);
  m.graph->setOutputs({m.graph->outputs()[m.loss_output]});
  m.graph->removeDeadNodes();
}

}  // namespace

TEST(ModelGradients, DropoutMasksMakeGradientsDeterministicInSeedAndStep) {
  CompiledModel m = tinyModel({});  // paper defaults: dropout 0.1 on
  keepOnlyLoss(m);
  auto params = trainableParameters(*m.graph);
  auto grads = appendGradients(*m.graph, m.graph->outputs()[0], params);
  std::vector<Value*> outs{m.graph->outputs()[0]};
  outs.insert(outs.end(), grads.begin(), grads.end());
  m.graph->setOutputs(outs);
  auto in = fixedBatch();
  for (auto& [k, v] : initParams(m.params, 7)) in.insert_or_assign(k, v);
  Interpreter interp;
  auto a = interp.run(*m.graph, in);
  auto b = interp.run(*m.graph, in);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].bitwiseEqual(b[i])) << outs[i]->name();
  // A different dropout seed draws different masks, so the loss changes.
  in.insert_or_assign("seed", scalarI64(99));
  auto c = interp.run(*m.graph, in);
  EXPECT_NE(a[0].getF(0), c[0].getF(0));
  // ... and so does a different step.
  in.insert_or_assign("seed", scalarI64(1234));
  in.insert_or_assign("step", scalarI64(2));
  auto d = interp.run(*m.graph, in);
  EXPECT_NE(a[0].getF(0), d[0].getF(0));
}

namespace {

// Trains the tiny model on the fixed batch with the interpreter; returns the loss per step.
std::vector<double> trainOnFixedBatch(CompiledModel& m, int maxSteps, double stopBelow) {
  keepOnlyLoss(m);
  OptimizerConfig cfg;
  cfg.schedule = "constant";
  cfg.lr = 3e-3;
  buildTrainStep(*m.graph, cfg);
  const Graph& g = *m.graph;
  auto in = fixedBatch();
  for (auto& [k, v] : initParams(m.params, 3)) in.insert_or_assign(k, v);
  for (Node* n : g.inputs())
    if (n->attrString("role") == "state") in.emplace(n->result()->name(), Tensor(n->result()->type()));
  // Output layout of buildTrainStep: loss, grad_norm, lr, then (p, m, v) per parameter.
  std::vector<std::string> params;
  for (Value* p : trainableParameters(g)) params.push_back(p->name());
  Interpreter interp;
  std::vector<double> losses;
  for (int step = 1; step <= maxSteps; ++step) {
    in.insert_or_assign("step", scalarI64(step));
    auto out = interp.run(g, in);
    losses.push_back(out[0].getF(0));
    if (losses.back() < stopBelow) break;
    for (size_t i = 0; i < params.size(); ++i) {
      in.insert_or_assign(params[i], std::move(out[3 + 3 * i]));
      in.insert_or_assign("adam.m." + params[i], std::move(out[4 + 3 * i]));
      in.insert_or_assign("adam.v." + params[i], std::move(out[5 + 3 * i]));
    }
  }
  return losses;
}

}  // namespace

TEST(ModelTraining, TinyPresetOverfitsOneBatch) {
  CompiledModel m = tinyModel({{"p_drop", "0.0"}, {"label_smoothing", "0.0"}});
  auto t0 = std::chrono::steady_clock::now();
  auto losses = trainOnFixedBatch(m, 400, 0.1);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("overfit: loss %.4f -> %.4f in %zu steps (%.1f s)\n", losses.front(), losses.back(),
              losses.size(), secs);
  EXPECT_GT(losses.front(), 2.0);  // about log(24) at initialization
  EXPECT_LT(losses.back(), 0.1) << "after " << losses.size() << " steps";
}

TEST(ModelTraining, LabelSmoothedLossApproachesItsAnalyticFloor) {
  // Target distribution: 1 - eps + eps/V on the gold token, eps/V elsewhere; the smallest
  // cross-entropy any model can reach is that distribution's entropy.
  const double eps = 0.1, V = kVocab;
  double gold = 1 - eps + eps / V, other = eps / V;
  double floor = -gold * std::log(gold) - (V - 1) * other * std::log(other);
  CompiledModel m = tinyModel({{"p_drop", "0.0"}, {"label_smoothing", "0.1"}});
  auto losses = trainOnFixedBatch(m, 400, floor + 0.02);
  std::printf("label smoothing: floor %.4f, loss %.4f after %zu steps\n", floor, losses.back(),
              losses.size());
  EXPECT_GT(losses.back(), floor - 1e-4);
  EXPECT_LT(losses.back(), floor + 0.02);
}
