#include "runtime/param_store.h"

#include <fmt/format.h>

#include <stdexcept>

#include "runtime/safetensors.h"

namespace tgc::runtime {

Tensor& ParamStore::at(const std::string& name) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw std::out_of_range(fmt::format("no tensor named '{}'", name));
  return it->second;
}

const Tensor& ParamStore::at(const std::string& name) const {
  return const_cast<ParamStore*>(this)->at(name);
}

std::vector<std::string> ParamStore::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

size_t ParamStore::addZeroState(const Graph& g) {
  size_t added = 0;
  for (Node* n : g.inputs()) {
    const Value& v = *n->result();
    if (n->attrString("role") != "state" || contains(v.name())) continue;
    tensors_.emplace(v.name(), Tensor(v.type()));
    ++added;
  }
  return added;
}

ParamStore ParamStore::load(const std::string& path,
                            std::map<std::string, std::string>* metadata) {
  TensorFile f = readSafetensors(path);
  if (metadata) *metadata = std::move(f.metadata);
  return ParamStore(std::move(f.tensors));
}

void ParamStore::save(const std::string& path,
                      const std::map<std::string, std::string>& metadata) const {
  TensorFile f;
  f.tensors = tensors_;
  f.metadata = metadata;
  writeSafetensors(path, f);
}

}  // namespace tgc::runtime
