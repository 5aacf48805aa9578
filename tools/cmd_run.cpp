// `tgc run`: evaluates a Graph IR file, or a graph of a checkpoint's model with its trained
// parameters (--checkpoint, cmd_run_checkpoint.cpp), with the reference interpreter or
// compiled for the CPU (--backend cpu) or the GPU (--backend cuda). Inputs come from a
// safetensors file (or are generated from a seed: cmd_run_inputs.cpp), outputs go to a
// safetensors file named by their value names. It is the quickest way to see what a graph
// computes, the oracle that compiled code is compared against from the command line, and
// (--repeat, --timing-json) the harness that times compiled graphs.
#include <fmt/format.h>
#include <malloc.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/diagnostic.h"
#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/json.h"
#include "ir/parser.h"
#include "runtime/cuda/cuda_executable.h"
#include "passes/default_pipeline.h"
#include "passes/pass_manager.h"
#include "runtime/executable.h"
#include "runtime/gradcheck.h"
#include "runtime/param_store.h"
#include "runtime/safetensors.h"
#include "runtime/train/checkpoint.h"
#include "support/thread_pool.h"
#include "tools/cmd_run.h"
#include "tools/commands.h"
#include "tools/pass_args.h"

namespace tgc::cli {
namespace {

constexpr const char* kFooter = R"(
Inputs:
  Every `input()` of the graph is looked up by its value name (%x is the tensor "x") in the
  --inputs file and must have exactly the declared dtype and shape (with --f64, any float
  dtype of the declared shape). Tensors in the file that are not inputs of the graph are
  ignored with a warning. Inputs missing from the file are an error listing them, unless
  --random-inputs SEED is given; then each missing input is filled from its own
  std::mt19937_64 stream seeded from SEED and its name, so its values depend only on SEED and
  the name, never on which other inputs were given:
    floats   uniform in [-1, 1) (--dist uniform) or standard normal (--dist normal),
             rounded to the input's dtype
    integers uniform in [LO, HI) from --int-range LO,HI (default 0,10)
    bool     true or false with probability 1/2
  except inputs with role "state" (a training step's optimizer moments), which start at zero
  as in a fresh run (random second moments would be negative).

Checkpoints:
  --checkpoint DIR --graph NAME replaces FILE: the graph NAME of the checkpoint's model is
  compiled from the model file with the checkpoint's preset and --set entries (the
  vocabulary sizes among them) and the --dim entries given, and every input with role
  "param" is the checkpoint's tensor (its moving average where the run kept one). A
  parameter the checkpoint lacks, or holds with another shape, is an error naming it; the
  other inputs come from --inputs and --random-inputs as for a file. After
  `tgc train models/transformer.tg --preset tiny -o runs/tiny`, the encoder's memory of one
  random sentence is
  `tgc run --checkpoint runs/tiny --graph encode --dim B=1 --random-inputs 1 --int-range 1,10 --print`.

Outputs:
  The graph's results are written to the --outputs safetensors file under their value names
  (`return %y` writes tensor "y"), with the graph name in its metadata (and, with
  --checkpoint, the checkpoint file read). The file is written atomically. With --print, or
  when --outputs is not given, a summary of each result is printed to stdout: name, type,
  min/max/mean (NaNs counted apart) and the first values.

Backends:
  interp   the reference interpreter (the default): slow, obviously correct
  cpu      the graph compiled for this CPU (Kernel IR, LLVM, the packed GEMM), compiled
           kernels cached on disk ($TGC_CACHE_DIR, else ~/.cache/tgc; --no-cache skips the
           cache); threads from $TGC_NUM_THREADS (default: every core)
  cuda     the graph compiled for the first NVIDIA GPU (kernels through NVRTC, cached like
           the cpu backend's; the CUDA GEMM); without a driver or a device it stops with
           "no CUDA device: ..." and exit status 1 before anything is written
  A training step (outputs new.X for inputs X, from `tgc compile --train`) runs with X
  updated in place on the cpu backend; with --repeat N on either backend every run starts
  from the X the previous run wrote, like N training steps on one batch, and the outputs
  are those of the last run.

Passes:
  Before compiling, the cpu backend runs the forward fusions (fuse-norms, fuse-activations,
  fuse-attention, fuse-cross-entropy) through the pass manager; the interpreter and the
  cuda backend run the graph as given; --quantize int8 adds quantize. --print-pipeline
  shows the pipeline, --passes replaces it ('default' for the cpu's, 'none' for nothing),
  and --print-after-all, --print-changed, --dump-dir, --stop-after and --time-passes watch
  it as in tgc opt: the last file --dump-dir writes is the graph that runs.

Timing:
  --repeat N runs the graph N times and prints the compile time, the median run time and
  the executable's figures to stderr. --timing-json FILE writes them as JSON:
  {"backend", "compile_s", "run_s": [...], "median_s", "arena_bytes", "kernels", "gemms",
  "cache_hits", "threads"} (compile figures are 0 for the interpreter).

Examples:
  tgc run attn.tir --inputs in.safetensors --outputs out.safetensors
  tgc run attn.tir --random-inputs 1 --print
  tgc run attn.tir --random-inputs 7 --dist normal --f64 --outputs ref.safetensors
  tgc run attn.tir --backend cpu --random-inputs 1 --print
  tgc run attn.tir --backend cpu --random-inputs 1 --repeat 5 --timing-json timing.json
  tgc run attn.tir --backend cpu --random-inputs 1 --dump-dir dumps --time-passes

Integer inputs used as indices are checked on every backend before the graph runs: an index
outside its table (gather, scatter_add) or a target outside the logits
(softmax_cross_entropy) is an error naming the op, the input, the element's position and
its value. The compiled backends check the inputs that reach such an op directly or through
reshape, transpose, broadcast, slice, concat and widening casts (runtime/index_bounds.h);
the interpreter checks every index as it reads it.

Exit status: 0 on success; 1 with a message on stderr for an unreadable or invalid graph,
checkpoint or safetensors file, missing or mistyped inputs, a failing op (e.g. gather index
out of range), a graph the cpu backend cannot compile, or an output that cannot be written.
)";

std::string readAll(std::istream& in) {
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::unique_ptr<Graph> readGraph(const std::string& path) {
  if (path == "-") return parseGraph(readAll(std::cin), "<stdin>");
  if (path.size() > 5 && path.ends_with(".json")) {
    std::ifstream in(path);
    if (!in) throw ParseError(fmt::format("{}: error: cannot open file", path));
    return graphFromJsonText(readAll(in), path);
  }
  return parseGraphFile(path);
}

// ---- output summary --------------------------------------------------------------------------

std::string formatElement(const Tensor& t, int64_t i) {
  if (isFloat(t.dtype())) {
    double x = t.getF(i);
    return std::isnan(x) ? "nan" : fmt::format("{:.6g}", x);  // NaN's sign bit is noise
  }
  if (t.dtype() == DType::boolean) return t.getI(i) ? "true" : "false";
  return fmt::format("{}", t.getI(i));
}

std::string summarize(const std::string& name, const Tensor& t) {
  std::string s = fmt::format("%{}: {}", name, t.type().str());
  if (t.numel() == 0) return s + "  (empty)\n";
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0;
  int64_t nans = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double x = t.getF(i);
    if (std::isnan(x)) {
      ++nans;
      continue;
    }
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
  }
  if (nans < t.numel())
    s += fmt::format("  min {:.6g}  max {:.6g}  mean {:.6g}", lo, hi,
                     sum / static_cast<double>(t.numel() - nans));
  if (nans > 0) s += fmt::format("  nan {}", nans);
  constexpr int64_t kShown = 8;
  s += "\n  [";
  for (int64_t i = 0; i < std::min(t.numel(), kShown); ++i)
    s += (i ? ", " : "") + formatElement(t, i);
  if (t.numel() > kShown)
    s += fmt::format(", ...] (first {} of {})\n", kShown, t.numel());
  else
    s += "]\n";
  return s;
}

// ---- backends and timing ---------------------------------------------------------------------

struct Timing {
  double compile_s = 0;
  std::vector<double> run_s;
  runtime::ExecStats stats;
};

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Outputs new.X paired with inputs X of the same type: a training step's state.
std::vector<std::pair<size_t, std::string>> statePairs(const Graph& g) {
  std::vector<std::pair<size_t, std::string>> pairs;
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Value* out = g.outputs()[i];
    if (!out->name().starts_with("new.")) continue;
    const Value* in = g.findValue(out->name().substr(4));
    if (in && in->def()->op() == OpKind::Input && in->type() == out->type())
      pairs.emplace_back(i, in->name());
  }
  return pairs;
}

std::vector<Tensor> runInterp(const Graph& g, std::map<std::string, Tensor> inputs,
                              const RunOptions& o, Timing& timing) {
  InterpreterOptions io;
  io.promote_to_f64 = o.f64;
  const auto pairs = statePairs(g);
  std::vector<Tensor> results;
  for (int r = 0; r < o.repeat; ++r) {
    if (r > 0)
      for (const auto& [out, in] : pairs) inputs.insert_or_assign(in, results[out]);
    const auto t0 = std::chrono::steady_clock::now();
    results = Interpreter(io).run(g, inputs);
    timing.run_s.push_back(secondsSince(t0));
  }
  return results;
}

using LaunchTimes = std::vector<runtime::Executable::LaunchTime>;

// What --profile reports: with --repeat 2 or more, the runs after the first. The first run
// touches every buffer of the arena and the outputs for the first time, and its page
// faults (the kernel clears each new page, 2 MiB at a time for large buffers) land on
// whichever launch writes a buffer first: a 2 MiB bias add measured 1.1-1.7 ms a run
// averaged over 4 runs with the first, 0.10-0.13 ms without it (base bf16 step).
class ProfileWindow {
 public:
  explicit ProfileWindow(bool on, int repeat) : on_(on), skipFirst_(repeat > 1) {}
  // Called after each run: the first one's times are kept to be taken off at the end.
  template <class Exe>
  void afterRun(const Exe& exe, int run) {
    if (on_ && skipFirst_ && run == 0) first_ = exe.profile();
  }
  template <class Exe>
  LaunchTimes times(const Exe& exe) const {
    LaunchTimes now = exe.profile();
    for (size_t i = 0; i < now.size() && i < first_.size(); ++i) {
      now[i].seconds -= first_[i].seconds;
      now[i].stepSeconds -= first_[i].stepSeconds;
      now[i].runs -= first_[i].runs;
    }
    return now;
  }
  bool skipsFirst() const { return skipFirst_; }

 private:
  bool on_, skipFirst_;
  LaunchTimes first_;
};

// --profile: where the time of the runs went, launch by launch (most expensive first).
// The total is wall time: a GEMM pair (two launches side by side, one per thread) counts
// its wall time once; each of its launches lists the thread time spent on it (its own
// thread's, and the other's while it helped: codegen/gemm_pair_share.h), marked "(pair)".
// The pairs' idle share is a lower bound: an owner waiting for the helper's last block
// counts as busy. afterFirst: the runs exclude the first (ProfileWindow); else there was
// only the first, and the header says it includes the first-time costs.
void printProfile(LaunchTimes launches, size_t shown, bool afterFirst) {
  double total = 0, gemm = 0, pairWall = 0, pairOwn = 0;
  int paired = 0;
  for (size_t i = 0; i < launches.size(); ++i) {
    const auto& l = launches[i];
    if (l.partner >= 0) {
      ++paired;
      pairOwn += l.seconds;
    }
    if (l.partner >= 0 && l.partner < static_cast<int>(i)) continue;  // its pair is counted
    if (l.partner >= 0) pairWall += l.stepSeconds;
    const double wall = l.partner >= 0 ? l.stepSeconds : l.seconds;
    total += wall;
    if (l.gemm) gemm += wall;
  }
  const int64_t runs = launches.empty() ? 0 : launches.front().runs;
  std::stable_sort(launches.begin(), launches.end(),
                   [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  fmt::print(stderr,
             "tgc run: profile over {} run{}{}: {:.3f} ms per run in launches, GEMMs {:.1f}%, "
             "kernels {:.1f}%{}\n",
             runs, runs == 1 ? "" : "s",
             afterFirst ? " after the first"
                        : " (the first, which pays first-time costs such as the page faults of "
                          "every new buffer; --repeat 2 or more leaves it out)",
             runs ? total / static_cast<double>(runs) * 1e3 : 0.0,
             total > 0 ? 100 * gemm / total : 0.0, total > 0 ? 100 * (total - gemm) / total : 0.0,
             paired ? fmt::format("; pairs: {} launches ran side by side (each listed with the "
                                  "thread time spent on it; {:.3f} ms a run of wall, {:.1f}% of "
                                  "their two threads' time idle)",
                                  paired, runs ? pairWall / static_cast<double>(runs) * 1e3 : 0.0,
                                  pairWall > 0 ? 100 * (1 - pairOwn / (2 * pairWall)) : 0.0)
                    : std::string());
  for (size_t i = 0; i < std::min(shown, launches.size()); ++i)
    fmt::print(stderr, "  {:6.2f}%  {:9.3f} ms  {}{}\n",
               total > 0 ? 100 * launches[i].seconds / total : 0.0,
               runs ? launches[i].seconds / static_cast<double>(runs) * 1e3 : 0.0,
               launches[i].name, launches[i].partner >= 0 ? "  (pair)" : "");
}

std::vector<Tensor> runCpu(const Graph& source, std::map<std::string, Tensor> inputs,
                           const RunOptions& o, Timing& timing) {
  std::unique_ptr<Graph> promoted;
  const Graph* g = &source;
  if (o.f64) {  // the interpreter's --f64: every float op in float64
    promoted = promoteToF64(source);
    g = promoted.get();
    for (auto& [name, t] : inputs) t = toF64(t);
  }
  runtime::ExecOptions eo = runtime::ExecOptions::fromEnv();
  if (o.no_cache) eo.useCache = false;
  if (o.profile) eo.profile = true;
  eo.forwardFusions = false;  // runPipeline ran them, unless --passes left them out
  eo.updateInPlace = !statePairs(*g).empty();
  eo.constantParams = !eo.updateInPlace;  // every repeat runs on the same parameters
  const auto t0 = std::chrono::steady_clock::now();
  auto exe = runtime::Executable::compile(*g, eo);
  timing.compile_s = secondsSince(t0);
  timing.stats = exe->stats();
  // Compiling freed the lowered graph copies and LLVM's working memory; hand the heap's free
  // pages back before the run fills the arena, so they do not count in the peak.
  malloc_trim(0);

  std::vector<Tensor> results;
  ProfileWindow window(eo.profile, o.repeat);
  auto report = [&] {
    if (eo.profile)
      printProfile(window.times(*exe), static_cast<size_t>(o.profile_top), window.skipsFirst());
  };
  if (!eo.updateInPlace) {
    for (int r = 0; r < o.repeat; ++r) {
      const auto t1 = std::chrono::steady_clock::now();
      exe->run(inputs, results);  // over the last run's outputs
      timing.run_s.push_back(secondsSince(t1));
      window.afterRun(*exe, r);
    }
    report();
    return results;
  }
  runtime::ParamStore store;
  for (const std::string& name : exe->stateNames()) {
    auto it = inputs.find(name);
    if (it == inputs.end()) continue;  // runStep names it as missing
    store.set(name, std::move(it->second));
    inputs.erase(it);
  }
  std::map<std::string, Tensor> out;
  for (int r = 0; r < o.repeat; ++r) {
    const auto t1 = std::chrono::steady_clock::now();
    exe->runStep(store, inputs, out);  // over the last run's outputs, as a training loop would
    timing.run_s.push_back(secondsSince(t1));
    window.afterRun(*exe, r);
  }
  // The store dies here: move its tensors into the results instead of copying them, so
  // the process never holds the parameters and optimizer state twice (peak memory is
  // what bench/train_step_bench.py measures).
  std::map<std::string, size_t> taken;  // a value returned twice is copied the second time
  for (const Value* v : g->outputs()) {
    if (auto t = taken.find(v->name()); t != taken.end()) {
      results.push_back(results[t->second]);
      continue;
    }
    taken.emplace(v->name(), results.size());
    auto it = out.find(v->name());
    results.push_back(it != out.end() ? std::move(it->second)
                                      : std::move(store.at(v->name().substr(4))));
  }
  report();
  return results;
}

// The graph compiled for the GPU (runtime/cuda/cuda_executable.h). Without a device the
// compile throws "no CUDA device: ..." before anything runs or is written.
std::vector<Tensor> runCuda(const Graph& source, std::map<std::string, Tensor> inputs,
                            const RunOptions& o, Timing& timing) {
  std::unique_ptr<Graph> promoted;
  const Graph* g = &source;
  if (o.f64) {
    promoted = promoteToF64(source);
    g = promoted.get();
    for (auto& [name, t] : inputs) t = toF64(t);
  }
  runtime::cuda::CudaExecOptions eo = runtime::cuda::CudaExecOptions::fromEnv();
  if (o.no_cache) eo.useCache = false;
  if (o.profile) eo.profile = true;
  eo.updateInPlace = !statePairs(*g).empty();
  const auto t0 = std::chrono::steady_clock::now();
  auto exe = runtime::cuda::CudaExecutable::compile(*g, eo);
  timing.compile_s = secondsSince(t0);
  const auto& st = exe->stats();
  timing.stats.kernels = st.kernels;
  timing.stats.distinctKernels = st.distinctKernels;
  timing.stats.cacheHits = st.nvrtcCacheHits;
  timing.stats.gemms = st.gemms;
  timing.stats.arenaBytes = st.arenaBytes;
  timing.stats.bufferBytes = st.bufferBytes;

  std::vector<Tensor> results;
  ProfileWindow window(eo.profile, o.repeat);
  auto report = [&] {
    if (eo.profile)
      printProfile(window.times(*exe), static_cast<size_t>(o.profile_top), window.skipsFirst());
  };
  if (!eo.updateInPlace) {
    for (int r = 0; r < o.repeat; ++r) {
      const auto t1 = std::chrono::steady_clock::now();
      results.clear();  // the last run's outputs go before the next run's are allocated
      results = exe->run(inputs);
      timing.run_s.push_back(secondsSince(t1));
      window.afterRun(*exe, r);
    }
    report();
    return results;
  }
  // Training state stays on the device across --repeat runs and comes back at the end.
  runtime::ParamStore store;
  for (const std::string& name : exe->stateNames())
    if (auto it = inputs.find(name); it != inputs.end()) store.set(name, it->second);
  exe->loadState(store);
  std::map<std::string, Tensor> out;
  for (int r = 0; r < o.repeat; ++r) {
    const auto t1 = std::chrono::steady_clock::now();
    out.clear();
    out = exe->runStep(inputs);
    timing.run_s.push_back(secondsSince(t1));
    window.afterRun(*exe, r);
  }
  exe->saveState(store);
  report();
  for (const Value* v : g->outputs()) {
    auto it = out.find(v->name());
    results.push_back(it != out.end() ? it->second : store.at(v->name().substr(4)));
  }
  return results;
}

void reportTiming(const RunOptions& o, const Timing& t) {
  const bool cpu = o.backend == "cpu";
  const int threads = cpu ? ThreadPool::defaultNumThreads() : 1;
  if (o.repeat_opt->count()) {
    std::string what = fmt::format("tgc run: {} run{} on the {} backend, median {:.4g} ms",
                                   t.run_s.size(), t.run_s.size() == 1 ? "" : "s", o.backend,
                                   median(t.run_s) * 1e3);
    if (o.backend != "interp")
      what += fmt::format(
          "; compile {:.3f} s ({} kernels, {} distinct, {} cache hits; {} GEMMs), arena "
          "{:.1f} MiB (buffers {:.1f} MiB), {} thread{}",
          t.compile_s, t.stats.kernels, t.stats.distinctKernels, t.stats.cacheHits,
          t.stats.gemms,
          static_cast<double>(t.stats.arenaBytes) / (1 << 20),
          static_cast<double>(t.stats.bufferBytes) / (1 << 20), threads,
          threads == 1 ? "" : "s");
    std::cerr << what << "\n";
  }
  if (o.timing_json.empty()) return;
  nlohmann::json j;
  j["backend"] = o.backend;
  j["compile_s"] = t.compile_s;
  j["run_s"] = t.run_s;
  j["median_s"] = median(t.run_s);
  j["arena_bytes"] = t.stats.arenaBytes;
  j["kernels"] = t.stats.kernels;
  j["gemms"] = t.stats.gemms;
  j["cache_hits"] = t.stats.cacheHits;
  j["threads"] = threads;
  std::ofstream f(o.timing_json);
  f << j.dump(2) << "\n";
  f.close();
  if (!f) throw std::runtime_error(fmt::format("cannot write '{}'", o.timing_json));
}

// The passes a backend applies before it compiles: the CPU's forward fusions (then not run
// again by Executable::compile, so that what runs is what the pipeline printed); none for
// the interpreter, the reference, which runs the graph as given, nor for the CUDA backend;
// quantize after them with --quantize int8 (every backend runs the quantized graph).
Pipeline runPipeline(const RunOptions& o) {
  PipelineMode mode;
  mode.quantize = o.quantize == "int8";
  std::string text = o.passes;
  if (text.empty()) text = o.backend == "cpu" ? "default" : mode.quantize ? "quantize" : "none";
  return parsePipelineFor(text, mode);
}

void runGraph(const RunOptions& o) {
  if (o.dist != "uniform" && o.dist != "normal")
    throw std::runtime_error(fmt::format("--dist must be uniform or normal, not '{}'", o.dist));
  if (o.seed_opt->count()) parseIntRange(o.int_range);  // bad options fail before any work
  const Pipeline pipeline = runPipeline(o);  // a bad pipeline fails before any work
  if (o.print_pipeline) {
    fmt::print("{}\n", pipeline.str());
    return;
  }
  if (o.backend == "cuda") runtime::cuda::Device::open();  // no device: stop before any work
  std::unique_ptr<Graph> g;
  std::map<std::string, Tensor> params;  // a checkpoint's, for its graph's "param" inputs
  std::string checkpointFile;
  if (!o.checkpoint.empty()) {  // CLI11 keeps FILE out; --graph and --dim need it
    CheckpointGraph cg = checkpointGraph(o);
    g = std::move(cg.graph);
    params = std::move(cg.params);
    checkpointFile = cg.source;
  } else {
    g = readGraph(o.file);
  }
  PassManager pm(pipeline, o.pm);
  PassContext ctx;
  pm.run(*g, ctx);
  if (pipeline.contains("quantize") &&
      std::none_of(pm.history().begin(), pm.history().end(),
                   [](const PassRun& r) { return r.pass == "quantize" && r.changed; }))
    std::cerr << "tgc run: --quantize int8: no matmul by a parameter weight to quantize\n";
  auto inputs = gatherInputs(*g, o, std::move(params));

  Timing timing;
  std::vector<Tensor> results = o.backend == "cpu"    ? runCpu(*g, std::move(inputs), o, timing)
                                : o.backend == "cuda" ? runCuda(*g, std::move(inputs), o, timing)
                                                      : runInterp(*g, std::move(inputs), o, timing);
  reportTiming(o, timing);

  if (o.print || o.outputs.empty())
    for (size_t i = 0; i < results.size(); ++i)
      std::cout << summarize(g->outputs()[i]->name(), results[i]);
  std::cout.flush();
  if (o.outputs.empty()) return;
  // The results move into the file's map: a training step's outputs are its whole state,
  // and a copy of them would be the run's peak memory.
  TensorFile out;
  out.metadata["graph"] = g->name();
  if (o.seed_opt->count()) out.metadata["random_inputs_seed"] = std::to_string(o.seed);
  if (!checkpointFile.empty()) out.metadata["checkpoint"] = checkpointFile;
  for (size_t i = 0; i < results.size(); ++i)  // a value returned twice: written once
    out.tensors.try_emplace(g->outputs()[i]->name(), std::move(results[i]));
  writeSafetensors(o.outputs, out);
}

}  // namespace

void registerRun(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run a Graph IR file, or a graph of a trained checkpoint's model (reference "
      "interpreter or compiled for the CPU or GPU) on safetensors inputs");
  cmd->footer(kFooter);
  CLI::Option* file = cmd->add_option(
      "file", o->file,
      "Graph IR text file ('-' reads stdin; a name ending in .json reads the JSON form); "
      "not with --checkpoint");
  file->type_name("FILE");
  CLI::Option* checkpoint =
      cmd->add_option("-c,--checkpoint", o->checkpoint,
                      "Instead of FILE: a run directory (its newest checkpoint) or checkpoint "
                      "file; --graph NAME of its model runs with its parameters");
  checkpoint->type_name("DIR")->excludes(file);
  cmd->add_option("--graph", o->graph,
                  "With --checkpoint: the graph of the model to compile and run")
      ->type_name("NAME")
      ->needs(checkpoint);
  cmd->add_option("--dim", o->dims,
                  "With --checkpoint: bind a named dim, --dim B=16 (repeatable; default: the "
                  "model's)")
      ->type_name("N=V")
      ->needs(checkpoint);
  cmd->add_option("-i,--inputs", o->inputs, "safetensors file holding the graph's inputs by name")
      ->type_name("FILE");
  cmd->add_option("-o,--outputs", o->outputs,
                  "Write the graph's results to this safetensors file, named by value name")
      ->type_name("FILE");
  o->seed_opt = cmd->add_option("--random-inputs", o->seed,
                                "Fill inputs missing from --inputs with random values from SEED");
  o->seed_opt->type_name("SEED");
  cmd->add_option("--int-range", o->int_range, "Range [LO,HI) of random integer inputs, as LO,HI")
      ->type_name("LO,HI")
      ->capture_default_str();
  cmd->add_option("--dist", o->dist, "Distribution of random float inputs: uniform or normal")
      ->type_name("DIST")
      ->check(CLI::IsMember({"uniform", "normal"}))
      ->capture_default_str();
  cmd->add_flag("--print", o->print,
                "Print each result's type, min/max/mean and first values to stdout");
  cmd->add_option("--quantize", o->quantize,
                  "int8: matmuls by a parameter weight run in int8 (pass quantize: weights per "
                  "column, activations per row; VPDPBUSD where the host has it)")
      ->check(CLI::IsMember({"int8"}));
  cmd->add_option("-p,--passes", o->passes,
                  "Pass pipeline to run before compiling instead of the backend's own (cpu: the "
                  "forward fusions; interp and cuda: none; --quantize adds quantize): 'default' "
                  "stands for the fusions, 'none' for nothing (see tgc opt --help)")
      ->type_name("PIPELINE");
  cmd->add_flag("--print-pipeline", o->print_pipeline, "Print the pipeline that would run and exit");
  addPassManagerArgs(cmd, o->pm);
  cmd->add_flag("--f64", o->f64,
                "Compute every float op in float64 and return float64 results (inputs are "
                "widened)");
  cmd->add_option("--backend", o->backend,
                  "interp (the reference interpreter), cpu (compiled for this CPU) or cuda "
                  "(compiled for the GPU)")
      ->check(CLI::IsMember({"interp", "cpu", "cuda"}))
      ->capture_default_str();
  o->repeat_opt = cmd->add_option("--repeat", o->repeat,
                                  "Run N times; print the median run time and compile figures "
                                  "to stderr");
  o->repeat_opt->type_name("N")->check(CLI::PositiveNumber);
  cmd->add_option("--timing-json", o->timing_json,
                  "Write compile time, run times and executable figures to this JSON file")
      ->type_name("FILE");
  cmd->add_flag("--no-cache", o->no_cache,
                "cpu backend: compile every kernel, neither reading nor writing the kernel cache");
  cmd->add_flag("--profile", o->profile,
                "cpu and cuda backends: time every launch and print the most expensive ones "
                "to stderr (with --repeat 2 or more, over the runs after the first, which pays "
                "the first touch of every buffer)");
  cmd->add_option("--profile-top", o->profile_top,
                  "with --profile: how many launches to list (default 25)")
      ->type_name("N")
      ->check(CLI::PositiveNumber);
  cmd->callback([o] {
    // A usage error (CLI11's exit code and hint), as a missing positional FILE was.
    if (o->file.empty() && o->checkpoint.empty()) throw CLI::RequiredError("FILE or --checkpoint");
    try {
      runGraph(*o);
    } catch (const train::CheckpointError& e) {
      std::cerr << e.what() << "\n";  // already "file: error: ..."
      throw CLI::RuntimeError(1);
    } catch (const ParseError& e) {
      // Already "file:line:col: error: ..." (or "file: error: ..." for safetensors).
      std::string msg = e.what();
      std::cerr << msg << (msg.ends_with("\n") ? "" : "\n");
      throw CLI::RuntimeError(1);
    } catch (const std::exception& e) {
      std::cerr << "tgc run: error: " << e.what() << "\n";
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace tgc::cli
