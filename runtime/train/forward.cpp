#include "runtime/train/forward.h"

#include <fmt/format.h>

#include <chrono>
#include <stdexcept>

#include "runtime/train/task.h"

namespace tgc::train {

ForwardRunner::ForwardRunner(ModelSpec model, DataBinding binding, runtime::ExecOptions exec)
    : model_(std::move(model)), binding_(std::move(binding)), exec_(exec) {
  exec_.updateInPlace = false;
}

ForwardRunner::~ForwardRunner() = default;

std::map<std::string, Tensor> ForwardRunner::run(const data::FieldBatch& batch,
                                                 const std::map<std::string, Tensor>& params,
                                                 uint64_t seed, int64_t step) {
  const auto key = boundDims(binding_, batch.dims);
  Compiled& c = compiled_[key];
  if (!c.exe) {
    const auto t0 = std::chrono::steady_clock::now();
    ModelOptions o = model_.options(binding_.graph, key);
    o.inference = true;  // dropout off
    CompiledModel m = compileModelFile(model_.path, o);
    c.exe = runtime::Executable::compile(*m.graph, exec_);
    c.outputs = m.output_names;
    c.training = m.training;
    compileSeconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::map<std::string, Tensor> in;  // the data; the parameters are read where they are
  if (c.training) {
    Tensor s(TensorType{DType::i64, {}}), k(TensorType{DType::i64, {}});
    s.setI(0, static_cast<int64_t>(seed));
    k.setI(0, step);
    in.insert_or_assign("seed", std::move(s));
    in.insert_or_assign("step", std::move(k));
  }
  for (const BindingEntry& e : binding_.inputs) {
    auto it = batch.fields.find(e.from);
    if (it == batch.fields.end())
      throw std::runtime_error(fmt::format("{}: the batch has no field '{}'", e.loc, e.from));
    in.insert_or_assign(e.name, it->second);
  }
  std::vector<Tensor> outs;
  c.exe->run(in, params, outs);
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < outs.size(); ++i) named.emplace(c.outputs.at(i), std::move(outs[i]));
  return named;
}

}  // namespace tgc::train
