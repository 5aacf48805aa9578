// Helpers for the tests of compiled executables (runtime/executable.h): random inputs, a
// comparison against the reference interpreter, and the kernel cache the tests share.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/tensor.h"
#include "runtime/executable.h"

namespace tgc::testing {

// One cache for every test in the build tree: a rerun loads the kernels instead of
// compiling them again, and ~/.cache is left alone.
inline runtime::ExecOptions testExecOptions() {
  runtime::ExecOptions o;
  o.cacheDir = std::string(TGC_BINARY_DIR) + "/test-kernel-cache";
  return o;
}

// Floats uniform in [-1, 1), integers in [0, 10), bools 0/1; one stream per name.
inline Tensor randomTensor(const TensorType& type, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor t(type);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (isFloat(type.dtype))
      t.setF(i, std::uniform_real_distribution<double>(-1, 1)(rng));
    else if (type.dtype == DType::boolean)
      t.setI(i, static_cast<int64_t>(rng() & 1));
    else
      t.setI(i, static_cast<int64_t>(rng() % 10));
  }
  return t;
}

inline std::map<std::string, Tensor> randomInputs(const Graph& g, uint64_t seed) {
  std::map<std::string, Tensor> in;
  uint64_t s = seed;
  for (Node* n : g.inputs())
    in.emplace(n->result()->name(), randomTensor(n->result()->type(), ++s));
  return in;
}

// |a - b| <= atol + rtol * |b| everywhere (NaN only where both are NaN); the first mismatch.
inline ::testing::AssertionResult allClose(const Tensor& a, const Tensor& b, double rtol,
                                           double atol) {
  if (a.type() != b.type())
    return ::testing::AssertionFailure() << a.type().str() << " vs " << b.type().str();
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.getF(i), y = b.getF(i);
    if (std::isnan(x) && std::isnan(y)) continue;
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y)))
      return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs " << y;
  }
  return ::testing::AssertionSuccess();
}

// A fresh directory, removed at the end of the scope.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() /
            ("tgc-" + tag + "-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace tgc::testing
