#include "runtime/cuda/cuda_executable.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/lower.h"
#include "ir/env_flag.h"
#include "runtime/cuda/cuda_gemm.h"
#include "runtime/cuda/cuda_library.h"
#include "runtime/graph_walk.h"
#include "runtime/index_bounds.h"
#include "runtime/kernel_identity.h"
#include "runtime/matmul_gemm.h"
#include "runtime/memory_plan.h"
#include "runtime/param_store.h"
#include "support/thread_pool.h"

namespace tgc::runtime::cuda {

namespace kir = codegen::kir;

namespace {

constexpr int kEnd = std::numeric_limits<int>::max();
constexpr int64_t kDeviceAlignment = 256;  // cuMemAlloc's own alignment


int64_t alignUp(int64_t bytes, int64_t to) { return (bytes + to - 1) / to * to; }

// Where a graph value lives on the device.
enum class SlotKind {
  Arena,     // planned: intermediates, uploaded inputs, outputs
  Constant,  // in the constant allocation, uploaded at compile time
  State,     // in the persistent state allocation (stateful mode)
};

struct Slot {
  SlotKind kind = SlotKind::Arena;
  int64_t offset = 0;  // in its allocation
  int64_t bytes = 0;
  std::string name;
  int first = 0;       // Arena: the launch writing it (0 for inputs, uploaded before)
  int lastUse = 0;     // the last launch reading it (kEnd: downloaded after the run)
};

struct Launch {
  enum class Kind { Kernel, Gemm, Library } kind = Kind::Kernel;
  std::string name;
  size_t kernel = 0;            // Kernel: index into Impl::kernels
  int64_t extent = 1;           // Kernel: parallel iterations
  CudaGemmDesc gemm;            // Gemm: slots are A, B, C
  const Node* node = nullptr;   // Library: the node (in Impl::graph), bound on the device
  CudaLibraryLaunch library;    // Library: slots are the operands, then the results
  size_t libraryOperands = 0;
  std::vector<int> slots;       // one per kernel buffer
  double seconds = 0;           // with CudaExecOptions::profile: device time over all runs
  int64_t runs = 0;
};

struct CompiledKernel {
  codegen::cuda::CudaKernel cuda;
  std::unique_ptr<Module> module;
  CUfunction fn = nullptr;
};

// The matmul's GEMM (runtime/matmul_gemm.h, as on the CPU), within the CUDA GEMM's limits.
CudaGemmDesc gemmDescFor(const Node& n) {
  CudaGemmDesc d = matmulGemmDesc<CudaGemmDesc>(n);
  if (d.batch.size() > static_cast<size_t>(kMaxGemmBatchDims))
    throw IRError(fmt::format("{}: {} batch dimensions that do not merge (the CUDA GEMM takes {})",
                              describeNode(n), d.batch.size(), kMaxGemmBatchDims));
  try {
    d.validate();
  } catch (const std::invalid_argument& e) {
    throw IRError(fmt::format("{}: {}", describeNode(n), e.what()));
  }
  return d;
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

CudaExecOptions CudaExecOptions::fromEnv() {
  CudaExecOptions o;
  o.fuse = !envFlag("TGC_NO_FUSION");
  o.poisonArena = envFlag("TGC_POISON");
  o.useCache = !envFlag("TGC_NO_CACHE");
  o.profile = envFlag("TGC_PROFILE");
  return o;
}

struct CudaExecutable::Impl {
  CudaExecOptions opts;
  std::shared_ptr<Device> device;
  std::unique_ptr<Stream> stream;
  std::unique_ptr<CudaGemm> gemm;  // loaded when the graph has a matmul
  std::unique_ptr<CudaLibrary> library;  // loaded when it has a library op

  std::unique_ptr<Graph> graph;  // the compiled copy (library launches point into it)
  std::vector<Slot> slots;
  std::vector<Launch> launches;
  std::vector<kir::Kernel> distinct;    // layout: one per compiled kernel
  std::vector<Tensor> constants;        // layout: values, uploaded by materialize
  std::vector<int> constantSlots;
  std::vector<CompiledKernel> kernels;  // distinct kernels, compiled
  struct IO {
    std::string name;
    TensorType type;
    int slot = -1;
    bool state = false;  // input: lives in the state allocation; output: a new.X
    bool resident = false;  // input: read from bound DeviceTensors, never uploaded
  };
  std::vector<IO> inputs, outputs;
  struct StateCopy {
    int src, dst;
    int64_t bytes;
  };
  std::vector<StateCopy> copies;
  std::vector<std::string> stateNames;
  bool stateLoaded = false;
  // Integer inputs used as indices, checked on the host before each upload (their slot:
  // the position in `inputs`); the kernels do not check them.
  std::vector<IndexBound> indexBounds;

  DeviceBuffer arena, constantMem, stateMem;
  std::vector<CUdeviceptr> slotPtr;
  std::vector<std::unique_ptr<Event>> marks;  // profile: before each launch, after the last
  CudaExecStats stats;

  // Host work: slots, launches, lowered kernels, the memory plan (no device needed).
  void layout(const Graph& g);
  void plan();
  // Device work: allocations, constants, compiled and loaded kernels, bound library ops.
  void materialize();
  void compileKernels();
  CUdeviceptr ptr(int slot) const { return slotPtr[static_cast<size_t>(slot)]; }
  // Uploads `given` (one per input; null for state inputs), runs, and downloads the
  // outputs not skipped.
  std::vector<Tensor> execute(const std::vector<const Tensor*>& given, bool skipState);
  // The tensor in `from` of each input (null for a state input with `skipState`); throws
  // naming every missing input, or a mistyped one and `where` it came from.
  std::vector<const Tensor*> gather(const std::map<std::string, Tensor>& from, bool skipState,
                                    const char* where) const;
};

std::unique_ptr<CudaExecutable> CudaExecutable::compile(const Graph& g,
                                                        const CudaExecOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  auto impl = std::make_unique<Impl>();
  impl->opts = opts;
  impl->device = Device::open(opts.device);  // no device: NoDeviceError before any work
  impl->stream = std::make_unique<Stream>(impl->device);
  impl->layout(g);
  impl->materialize();
  impl->stats.compileSeconds = secondsSince(t0);
  return std::unique_ptr<CudaExecutable>(new CudaExecutable(std::move(impl)));
}

CudaExecutable::Layout CudaExecutable::layout(const Graph& g, const CudaExecOptions& opts) {
  Impl impl;
  impl.opts = opts;
  impl.layout(g);
  Layout out;
  out.stats = impl.stats;
  for (const Launch& l : impl.launches) out.launches.push_back(l.name);
  return out;
}

void CudaExecutable::Impl::layout(const Graph& source) {
  graph = source.clone();
  graph->removeDeadNodes();

  // State inputs: X with an output new.X of the same type.
  std::set<std::string> stateInputs;
  if (opts.updateInPlace)
    for (const Value* out : graph->outputs())
      if (out->name().starts_with("new."))
        if (const Value* in = graph->findValue(out->name().substr(4));
            in && in->def()->op() == OpKind::Input && in->type() == out->type())
          stateInputs.insert(in->name());

  std::unordered_map<const Value*, int> slotOf;
  auto newSlot = [&](const Value& v, SlotKind kind) {
    Slot s;
    s.kind = kind;
    s.bytes = static_cast<int64_t>(v.type().numel() * dtypeSize(v.type().dtype));
    s.name = v.name();
    slots.push_back(std::move(s));
    slotOf[&v] = static_cast<int>(slots.size()) - 1;
    return static_cast<int>(slots.size()) - 1;
  };
  auto use = [&](int slot, int launch) {
    slots[slot].lastUse = std::max(slots[slot].lastUse, launch);
  };

  std::unordered_map<std::string, size_t> byKey;
  KernelNameUniquer uniqueName;
  const auto groups = kernelGroups(*graph, opts.fuse);
  for (const auto& node : graph->nodes()) {
    const Node& n = *node;
    const int launch = static_cast<int>(launches.size());
    switch (codegen::classify(n)) {
      case codegen::NodeExecution::Source: {
        if (n.op() == OpKind::Input) {
          const bool state = stateInputs.count(n.result()->name()) > 0;
          const int s = newSlot(*n.result(), state ? SlotKind::State : SlotKind::Arena);
          inputs.push_back({n.result()->name(), n.result()->type(), s, state});
          if (state) stateNames.push_back(n.result()->name());
          break;
        }
        std::vector<Tensor> values = sourceValues(n);
        for (size_t i = 0; i < values.size(); ++i) {
          constantSlots.push_back(newSlot(*n.result(i), SlotKind::Constant));
          constants.push_back(std::move(values[i]));
        }
        break;
      }
      case codegen::NodeExecution::View: {
        slotOf[n.result()] = slotOf.at(viewedValue(n));
        ++stats.views;
        break;
      }
      case codegen::NodeExecution::Gemm: {
        Launch l;
        l.kind = Launch::Kind::Gemm;
        l.name = "gemm:" + n.result()->name();
        l.gemm = gemmDescFor(n);
        l.slots = {slotOf.at(n.operand(0)), slotOf.at(n.operand(1)),
                   newSlot(*n.result(), SlotKind::Arena)};
        slots[l.slots[2]].first = launch;
        for (int s : l.slots) use(s, launch);
        launches.push_back(std::move(l));
        ++stats.gemms;
        break;
      }
      case codegen::NodeExecution::Library: {
        libraryKernelsFor(n);  // an op or dtype without a GPU kernel fails here
        Launch l;
        l.kind = Launch::Kind::Library;
        l.name = "library:" + n.result()->name();
        l.node = &n;
        l.libraryOperands = n.operands().size();
        for (const Value* v : n.operands()) l.slots.push_back(slotOf.at(v));
        for (size_t i = 0; i < n.numResults(); ++i) {  // each result its own buffer
          const int slot = newSlot(*n.result(i), SlotKind::Arena);
          slots[slot].first = launch;
          l.slots.push_back(slot);
        }
        for (int s : l.slots) use(s, launch);
        launches.push_back(std::move(l));
        ++stats.libraryLaunches;
        break;
      }
      case codegen::NodeExecution::Kernel: {
        auto group = groups.find(&n);
        if (group == groups.end()) break;  // computed inside another node's kernel
        codegen::LoweredKernel lk = codegen::lowerGroup(group->second);
        Launch l;
        l.kind = Launch::Kind::Kernel;
        l.extent = lk.kernel.parallelExtent;
        for (size_t b = 0; b < lk.kernel.buffers.size(); ++b) {
          const Value* v = lk.values.at(b);
          int slot;
          if (lk.kernel.buffers[b].access != kir::Access::Read && !slotOf.count(v)) {
            slot = newSlot(*v, SlotKind::Arena);
            slots[slot].first = launch;
          } else {
            slot = slotOf.at(v);
          }
          use(slot, launch);
          l.slots.push_back(slot);
        }
        // Unique launch names (as the CPU executable's) for profiles and dumps; a launch
        // of a kernel compiled before runs that kernel under its first name.
        lk.kernel.name = uniqueName(lk.kernel.name);
        l.name = lk.kernel.name;
        auto [it, fresh] = byKey.emplace(structuralKernelKey(lk.kernel), distinct.size());
        if (fresh) distinct.push_back(std::move(lk.kernel));
        l.kernel = it->second;
        launches.push_back(std::move(l));
        ++stats.kernels;
        break;
      }
    }
  }
  for (const Value* v : graph->outputs()) {
    const bool state = opts.updateInPlace && v->name().starts_with("new.") &&
                       stateInputs.count(v->name().substr(4));
    outputs.push_back({v->name(), v->type(), slotOf.at(v), state});
    use(outputs.back().slot, kEnd);
  }
  // new.X is copied over X after the last launch. A new.X living in another state
  // input's memory could be overwritten by an earlier copy: no training step does that.
  for (const IO& out : outputs) {
    if (!out.state) continue;
    const int x = slotOf.at(graph->findValue(out.name.substr(4)));
    if (out.slot == x) continue;
    if (slots[out.slot].kind == SlotKind::State)
      throw IRError(fmt::format("output %{} is the state input %{}: not supported on CUDA",
                                out.name, slots[out.slot].name));
    copies.push_back({out.slot, x, slots[x].bytes});
  }
  stats.stateCopies = static_cast<int>(copies.size());
  stats.distinctKernels = static_cast<int>(distinct.size());
  indexBounds = findIndexBounds(*graph);
  for (IndexBound& b : indexBounds)
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].name == b.input) b.slot = static_cast<int>(i);
  plan();
}

void CudaExecutable::Impl::materialize() {
  arena = DeviceBuffer(device, stats.arenaBytes, "the arena");
  if (!opts.sharedState)  // else bound from a DeviceTensors (bindTensors)
    stateMem = DeviceBuffer(device, stats.stateBytes, "the training state");
  constantMem = DeviceBuffer(device, stats.constantBytes, "the constants");
  for (size_t i = 0; i < constants.size(); ++i)
    stream->upload(constantMem.ptr() + static_cast<CUdeviceptr>(slots[constantSlots[i]].offset),
                   constants[i].data(), slots[constantSlots[i]].bytes);
  stream->synchronize();
  constants.clear();  // on the device now

  compileKernels();
  distinct.clear();
  for (Launch& l : launches) {
    if (l.kind == Launch::Kind::Gemm && !gemm) gemm = std::make_unique<CudaGemm>(device);
    if (l.kind == Launch::Kind::Library) {
      if (!library) library = std::make_unique<CudaLibrary>(device);
      l.library = library->bind(*l.node);
    }
  }
  // Slot addresses are fixed from here on: every allocation is made.
  slotPtr.assign(slots.size(), 0);
  for (size_t s = 0; s < slots.size(); ++s) {
    const DeviceBuffer& mem = slots[s].kind == SlotKind::Arena      ? arena
                              : slots[s].kind == SlotKind::Constant ? constantMem
                                                                    : stateMem;
    slotPtr[s] = mem.ptr() + static_cast<CUdeviceptr>(slots[s].offset);
  }
}

// Emits and compiles the distinct kernels, several at a time (NVRTC is thread-safe), and
// loads each CUBIN.
void CudaExecutable::Impl::compileKernels() {
  kernels.resize(distinct.size());
  std::vector<std::string> images(distinct.size());
  std::atomic<int> hits{0};
  codegen::cuda::NvrtcOptions no = codegen::cuda::NvrtcOptions::fromEnv();
  no.useCache = opts.useCache;
  const std::string arch = device->info().arch();
  ThreadPool::global().parallelForDynamic(
      static_cast<int64_t>(distinct.size()), 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          auto& k = kernels[static_cast<size_t>(i)];
          k.cuda = codegen::cuda::emitCudaKernel(distinct[static_cast<size_t>(i)]);
          auto compiled = codegen::cuda::compileCubin(k.cuda.source, k.cuda.name, arch, no);
          if (compiled.cacheHit) ++hits;
          images[static_cast<size_t>(i)] = std::move(compiled.image);
        }
      });
  for (size_t i = 0; i < kernels.size(); ++i) {
    kernels[i].module = std::make_unique<Module>(device, images[i], "kernel " + kernels[i].cuda.name);
    kernels[i].fn = kernels[i].module->function(kernels[i].cuda.name);
    if (kernels[i].cuda.launch.sharedBytes > device->info().maxSharedPerBlock)
      kernels[i].module->setMaxDynamicShared(kernels[i].fn, kernels[i].cuda.launch.sharedBytes);
  }
  stats.nvrtcCacheHits = hits.load();
}

void CudaExecutable::Impl::plan() {
  std::vector<int> arenaSlots;
  std::vector<BufferLifetime> lifetimes;
  const int end = static_cast<int>(launches.size());
  int64_t stateBytes = 0;
  for (size_t s = 0; s < slots.size(); ++s) {
    Slot& sl = slots[s];
    if (sl.kind == SlotKind::State) {
      sl.offset = stateBytes;
      stateBytes += alignUp(sl.bytes, kDeviceAlignment);
    }
    if (sl.kind != SlotKind::Arena) continue;
    arenaSlots.push_back(static_cast<int>(s));
    const int last = sl.lastUse == kEnd ? end : std::max(sl.first, sl.lastUse);
    lifetimes.push_back({sl.bytes, sl.first, last});
  }
  MemoryPlan mp = planMemory(lifetimes);
  for (size_t i = 0; i < arenaSlots.size(); ++i) slots[arenaSlots[i]].offset = mp.offsets[i];
  stats.arenaBytes = mp.arenaBytes;
  stats.bufferBytes = mp.totalBytes;
  stats.stateBytes = stateBytes;
  int64_t constantBytes = 0;  // one allocation, constants one after another
  for (int s : constantSlots) {
    slots[s].offset = constantBytes;
    constantBytes += alignUp(slots[s].bytes, kDeviceAlignment);
  }
  stats.constantBytes = constantBytes;
}

std::vector<const Tensor*> CudaExecutable::Impl::gather(
    const std::map<std::string, Tensor>& from, bool skipState, const char* where) const {
  std::vector<const Tensor*> given;
  std::vector<std::string> missing;
  for (const IO& in : inputs) {
    auto it = from.find(in.name);
    if ((skipState && in.state) || in.resident) {
      given.push_back(nullptr);
    } else if (it == from.end()) {
      missing.push_back("%" + in.name);
      given.push_back(nullptr);
    } else {
      checkInputType(in.name, in.type, it->second, where);
      given.push_back(&it->second);
    }
  }
  if (!missing.empty())
    throw std::invalid_argument(fmt::format("missing input{}: {}", missing.size() > 1 ? "s" : "",
                                            fmt::join(missing, ", ")));
  return given;
}

std::vector<Tensor> CudaExecutable::Impl::execute(const std::vector<const Tensor*>& given,
                                                  bool skipState) {
  Stream& s = *stream;
  // An index outside its table, a target outside the logits: an error before any upload
  // (inputs read from bound DeviceTensors are not on the host, and not checked).
  for (const IndexBound& b : indexBounds)
    if (const Tensor* t = given[static_cast<size_t>(b.slot)]) checkIndexBound(b, t->data());
  if (opts.poisonArena) s.fill(arena.ptr(), 0xFF, arena.bytes());  // NaN in every float type
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].state && !inputs[i].resident)
      s.upload(ptr(inputs[i].slot), given[i]->data(), slots[inputs[i].slot].bytes);

  std::vector<CUdeviceptr> args;
  std::vector<void*> argPtrs;
  if (opts.profile && marks.empty())
    for (size_t i = 0; i <= launches.size(); ++i) marks.push_back(std::make_unique<Event>(device));
  for (size_t li = 0; li < launches.size(); ++li) {
    const Launch& l = launches[li];
    if (opts.profile) marks[li]->record(s);
    if (l.kind == Launch::Kind::Gemm) {
      gemm->run(l.gemm, ptr(l.slots[0]), ptr(l.slots[1]), ptr(l.slots[2]), s);
      continue;
    }
    if (l.kind == Launch::Kind::Library) {
      args.clear();
      for (int slot : l.slots) args.push_back(ptr(slot));
      l.library(args.data(), args.data() + l.libraryOperands, s);
      continue;
    }
    if (l.extent == 0) continue;
    const CompiledKernel& k = kernels[l.kernel];
    args.clear();
    for (int slot : l.slots) args.push_back(ptr(slot));
    long long begin = 0, end = l.extent;
    argPtrs.clear();
    for (CUdeviceptr& a : args) argPtrs.push_back(&a);
    argPtrs.push_back(&begin);
    argPtrs.push_back(&end);
    const auto& geo = k.cuda.launch;
    const Dim3 grid{static_cast<unsigned>(geo.gridBlocks(l.extent)), 1, 1};
    const Dim3 block{static_cast<unsigned>(geo.blockThreads), 1, 1};
    launch(k.fn, grid, block, static_cast<unsigned>(geo.sharedBytes), s, argPtrs.data(), l.name);
  }
  if (opts.profile && !launches.empty()) marks.back()->record(s);
  for (const StateCopy& c : copies) s.copy(ptr(c.dst), ptr(c.src), c.bytes);

  std::vector<Tensor> results;
  results.reserve(outputs.size());
  for (const IO& out : outputs) {
    if (skipState && out.state) continue;
    results.emplace_back(out.type);
    s.download(results.back().data(), ptr(out.slot), slots[out.slot].bytes);
  }
  s.synchronize();
  if (opts.profile)
    for (size_t li = 0; li < launches.size(); ++li) {
      launches[li].seconds += 1e-3 * Event::elapsedMs(*marks[li], *marks[li + 1]);
      ++launches[li].runs;
    }
  return results;
}

CudaExecutable::CudaExecutable(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaExecutable::~CudaExecutable() = default;

std::vector<Tensor> CudaExecutable::run(const std::map<std::string, Tensor>& inputs) {
  Impl& m = *impl_;
  if (m.opts.updateInPlace)
    throw std::logic_error("a stateful CUDA executable runs with loadState/runStep/saveState");
  return m.execute(m.gather(inputs, false, "the given tensor"), false);
}

void CudaExecutable::loadState(const ParamStore& store) {
  Impl& m = *impl_;
  if (m.opts.sharedState)
    throw std::logic_error("a CUDA executable with shared state is bound with bindTensors");
  std::vector<std::string> missing;
  for (const Impl::IO& in : m.inputs) {
    if (!in.state) continue;
    if (!store.contains(in.name)) {
      missing.push_back("%" + in.name);
      continue;
    }
    checkInputType(in.name, in.type, store.at(in.name), "the parameter store");
  }
  if (!missing.empty())
    throw std::invalid_argument(fmt::format("state missing from the store: {}",
                                            fmt::join(missing, ", ")));
  for (const Impl::IO& in : m.inputs)
    if (in.state) m.stream->upload(m.ptr(in.slot), store.at(in.name).data(), m.slots[in.slot].bytes);
  m.stream->synchronize();
  m.stateLoaded = true;
}

std::map<std::string, Tensor> CudaExecutable::runStep(const std::map<std::string, Tensor>& batch) {
  Impl& m = *impl_;
  if (!m.opts.updateInPlace)
    throw std::logic_error("runStep needs a CUDA executable compiled with updateInPlace");
  if (!m.stateLoaded) throw std::logic_error("runStep before loadState (or bindTensors)");
  std::vector<Tensor> results = m.execute(m.gather(batch, true, "the batch"), true);
  std::map<std::string, Tensor> out;
  size_t next = 0;
  for (const Impl::IO& o : m.outputs)
    if (!o.state) out.insert_or_assign(o.name, std::move(results[next++]));
  return out;
}

void CudaExecutable::saveState(ParamStore& store) {
  Impl& m = *impl_;
  if (m.opts.sharedState)
    throw std::logic_error("a CUDA executable with shared state keeps it in its DeviceTensors");
  if (!m.stateLoaded) throw std::logic_error("saveState before loadState");
  for (const Impl::IO& in : m.inputs) {
    if (!in.state) continue;
    Tensor t(in.type);
    m.stream->download(t.data(), m.ptr(in.slot), m.slots[in.slot].bytes);
    m.stream->synchronize();
    store.set(in.name, std::move(t));
  }
}

void CudaExecutable::bindTensors(const DeviceTensors& tensors) {
  Impl& m = *impl_;
  if (tensors.device()->info().ordinal != m.device->info().ordinal)
    throw std::invalid_argument(fmt::format("bindTensors: the tensors are on device {}, the "
                                            "executable on device {}",
                                            tensors.device()->info().ordinal,
                                            m.device->info().ordinal));
  std::vector<std::string> missing;
  for (const Impl::IO& in : m.inputs) {
    if (tensors.contains(in.name)) {
      if (tensors.type(in.name) != in.type)
        throw std::invalid_argument(fmt::format("input %{}: the graph declares {} but the device "
                                                "tensors hold {}",
                                                in.name, in.type.str(), tensors.type(in.name).str()));
    } else if (in.state && m.opts.sharedState) {
      missing.push_back("%" + in.name);
    }
  }
  if (!missing.empty())
    throw std::invalid_argument(fmt::format("state missing from the device tensors: {}",
                                            fmt::join(missing, ", ")));
  for (Impl::IO& in : m.inputs) {
    if (!tensors.contains(in.name)) continue;
    in.resident = true;
    m.slotPtr[static_cast<size_t>(in.slot)] = tensors.ptr(in.name);
  }
  if (m.opts.sharedState) m.stateLoaded = true;
}

const std::vector<std::string>& CudaExecutable::stateNames() const { return impl_->stateNames; }
const CudaExecStats& CudaExecutable::stats() const { return impl_->stats; }
const DeviceInfo& CudaExecutable::device() const { return impl_->device->info(); }

std::vector<std::string> CudaExecutable::launchNames() const {
  std::vector<std::string> names;
  for (const Launch& l : impl_->launches) names.push_back(l.name);
  return names;
}

std::vector<Executable::LaunchTime> CudaExecutable::profile() const {
  std::vector<Executable::LaunchTime> out;
  for (const Launch& l : impl_->launches)
    out.push_back({l.name, l.kind == Launch::Kind::Gemm, l.seconds, l.runs});
  return out;
}

std::vector<std::string> CudaExecutable::kernelSources() const {
  std::vector<std::string> out;
  for (const CompiledKernel& k : impl_->kernels) out.push_back(k.cuda.source);
  return out;
}

// ---- DeviceTensors ---------------------------------------------------------------------------

DeviceTensors::DeviceTensors(std::shared_ptr<Device> device)
    : device_(std::move(device)), stream_(std::make_unique<Stream>(device_)) {}

DeviceTensors::~DeviceTensors() = default;

std::vector<std::string> DeviceTensors::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

const DeviceTensors::Entry& DeviceTensors::at(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end())
    throw std::out_of_range(fmt::format("no device tensor '{}'", name));
  return it->second;
}

const TensorType& DeviceTensors::type(const std::string& name) const { return at(name).type; }
CUdeviceptr DeviceTensors::ptr(const std::string& name) const { return at(name).mem.ptr(); }

int64_t DeviceTensors::bytes() const {
  int64_t n = 0;
  for (const auto& [name, e] : entries_) n += e.mem.bytes();
  return n;
}

DeviceTensors::Entry& DeviceTensors::entry(const std::string& name, const TensorType& type) {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    const auto bytes = static_cast<int64_t>(type.numel() * dtypeSize(type.dtype));
    it = entries_.emplace(name, Entry{type, DeviceBuffer(device_, bytes, "device tensor '" + name + "'")})
             .first;
  } else if (it->second.type != type) {
    throw std::invalid_argument(fmt::format("device tensor '{}' is {}, not {}", name,
                                            it->second.type.str(), type.str()));
  }
  return it->second;
}

void DeviceTensors::upload(const std::string& name, const Tensor& t) {
  Entry& e = entry(name, t.type());
  stream_->upload(e.mem.ptr(), t.data(), e.mem.bytes());
}

void DeviceTensors::download(const std::string& name, Tensor& into) {
  const Entry& e = at(name);
  into = Tensor(e.type);
  stream_->download(into.data(), e.mem.ptr(), e.mem.bytes());
}

void DeviceTensors::copy(const std::string& to, const std::string& from) {
  const Entry& src = at(from);
  Entry& e = entry(to, src.type);  // std::map: `src` stays valid
  stream_->copy(e.mem.ptr(), src.mem.ptr(), e.mem.bytes());
}

void DeviceTensors::synchronize() { stream_->synchronize(); }

}  // namespace tgc::runtime::cuda
