// The forward pass of a bound graph without dropout, on task batches: what validation, `tgc
// eval` and `tgc predict` run. One executable per distinct batch shape, compiled on first use.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frontend/frontend.h"
#include "runtime/data/field_batch.h"
#include "runtime/executable.h"
#include "runtime/train/spec.h"

namespace tgc::train {

class ForwardRunner {
 public:
  // `model` carries the binding's config values among its sets.
  ForwardRunner(ModelSpec model, DataBinding binding, runtime::ExecOptions exec);
  ~ForwardRunner();

  // Every output of the graph by name, for a batch (fields fed through the binding's inputs,
  // its dims setting the named dims) and parameters; a training graph also gets seed and step.
  std::map<std::string, Tensor> run(const data::FieldBatch& batch,
                                    const std::map<std::string, Tensor>& params, uint64_t seed = 1,
                                    int64_t step = 1);

  double compileSeconds() const { return compileSeconds_; }

 private:
  struct Compiled {
    std::unique_ptr<runtime::Executable> exe;
    std::vector<std::string> outputs;
    bool training = false;
  };
  ModelSpec model_;
  DataBinding binding_;
  runtime::ExecOptions exec_;
  std::map<std::vector<std::pair<std::string, int64_t>>, Compiled> compiled_;
  double compileSeconds_ = 0;
};

}  // namespace tgc::train
