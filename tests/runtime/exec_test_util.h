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

// Token ids [rows, cols] in [1, vocab) from seed, the odd rows padded (id 0) from column
// padFrom on.
inline Tensor tokenIds(const Shape& shape, uint64_t seed, int64_t padFrom, int64_t vocab) {
  Tensor t(TensorType{DType::i64, shape});
  std::mt19937_64 rng(seed);
  const int64_t cols = shape[1];
  for (int64_t i = 0; i < t.numel(); ++i) {
    const bool pad = (i / cols) % 2 == 1 && i % cols >= padFrom;
    t.setI(i, pad ? 0 : 1 + static_cast<int64_t>(rng() % (vocab - 1)));
  }
  return t;
}

inline Tensor scalarI64(int64_t v) {
  Tensor t(TensorType{DType::i64, {}});
  t.setI(0, v);
  return t;
}

// Inputs for a models/transformer.tg graph: float inputs normal(0, 0.3) (optimizer state 0
// with zeroState), token ids [rows, len] in [1, vocab) with the odd rows padded (id 0) after
// two tokens, other integers (the seed, the step) 7.
inline std::map<std::string, Tensor> transformerInputs(const Graph& g, uint64_t seed,
                                                       int64_t vocab, bool zeroState = false) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 0.3);
  std::map<std::string, Tensor> in;
  for (Node* n : g.inputs()) {
    Tensor t(n->result()->type());
    const Shape& s = t.shape();
    const bool state = zeroState && n->attrString("role") == "state";
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (isFloat(t.dtype())) t.setF(i, state ? 0.0 : normal(rng));
      else if (s.size() == 2 && (i / s[1]) % 2 == 1 && i % s[1] >= 2) t.setI(i, 0);
      else if (s.size() == 2) t.setI(i, 1 + static_cast<int64_t>(rng() % (vocab - 1)));
      else t.setI(i, 7);
    }
    in.emplace(n->result()->name(), std::move(t));
  }
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
