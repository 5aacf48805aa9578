// Named tensors that outlive one run: a model's parameters and its optimizer state.
//
// A stateful Executable (runtime/executable.h) reads them where they are and writes their
// new values back into the same storage, so a training loop keeps one copy of each. The
// store loads and saves safetensors files (names like encoder.layers.0.self_attn.w_q).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace tgc::runtime {

class ParamStore {
 public:
  ParamStore() = default;
  explicit ParamStore(std::map<std::string, Tensor> tensors) : tensors_(std::move(tensors)) {}

  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
  // Throws std::out_of_range naming the tensor when it is missing.
  Tensor& at(const std::string& name);
  const Tensor& at(const std::string& name) const;
  void set(const std::string& name, Tensor t) { tensors_.insert_or_assign(name, std::move(t)); }
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  std::vector<std::string> names() const;

  // Adds a zero tensor for every input of `g` with role "state" (optimizer moments) that
  // the store does not hold yet; returns how many were added.
  size_t addZeroState(const Graph& g);

  // Files: the tensors, with string metadata (step, config) kept in the header.
  static ParamStore load(const std::string& path,
                         std::map<std::string, std::string>* metadata = nullptr);
  void save(const std::string& path, const std::map<std::string, std::string>& metadata = {}) const;

 private:
  std::map<std::string, Tensor> tensors_;
};

}  // namespace tgc::runtime
