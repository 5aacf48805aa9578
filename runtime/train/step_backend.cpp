#include "runtime/train/step_backend.h"

#include <stdexcept>

#include "ir/builder.h"

namespace tgc::train {

StepBackend::~StepBackend() = default;

namespace {

// The state is the host store: steps update it in place (runtime/executable.h).
class CpuStepBackend final : public StepBackend {
 public:
  explicit CpuStepBackend(runtime::ExecOptions exec) : exec_(exec) { exec_.updateInPlace = true; }

  std::string describe() const override { return "CPU"; }

  int compile(const Graph& step) override {
    steps_.push_back(runtime::Executable::compile(step, exec_));
    return static_cast<int>(steps_.size()) - 1;
  }

  CompiledStepInfo info(int step) const override {
    const runtime::ExecStats& s = steps_.at(static_cast<size_t>(step))->stats();
    return {s.distinctKernels, s.cacheHits};
  }

  std::map<std::string, Tensor> run(int step, const std::map<std::string, Tensor>& batch) override {
    return steps_.at(static_cast<size_t>(step))->runStep(store_, batch);
  }

  void updateAverages(const std::vector<std::string>& params, float decay) override {
    for (const std::string& name : params) {
      const Tensor& p = store_.at(name);
      if (p.dtype() != DType::f32) continue;
      const std::string key = "ema." + name;
      if (!store_.contains(key)) store_.set(key, p);
      float* e = store_.at(key).as<float>();
      const float* x = p.as<float>();
      for (int64_t i = 0; i < p.numel(); ++i) e[i] = decay * e[i] + (1 - decay) * x[i];
    }
  }

 private:
  runtime::ExecOptions exec_;
  std::vector<std::unique_ptr<runtime::Executable>> steps_;
};

}  // namespace

std::unique_ptr<StepBackend> makeCpuStepBackend(runtime::ExecOptions exec) {
  return std::make_unique<CpuStepBackend>(exec);
}

std::unique_ptr<StepBackend> makeStepBackend(Target target, const runtime::ExecOptions& exec) {
  switch (target) {
    case Target::cpu:
      return makeCpuStepBackend(exec);
    case Target::cuda:
      return makeCudaStepBackend(exec);
  }
  throw std::invalid_argument("unknown training target");
}

std::unique_ptr<Graph> averagesGraph(const std::map<std::string, TensorType>& params) {
  auto g = std::make_unique<Graph>("averages");
  Builder b(*g);
  Value* decay = b.input("decay", TensorType{DType::f32, {}});
  Value* keep = b.sub(b.scalar(DType::f32, 1.0, "one"), decay, "one_minus_decay");
  std::vector<Value*> outs;
  for (const auto& [name, type] : params) {
    if (type.dtype != DType::f32)
      throw std::invalid_argument("averagesGraph: parameter '" + name + "' is not float32");
    Value* x = b.input(name, type, "param");
    Value* e = b.input("ema." + name, type, "state");
    Value* next = b.add(b.mul(decay, e), b.mul(keep, x));
    g->renameValue(next, "new.ema." + name);
    outs.push_back(next);
  }
  g->setOutputs(outs);
  return g;
}

}  // namespace tgc::train
