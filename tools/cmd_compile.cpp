// `tgc compile`: lowers one graph of a model file (the model language, docs/language.md) to
// Graph IR and prints it as text, JSON or Graphviz; optionally runs a pass pipeline over it
// and prints statistics. With --target cpu it also compiles the graph for this CPU (filling
// the kernel cache) or dumps its kernels: Kernel IR, optimized LLVM IR or assembly.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <unordered_set>

#include "frontend/frontend.h"
#include "frontend/model_stats.h"
#include "ir/diagnostic.h"
#include "ir/graphviz.h"
#include "ir/json.h"
#include "ir/printer.h"
#include "passes/default_pipeline.h"
#include "passes/pass_manager.h"
#include "passes/train_step.h"
#include "codegen/cuda/cuda_batch.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/jit.h"
#include "codegen/kernel_ir.h"
#include "codegen/llvm_emitter.h"
#include "runtime/executable.h"
#include "runtime/memory_plan.h"
#include "tools/commands.h"
#include "tools/pass_args.h"
#include "tools/model_args.h"
#include "tools/model_warnings.h"

namespace tgc::cli {
namespace {

struct CompileOptions {
  ModelArgs model;
  WarningArgs warnings;
  std::string emit = "ir";
  std::string output;
  bool stats = false;
  int stats_top = 0;  // --stats-top N: the largest saved values and arena buffers at the peak
  bool list_graphs = false;
  bool list_params = false;
  std::string passes;  // empty: the default pipeline of the mode
  bool print_pipeline = false;
  PassManagerOptions pm;
  bool grad = false;   // append the backward graph
  bool train = false;  // append backward + AdamW: the training-step graph
  OptimizerConfig optim;
  std::string target;  // "", "cpu" or "cuda"
  std::string arch = "compute_90";  // --target cuda: NVRTC's architecture
  bool no_cache = false;
};

constexpr const char* kFooter = R"(
Examples:
  tgc compile models/transformer.tg --preset tiny --graph encode
  tgc compile models/transformer.tg --preset base --set p_drop=0.2 --dim B=32 --dim S=50
  tgc compile models/gpt.tg --stats
  tgc compile models/transformer.tg --passes='default,fixpoint(canonicalize,cse,dce)' --emit=dot -o t.dot
  tgc compile models/transformer.tg --preset tiny --graph encode --passes=none
  tgc compile models/transformer.tg --preset tiny --train --print-pipeline
  tgc compile models/transformer.tg --preset tiny --train --dump-dir dumps --time-passes
  tgc compile models/transformer.tg --preset tiny --graph encode --target cpu --emit=kernel
  tgc compile models/transformer.tg --preset tiny --train --target cpu --stats
  tgc compile models/transformer.tg --preset tiny --train --precision bf16 --stats
  tgc compile models/transformer.tg --preset tiny --graph encode --target cuda --emit=cuda

--target cpu compiles the graph for this CPU: every kernel is JIT-compiled through LLVM
and kept in the kernel cache ($TGC_CACHE_DIR, else ~/.cache/tgc; --no-cache bypasses it),
so a later `tgc run --backend cpu` of the same graph loads them; --stats then adds the
kernel and GEMM counts, the arena size and the compile time. --emit=kernel, llvm or asm
(these imply --target cpu) print each kernel instead of the graph, after a header line
naming it: its Kernel IR, its LLVM IR after the O3 pipeline, or its assembly.

--target cuda prints the same kernels for NVIDIA GPUs, no GPU needed: --emit=cuda as CUDA
C++ (the shared helpers once, then one extern "C" __global__ function per kernel, see
codegen/cuda/cuda_emitter.h), --emit=ptx compiled by NVRTC (the CUDA toolkit's libnvrtc,
opened at run time) for --arch (default compute_90), kernels grouped in modules. Without
--emit it compiles every kernel to PTX (filling the cache) and says how long it took.

--stats prints the parameter count, the op count by kind and an estimated FLOP count
instead of the graph (the graph still goes to -o FILE when one is given). With --grad or
--train it adds the saved activations (forward values the backward reads, bytes) and,
compiling the step for this CPU, its launches by kind (generated kernels, GEMMs, library
kernels; views launch nothing). --params lists
every parameter with its type and initializer. Imports are looked up next to the importing
file, then in each --lib DIR, then in $TGC_LIB_PATH and the built-in models/lib.

The graph is printed after the pipeline its target runs (--print-pipeline shows it): for
an inference graph the forward fusions, as tgc run applies them; with --grad also autodiff;
with --train the training step as tgc train builds it (fusions, autodiff, fuse-ffn, a
canonicalize/cse/dce clean-up, adamw, rematerialize). --passes replaces it: 'default'
stands for it (--passes=default,cse) and --passes=none prints the raw lowering. --print-after-all, --print-changed, --dump-dir,
--stop-after and --time-passes watch it pass by pass (tgc opt --help).

--precision bf16 runs the matmuls (forward and, with --grad/--train, backward) with bf16
operands and f32 accumulation: mixed-precision after the forward fusions, merge-casts after
autodiff (passes/mixed_precision.cpp); parameters, gradients, the optimizer and every other
op stay f32.

Exit status: 0 on success; 1 with every diagnostic on stderr ("file:line:col: error: ...").
)";

std::string render(const Graph& g, const std::string& emit) {
  if (emit == "json") return graphToJson(g).dump(2) + "\n";
  if (emit == "dot") return graphToDot(g);
  return printGraph(g);
}

void writeOut(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::cout << text;
    std::cout.flush();
    return;
  }
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) throw std::runtime_error(fmt::format("cannot write '{}'", path));
}

// --grad / --train: the loss becomes outputs[0] (the other outputs follow as metrics), so
// that autodiff differentiates it and the training step's update follows it.
void lossFirst(CompiledModel& m, const CompileOptions& o) {
  Graph& g = *m.graph;
  if (m.loss_output < 0)
    throw std::runtime_error(fmt::format("--{}: graph @{} has no output named loss",
                                         o.train ? "train" : "grad", g.name()));
  std::vector<Value*> outs{g.outputs()[m.loss_output]};
  for (size_t i = 0; i < g.outputs().size(); ++i)
    if (static_cast<int>(i) != m.loss_output) outs.push_back(g.outputs()[i]);
  g.setOutputs(outs);
}

PipelineMode pipelineMode(const CompileOptions& o) {
  PipelineMode mode;
  mode.kind = o.train  ? PipelineMode::Kind::TrainStep
              : o.grad ? PipelineMode::Kind::Gradients
                       : PipelineMode::Kind::Forward;
  mode.precision = o.optim.precision;
  return mode;
}

bool emitsKernels(const CompileOptions& o) {
  return o.emit == "kernel" || o.emit == "llvm" || o.emit == "asm" || o.emit == "cuda" ||
         o.emit == "ptx";
}

// --target cuda: the kernels as CUDA C++ (--emit=cuda) or PTX (--emit=ptx, or nothing
// printed: compile only). Kernel IR (--emit=kernel) is the CPU's; LLVM and assembly are not.
std::string renderCudaKernels(const Graph& g, const CompileOptions& o) {
  const std::vector<codegen::kir::Kernel> kernels = runtime::lowerGraphKernels(g);
  if (o.emit == "cuda") {
    std::string out = codegen::cuda::cudaPreamble();
    for (const auto& k : kernels) out += "\n" + codegen::cuda::kernelFunction(k);
    return out;
  }
  std::vector<const codegen::kir::Kernel*> ptrs;
  for (const auto& k : kernels) ptrs.push_back(&k);
  const auto t0 = std::chrono::steady_clock::now();
  codegen::cuda::NvrtcOptions options = codegen::cuda::NvrtcOptions::fromEnv();
  if (o.no_cache) options.useCache = false;
  const auto modules = codegen::cuda::compileKernelModules(ptrs, codegen::cuda::Product::Ptx,
                                                           o.arch, 64, 0, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (o.emit != "ptx") {
    size_t hits = 0;
    for (const auto& m : modules) hits += m.compiled.cacheHit ? 1 : 0;
    return fmt::format("target cuda: {} kernels in {} PTX modules for {} ({} from the cache); "
                       "compiled in {:.3f} s\n",
                       kernels.size(), modules.size(), o.arch, hits, seconds);
  }
  std::string out;
  for (size_t i = 0; i < modules.size(); ++i) {
    out += fmt::format("// module {}: kernels", i);
    for (const auto& n : modules[i].names) out += " " + n;
    out += "\n" + modules[i].compiled.image;
    if (!out.ends_with("\n")) out += "\n";
    out += "\n";
  }
  return out;
}

// --emit=kernel|llvm|asm: every kernel the CPU executable would run, in launch order.
std::string renderKernels(const Graph& g, const std::string& emit) {
  const codegen::TargetSpec target = codegen::TargetSpec::host();
  std::string out;
  for (const auto& k : runtime::lowerGraphKernels(g)) {
    if (emit == "kernel")
      out += fmt::format("; kernel {}\n{}", k.name, codegen::kir::print(k));
    else if (emit == "llvm")
      out += fmt::format("; kernel {}\n{}", k.name, codegen::kernelLLVMIR(k, target));
    else
      out += fmt::format("# kernel {}\n{}", k.name, codegen::kernelAssembly(k, target));
    if (!out.ends_with("\n")) out += "\n";
    out += "\n";
  }
  return out;
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// --stats-top N: the launch where the most arena bytes are live, and the N largest buffers
// live there (what a smaller arena has to shorten or recompute).
std::string arenaPeak(const runtime::Executable& exe, int top) {
  if (top <= 0) return "";
  const auto buffers = exe.arenaBuffers();
  int last = 0;
  for (const auto& b : buffers) last = std::max(last, b.last);
  std::vector<int64_t> delta(static_cast<size_t>(last) + 2, 0);
  for (const auto& b : buffers) {
    delta[static_cast<size_t>(b.first)] += runtime::alignedSize(b.bytes);
    delta[static_cast<size_t>(b.last) + 1] -= runtime::alignedSize(b.bytes);
  }
  int peak = 0;
  int64_t live = 0, most = -1;
  for (size_t i = 0; i < delta.size(); ++i)
    if ((live += delta[i]) > most) most = live, peak = static_cast<int>(i);
  std::vector<runtime::Executable::ArenaBuffer> at;
  for (const auto& b : buffers)
    if (b.first <= peak && peak <= b.last) at.push_back(b);
  std::stable_sort(at.begin(), at.end(), [](const auto& x, const auto& y) { return x.bytes > y.bytes; });
  const auto names = exe.launchNames();
  std::string out = fmt::format(
      "arena peak: {:.2f} MiB in {} buffers live at launch {} of {} ({}); the largest:\n",
      mib(most), at.size(), peak, names.size(),
      peak < static_cast<int>(names.size()) ? names[static_cast<size_t>(peak)] : "the end");
  for (size_t i = 0; i < std::min(at.size(), static_cast<size_t>(top)); ++i)
    out += fmt::format("  {:9.2f} MiB  %{}  (launches {}..{})\n", mib(at[i].bytes),
                       at[i].value, at[i].first, at[i].last);
  return out;
}

// --target cpu: compiles the executable (filling the kernel cache) and describes it.
std::string compileForCpu(const Graph& g, const CompileOptions& o) {
  runtime::ExecOptions eo = runtime::ExecOptions::fromEnv();
  if (o.no_cache) eo.useCache = false;
  const auto t0 = std::chrono::steady_clock::now();
  auto exe = runtime::Executable::compile(g, eo);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const runtime::ExecStats& s = exe->stats();
  return fmt::format(
      "target cpu: {} kernel launches ({} distinct kernels, {} from the cache), {} GEMMs, {} "
      "views; arena {:.2f} MiB (buffers {:.2f} MiB, peak live {:.2f} MiB); compiled in {:.3f} "
      "s\nlaunches per run: {} ({} generated kernels, {} GEMMs, {} library kernels); {} GEMM pairs "
      "run side by side; {} casts to bf16 rounded inside GEMMs\n",
      s.kernels, s.distinctKernels, s.cacheHits, s.gemms, s.views,
      static_cast<double>(s.arenaBytes) / (1 << 20), static_cast<double>(s.bufferBytes) / (1 << 20),
      static_cast<double>(s.peakLiveBytes) / (1 << 20), seconds,
      s.kernels + s.gemms + s.libraryCalls, s.kernels, s.gemms, s.libraryCalls, s.gemmPairs,
      s.castsInGemms) +
      arenaPeak(*exe, o.stats_top);
}

// --stats with --grad / --train: the activations the backward reads. A forward value is one
// the loss depends on (computed, not an input or constant); it is saved when a node outside
// the loss's ancestry (the backward, the optimizer) reads it. A reshape shares its operand's
// memory, so values are counted once per underlying buffer.
std::string savedActivations(const Graph& g, int top) {
  std::unordered_set<const Node*> forward;
  std::vector<const Node*> work{g.outputs().at(0)->def()};
  while (!work.empty()) {
    const Node* n = work.back();
    work.pop_back();
    if (!forward.insert(n).second) continue;
    for (const Value* v : n->operands()) work.push_back(v->def());
  }
  auto root = [](const Value* v) {
    while (v->def()->op() == OpKind::Reshape) v = v->def()->operand(0);
    return v;
  };
  std::unordered_set<const Value*> saved;
  for (const auto& n : g.nodes()) {
    if (forward.count(n.get())) continue;
    for (const Value* v : n->operands()) {
      const Node* d = root(v)->def();
      if (forward.count(d) && d->op() != OpKind::Input && d->op() != OpKind::Constant)
        saved.insert(root(v));
    }
  }
  auto size = [](const Value* v) {
    return v->type().numel() * static_cast<int64_t>(dtypeSize(v->type().dtype));
  };
  int64_t bytes = 0;
  for (const Value* v : saved) bytes += size(v);
  std::string out =
      fmt::format("saved activations: {} forward values read by the backward, {:.2f} MiB\n",
                  saved.size(), mib(bytes));
  // --stats-top N: the largest, by size then name (deterministic).
  std::vector<const Value*> largest(saved.begin(), saved.end());
  std::sort(largest.begin(), largest.end(), [&](const Value* a, const Value* b) {
    return size(a) != size(b) ? size(a) > size(b) : a->name() < b->name();
  });
  for (size_t i = 0; i < std::min(largest.size(), static_cast<size_t>(std::max(top, 0))); ++i)
    out += fmt::format("  {:9.2f} MiB  %{}  {} = {}\n", mib(size(largest[i])), largest[i]->name(),
                       largest[i]->type().str(), opName(largest[i]->def()->op()));
  return out;
}

void runCompile(const CompileOptions& o) {
  ModelOptions mo = toModelOptions(o.model);
  // The pipeline its target runs unless --passes names another; checked before compiling
  // what may be a large model.
  const Pipeline pipeline = parsePipelineFor(o.passes.empty() ? "default" : o.passes, pipelineMode(o));
  if (o.print_pipeline) {
    fmt::print("{}\n", pipeline.str());
    return;
  }
  PassManager pm(pipeline, o.pm);
  CompiledModel m = compileModelFile(o.model.model, mo);
  reportWarnings(m, o.warnings);
  if (o.list_graphs) {
    for (const auto& n : m.graph_names) fmt::print("{}\n", n);
    return;
  }
  if (o.grad || o.train) lossFirst(m, o);
  PassContext ctx;
  ctx.optimizer = o.optim;
  for (const auto& [k, v] : m.config)
    if (k == "d_model" && std::holds_alternative<int64_t>(v)) ctx.optimizer.d_model = std::get<int64_t>(v);
  pm.run(*m.graph, ctx);
  if (o.list_params) {
    for (const auto& p : m.params)
      fmt::print("{}  {}  {}({})\n", p.name, p.type.str(), p.kind, p.arg);
    return;
  }
  if (o.target == "cuda") {
    if (o.stats) fmt::print("{}", formatStats(computeStats(*m.graph)));
    if (o.emit == "llvm" || o.emit == "asm")
      throw std::runtime_error("--target cuda prints --emit=cuda, ptx or kernel, not " + o.emit);
    if (o.emit == "kernel") {
      writeOut(o.output, renderKernels(*m.graph, o.emit));
    } else if (o.emit == "cuda" || o.emit == "ptx") {
      writeOut(o.output, renderCudaKernels(*m.graph, o));
    } else {
      fmt::print("{}", renderCudaKernels(*m.graph, o));
      if (!o.output.empty()) writeOut(o.output, render(*m.graph, o.emit));
    }
    return;
  }
  if (o.emit == "cuda" || o.emit == "ptx")
    throw std::runtime_error("--emit=" + o.emit + " needs --target cuda");
  if (emitsKernels(o)) {
    if (o.stats) fmt::print("{}", compileForCpu(*m.graph, o));
    writeOut(o.output, renderKernels(*m.graph, o.emit));
    return;
  }
  if (o.stats) {
    fmt::print("{}", formatStats(computeStats(*m.graph)));
    const bool step = o.grad || o.train;
    if (step) fmt::print("{}", savedActivations(*m.graph, o.stats_top));
    // A training step's launch counts come from compiling it, with or without --target cpu.
    if (!o.target.empty() || step) fmt::print("{}", compileForCpu(*m.graph, o));
    if (!o.output.empty()) writeOut(o.output, render(*m.graph, o.emit));
    return;
  }
  if (!o.target.empty()) compileForCpu(*m.graph, o);
  writeOut(o.output, render(*m.graph, o.emit));
}

}  // namespace

void registerCompile(CLI::App& app) {
  auto o = std::make_shared<CompileOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compile", "Lower a graph of a model file (.tg) to Graph IR and print it");
  cmd->footer(kFooter);
  addModelArgs(cmd, o->model);
  addWarningArgs(cmd, o->warnings);
  cmd->add_option("--emit", o->emit,
                  "Output form: ir (text), json or dot (Graphviz); with --target cpu also "
                  "kernel (Kernel IR), llvm (optimized LLVM IR) or asm, one kernel after another; "
                  "with --target cuda: cuda (CUDA C++) or ptx")
      ->check(CLI::IsMember({"ir", "json", "dot", "kernel", "llvm", "asm", "cuda", "ptx"}));
  cmd->add_option("--target", o->target,
                  "Compile the graph for this target: cpu (JIT-compile its kernels into the "
                  "kernel cache) or cuda (CUDA C++ through NVRTC to PTX; no GPU needed)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--arch", o->arch,
                  "With --target cuda: NVRTC's architecture, compute_XY for PTX (default "
                  "compute_90)");
  cmd->add_flag("--no-cache", o->no_cache,
                "With --target cpu or cuda: compile every kernel, neither reading nor writing "
                "the kernel cache");
  cmd->add_option("-o,--output", o->output, "Write the graph to this file instead of stdout");
  cmd->add_flag("--stats", o->stats,
                "Print parameter count, ops by kind and estimated FLOPs; with --grad/--train "
                "also saved activations and launches per step by kind");
  cmd->add_option("--stats-top", o->stats_top,
                  "With --stats: also list the N largest saved activations and the N largest "
                  "arena buffers live at the arena's peak")
      ->type_name("N")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--list-graphs", o->list_graphs, "List the graphs of the model and exit");
  cmd->add_flag("--params", o->list_params, "List the parameters with their types and initializers");
  cmd->add_flag("--grad", o->grad,
                "Append the backward graph: outputs become loss, the other outputs, then "
                "grad.<param> for every parameter");
  cmd->add_flag("--train", o->train,
                "Build the training step: forward, loss, backward and the AdamW update in one "
                "graph (new inputs adam.m/v.<param> and step; outputs loss, metrics, grad_norm, "
                "lr, then new.<param> and new.adam.m/v.<param>)");
  cmd->add_option("--schedule", o->optim.schedule,
                  "With --train: learning-rate schedule, noam (the paper's warm-up) or constant")
      ->check(CLI::IsMember({"noam", "constant"}));
  cmd->add_option("--lr", o->optim.lr, "With --train --schedule=constant: the learning rate");
  cmd->add_option("--lr-scale", o->optim.lr_scale, "With --train: factor on the noam schedule");
  cmd->add_option("--warmup", o->optim.warmup, "With --train: warm-up steps of the noam schedule")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--clip-norm", o->optim.clip_norm,
                  "With --train: clip gradients to this global L2 norm (0: off)");
  cmd->add_option("--weight-decay", o->optim.weight_decay,
                  "With --train: decoupled weight decay (AdamW)");
  addPrecisionOption(cmd, o->optim.precision);
  cmd->add_option("-p,--passes", o->passes,
                  "Pass pipeline to run on the lowered graph instead of the default one of the "
                  "mode (see tgc opt --help): 'default' stands for that pipeline, 'none' for "
                  "nothing (the raw lowering)");
  cmd->add_flag("--print-pipeline", o->print_pipeline,
                "Print the pipeline that would run (the default one of the mode, or --passes "
                "expanded) and exit");
  addPassManagerArgs(cmd, o->pm);
  cmd->callback([o] {
    try {
      runCompile(*o);
    } catch (const ParseError& e) {
      // Every diagnostic, already "file:line:col: error: ..." with the line and a caret.
      std::string msg = e.what();
      std::cerr << msg << (msg.ends_with("\n") ? "" : "\n");
      throw CLI::RuntimeError(1);
    } catch (const std::exception& e) {
      std::cerr << "tgc compile: error: " << e.what() << "\n";
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace tgc::cli
