// The CUDA step backend (step_backend.h): the training state resident on the GPU in one
// DeviceTensors that every bucket's step and the averaging graph are bound to.
#include <fmt/format.h>

#include <map>
#include <optional>

#include "runtime/cuda/cuda_executable.h"
#include "runtime/train/step_backend.h"

namespace tgc::train {

namespace cu = runtime::cuda;

namespace {

class CudaStepBackend final : public StepBackend {
 public:
  explicit CudaStepBackend(const runtime::ExecOptions& exec)
      : device_(cu::Device::open(0)), tensors_(device_) {
    opts_ = cu::CudaExecOptions::fromEnv();
    opts_.device = device_->info().ordinal;
    opts_.fuse = exec.fuse;
    opts_.useCache = exec.useCache;
    opts_.updateInPlace = true;
    opts_.sharedState = true;
  }

  std::string describe() const override {
    const cu::DeviceInfo& d = device_->info();
    return fmt::format("CUDA device {} ({}, {})", d.ordinal, d.name, d.arch());
  }

  int compile(const Graph& step) override {
    steps_.push_back({cu::CudaExecutable::compile(step, opts_), false});
    return static_cast<int>(steps_.size()) - 1;
  }

  CompiledStepInfo info(int step) const override {
    const cu::CudaExecStats& s = steps_.at(static_cast<size_t>(step)).exe->stats();
    return {s.distinctKernels, s.nvrtcCacheHits};
  }

  std::map<std::string, Tensor> run(int step, const std::map<std::string, Tensor>& batch) override {
    Step& s = steps_.at(static_cast<size_t>(step));
    push();
    bind(s);
    auto out = s.exe->runStep(batch);  // uploads the batch, downloads the scalars, waits
    deviceNewer_ = true;
    return out;
  }

  void updateAverages(const std::vector<std::string>& params, float decay) override {
    push();
    std::map<std::string, TensorType> f32;
    for (const std::string& name : params) {
      const TensorType& t = tensors_.type(name);
      if (t.dtype != DType::f32) continue;
      f32.emplace(name, t);
      if (!tensors_.contains("ema." + name)) tensors_.copy("ema." + name, name);
    }
    tensors_.synchronize();
    if (f32.empty()) return;
    if (!averages_ || averagedParams_ != f32) {
      averages_ = Step{cu::CudaExecutable::compile(*averagesGraph(f32), opts_), false};
      averagedParams_ = f32;
    }
    bind(*averages_);
    Tensor d(TensorType{DType::f32, {}});
    d.as<float>()[0] = decay;
    averages_->exe->runStep({{"decay", d}});
    deviceNewer_ = true;
  }

  bool holds(const std::string& name) const override {
    return store_.contains(name) || tensors_.contains(name);
  }

 protected:
  // Downloads every device tensor when a step or an average changed them since.
  void pull() override {
    if (!deviceNewer_) return;
    std::map<std::string, Tensor> got;  // stable addresses until the copies are done
    for (const std::string& name : tensors_.names()) tensors_.download(name, got[name]);
    tensors_.synchronize();
    for (auto& [name, t] : got) store_.set(name, std::move(t));
    deviceNewer_ = false;
  }

  void edited() override { hostNewer_ = true; }

 private:
  struct Step {
    std::unique_ptr<cu::CudaExecutable> exe;
    bool bound = false;
  };

  // Uploads the whole host store after it was edited (or first filled).
  void push() {
    if (!hostNewer_) return;
    for (const auto& [name, t] : store_.tensors()) tensors_.upload(name, t);
    tensors_.synchronize();
    hostNewer_ = false;
  }

  // Points the executable's state and parameter inputs at the device tensors (once: they
  // keep their addresses).
  void bind(Step& s) {
    if (s.bound) return;
    s.exe->bindTensors(tensors_);
    s.bound = true;
  }

  std::shared_ptr<cu::Device> device_;
  cu::DeviceTensors tensors_;
  cu::CudaExecOptions opts_;
  std::vector<Step> steps_;
  std::optional<Step> averages_;
  std::map<std::string, TensorType> averagedParams_;
  bool hostNewer_ = true;     // store_ has values the device lacks
  bool deviceNewer_ = false;  // the device has values store_ lacks
};

}  // namespace

std::unique_ptr<StepBackend> makeCudaStepBackend(const runtime::ExecOptions& exec) {
  return std::make_unique<CudaStepBackend>(exec);
}

}  // namespace tgc::train
