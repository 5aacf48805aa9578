// `tgc run`'s inputs: read from the --inputs safetensors file, and the missing ones drawn
// from per-input streams seeded from --random-inputs SEED, the same with every std library.
#include "tools/cmd_run.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <stdexcept>
#include <vector>

#include "runtime/safetensors.h"

namespace tgc::cli {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// One stream per input: FNV-1a of the name mixed into the seed.
uint64_t streamSeed(uint64_t seed, const std::string& name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  return splitmix64(seed ^ splitmix64(h));
}

// The standard fixes mt19937_64's output but not its distributions' algorithms, so the
// conversions are written out here to give the same numbers with every standard library.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

double standardNormal(std::mt19937_64& rng) {  // Box-Muller, one value per pair of draws
  double u1 = 1.0 - uniform01(rng);            // (0, 1]: log is finite
  double u2 = uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// Uniform in [lo, hi) without modulo bias.
int64_t uniformInt(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  const uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
  const uint64_t threshold = (0 - range) % range;  // 2^64 mod range
  uint64_t x = rng();
  while (x < threshold) x = rng();
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + x % range);
}

Tensor randomTensor(const Value& v, uint64_t seed, const RunOptions& o,
                    std::pair<int64_t, int64_t> int_range) {
  Tensor t(v.type());
  std::mt19937_64 rng(streamSeed(seed, v.name()));
  const DType d = t.dtype();
  if (d == DType::i32 && (int_range.first < std::numeric_limits<int32_t>::min() ||
                          int_range.second - 1 > std::numeric_limits<int32_t>::max()))
    throw std::runtime_error(fmt::format("--int-range [{}, {}) does not fit input %{} of type {}",
                                         int_range.first, int_range.second, v.name(),
                                         v.type().str()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (isFloat(d))
      t.setF(i, o.dist == "normal" ? standardNormal(rng) : 2.0 * uniform01(rng) - 1.0);
    else if (isInteger(d))
      t.setI(i, uniformInt(rng, int_range.first, int_range.second));
    else
      t.setI(i, static_cast<int64_t>(rng() >> 63));
  }
  return t;
}

}  // namespace

std::pair<int64_t, int64_t> parseIntRange(const std::string& s) {
  auto bad = [&] {
    return std::runtime_error(
        fmt::format("--int-range: expected LO,HI with integers LO < HI, got '{}'", s));
  };
  size_t comma = s.find(',');
  if (comma == std::string::npos) throw bad();
  auto parse = [&](const std::string& part) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
      throw bad();
    }
    if (used != part.size()) throw bad();
    return v;
  };
  int64_t lo = parse(s.substr(0, comma)), hi = parse(s.substr(comma + 1));
  if (lo >= hi) throw bad();
  return {lo, hi};
}

std::map<std::string, Tensor> gatherInputs(const Graph& g, const RunOptions& o,
                                           std::map<std::string, Tensor> fixed) {
  TensorFile given;
  if (!o.inputs.empty()) given = readSafetensors(o.inputs);
  const std::string source = o.inputs.empty() ? "no --inputs file" : o.inputs;

  std::map<std::string, Tensor> inputs;
  std::vector<std::string> missing, mistyped;
  for (Node* in : g.inputs()) {
    const Value& v = *in->result();
    if (auto f = fixed.find(v.name()); f != fixed.end()) {
      inputs.emplace(v.name(), std::move(f->second));
      continue;
    }
    auto it = given.tensors.find(v.name());
    if (it == given.tensors.end()) {
      missing.push_back(fmt::format("%{} ({})", v.name(), v.type().str()));
      continue;
    }
    const Tensor& t = it->second;
    bool ok = t.type() == v.type() || (o.f64 && isFloat(t.dtype()) && isFloat(v.type().dtype) &&
                                       t.shape() == v.type().shape);
    if (!ok)
      mistyped.push_back(fmt::format("input %{}: the graph declares {} but {} holds {}", v.name(),
                                     v.type().str(), o.inputs, t.type().str()));
    else
      inputs.emplace(v.name(), t);
  }
  for (const auto& [name, t] : given.tensors)
    if (!g.findValue(name) || g.findValue(name)->def()->op() != OpKind::Input)
      fmt::print(stderr,
                 "tgc run: warning: {}: tensor '{}' is not an input of graph @{}; ignored\n",
                 o.inputs, name, g.name());
    else if (fixed.count(name))
      fmt::print(stderr,
                 "tgc run: warning: {}: tensor '{}' is a parameter, taken from the checkpoint; "
                 "ignored\n",
                 o.inputs, name);

  if (!mistyped.empty()) {
    std::string msg = mistyped.front();
    for (size_t i = 1; i < mistyped.size(); ++i) msg += "\n  " + mistyped[i];
    throw std::runtime_error(msg);
  }
  if (!missing.empty() && !o.seed_opt->count()) {
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
    throw std::runtime_error(
        fmt::format("graph @{} has {} input{} not given ({}): {}; give them in --inputs or use "
                    "--random-inputs SEED",
                    g.name(), missing.size(), missing.size() == 1 ? "" : "s", source, list));
  }
  if (o.seed_opt->count()) {
    auto range = parseIntRange(o.int_range);
    for (Node* in : g.inputs())
      if (!inputs.count(in->result()->name()))
        inputs.emplace(in->result()->name(),
                       in->attrString("role") == "state"  // optimizer moments start at zero
                           ? Tensor(in->result()->type())
                           : randomTensor(*in->result(), o.seed, o, range));
  }
  return inputs;
}

}  // namespace tgc::cli
