// Gradient checking: the generated backward graph against central finite differences,
// both evaluated in float64 by a backend: the reference interpreter (the default) or
// compiled code (runtime/executable.h: cpuF64Backend).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace tgc {

// Runs one prepared graph on many inputs (float inputs in float64), returning its outputs.
using GraphRunner = std::function<std::vector<Tensor>(const std::map<std::string, Tensor>&)>;
// Prepares a graph once (a compiled backend compiles it) for evaluation in float64.
using GraphBackend = std::function<GraphRunner(const Graph&)>;

// The reference interpreter with every float op in float64.
GraphBackend interpreterF64Backend();

// A copy of `g` with every float type (f32, bf16, f16) made f64: inputs, constants, iota,
// random numbers and casts to floats, so each op computes in float64.
std::unique_ptr<Graph> promoteToF64(const Graph& g);

struct GradCheckOptions {
  int samples_per_tensor = 6;  // entries perturbed per tensor (all if the tensor is smaller)
  double step = 1e-6;          // central difference step h: (f(x+h) - f(x-h)) / 2h
  uint64_t seed = 1;           // picks the sampled entries
  // Relative errors divide by max(|analytic|, |numeric|, abs_floor): below the floor a
  // difference is judged on an absolute scale, since round-off in f(x+h) - f(x-h) is about
  // 1e-16 * |f| / h there, not a wrong gradient.
  double abs_floor = 1e-6;
  GraphBackend backend = {};  // empty: interpreterF64Backend()
};

struct GradCheckResult {
  std::string name;        // the value differentiated
  int checked = 0;         // entries compared
  double max_abs_error = 0;
  double max_rel_error = 0;  // |analytic - numeric| / max(|analytic|, |numeric|, abs_floor)
  double worst_analytic = 0, worst_numeric = 0;  // at the worst entry
  // The largest |analytic| and |numeric| over the checked entries: both 0 means the
  // comparison could not have failed (see gradCheckProvedNothing).
  double max_abs_analytic = 0, max_abs_numeric = 0;
};

// `g`'s outputs[0] is the scalar loss. For each value named in `wrt` (float inputs of g),
// compares d loss / d value from appendGradients with central differences.
std::vector<GradCheckResult> gradCheck(const Graph& g, const std::map<std::string, Tensor>& inputs,
                                       const std::vector<std::string>& wrt,
                                       const GradCheckOptions& opts = {});

// Empty when `results` prove something; else why they do not: no entry was checked, or every
// checked gradient and every finite difference is exactly 0 (the loss does not depend on the
// checked values on this batch, e.g. every label is masked out), so any gradient rule would
// have passed. The message starts "gradcheck proved nothing: ".
std::string gradCheckProvedNothing(const std::vector<GradCheckResult>& results);

// Copies a float tensor into float64 (other dtypes are returned unchanged).
Tensor toF64(const Tensor& t);

}  // namespace tgc
