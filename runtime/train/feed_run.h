// Running an executable on a feed that holds the parameters: each run's data tensors are moved
// into the feed for the run and back out after it (an Executable reads its inputs in place), so
// neither the parameters nor the data are copied. Shared by the translator and the generator.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ir/tensor.h"
#include "runtime/executable.h"

namespace tgc::train {

inline void runWithFeed(runtime::Executable& exe, std::map<std::string, Tensor>& feed,
                        const std::vector<std::pair<std::string, Tensor*>>& data,
                        std::vector<Tensor>& out) {
  for (const auto& [name, t] : data) std::swap(feed[name], *t);
  try {
    exe.run(feed, out);
  } catch (...) {
    for (const auto& [name, t] : data) std::swap(feed[name], *t);
    throw;
  }
  for (const auto& [name, t] : data) std::swap(feed[name], *t);
}

}  // namespace tgc::train
