// Where the trainer's compiled training steps run and where their state lives.
//
// The training state — parameters, AdamW moments (adam.m.X, adam.v.X) and the parameters'
// moving averages (ema.X) — is one set of named tensors shared by the steps of every length
// bucket. A StepBackend compiles the steps, runs them on batches and keeps the state where
// they run:
//  - CPU (runtime::Executable): the state is the host ParamStore itself; a step updates it
//    in place, so state() costs nothing and there is no copy anywhere.
//  - CUDA (runtime::cuda::CudaExecutable over one DeviceTensors): the state is resident on
//    the GPU. A step uploads only its batch (token ids, seed, step) and downloads only its
//    scalar outputs (loss, grad_norm, lr, finite); the averages are updated on the device
//    by a small graph (averagesGraph). The host copy is refreshed only when asked for
//    (state(): checkpoints, validation, translation), and an edited host copy
//    (editState(): initialization, resume, tests) is uploaded before the next step.
// Validation and translation decode on the CPU from state() in both cases (see trainer.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "runtime/executable.h"
#include "runtime/param_store.h"

namespace tgc::train {

enum class Target { cpu, cuda };

struct CompiledStepInfo {
  int distinctKernels = 0;  // compiled kernels
  int64_t cacheHits = 0;    // of which loaded from the on-disk cache
};

class StepBackend {
 public:
  virtual ~StepBackend();

  // "CPU" or the device, for messages.
  virtual std::string describe() const = 0;
  // Compiles a training step: inputs X paired with outputs new.X of the same type are its
  // state, the other inputs its batch. Returns the step's handle for run().
  virtual int compile(const Graph& step) = 0;
  virtual CompiledStepInfo info(int step) const = 0;
  // Runs step `step` on `batch` (every non-state input by name), updating the state where
  // it lives; returns the other outputs by name (loss, grad_norm, lr, finite).
  virtual std::map<std::string, Tensor> run(int step, const std::map<std::string, Tensor>& batch) = 0;
  // ema.X = decay * ema.X + (1 - decay) * X for each float32 parameter X named (ema.X
  // starts as a copy of X).
  virtual void updateAverages(const std::vector<std::string>& params, float decay) = 0;
  // Whether the state holds `name`, without fetching anything.
  virtual bool holds(const std::string& name) const { return store_.contains(name); }

  // The state as of the last step, on the host (fetched from a device when it changed there).
  const runtime::ParamStore& state() {
    pull();
    return store_;
  }
  // The state for changing it on the host; a device backend uploads it before its next step.
  runtime::ParamStore& editState() {
    pull();
    edited();
    return store_;
  }

 protected:
  virtual void pull() {}    // refresh store_ from where the state lives
  virtual void edited() {}  // store_ is about to change on the host
  runtime::ParamStore store_;
};

// The CPU backend; `exec` as for runtime::Executable (updateInPlace is set here).
std::unique_ptr<StepBackend> makeCpuStepBackend(runtime::ExecOptions exec);
// The first CUDA device (throws runtime::cuda::NoDeviceError, "no CUDA device: ...", without
// one). Kernel cache and fusion follow `exec`.
std::unique_ptr<StepBackend> makeCudaStepBackend(const runtime::ExecOptions& exec);
std::unique_ptr<StepBackend> makeStepBackend(Target target, const runtime::ExecOptions& exec);

// The moving-average update as a graph, for backends that run it compiled: inputs `decay`
// (f32[]), each parameter X (role param) and its average ema.X (role state); outputs
// new.ema.X = decay * ema.X + (1 - decay) * X. `params`: float32 parameters by name.
std::unique_ptr<Graph> averagesGraph(const std::map<std::string, TensorType>& params);

}  // namespace tgc::train
