// Running an Executable: the launches in order (GEMM pairs side by side, poisoned buffers in
// debug mode), run and runStep with their inputs checked, and what a run leaves to inspect.
#include "runtime/executable.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <stdexcept>

#include "codegen/gemm.h"
#include "codegen/gemm_bf16.h"
#include "runtime/executable_impl.h"
#include "runtime/gemm_epilogue.h"
#include "runtime/gradcheck.h"
#include "runtime/graph_walk.h"
#include "runtime/param_store.h"
#include "support/float_mode.h"
#include "support/thread_pool.h"

namespace tgc::runtime {

namespace {

// Bytes that read as NaN in every float format, or an unlikely integer pattern.
void poison(void* p, int64_t bytes, DType dtype) {
  auto fill = [&](auto pattern) {
    auto* q = static_cast<unsigned char*>(p);
    for (int64_t i = 0; i + static_cast<int64_t>(sizeof pattern) <= bytes; i += sizeof pattern)
      std::memcpy(q + i, &pattern, sizeof pattern);
  };
  switch (dtype) {
    case DType::f32: return fill(uint32_t{0x7FC00000u});
    case DType::f64: return fill(uint64_t{0x7FF8000000000000ull});
    case DType::bf16: return fill(uint16_t{0x7FC0u});
    case DType::f16: return fill(uint16_t{0x7E00u});
    case DType::i32:
    case DType::i64:
    case DType::boolean: std::memset(p, 0xA5, static_cast<size_t>(bytes)); return;
  }
}

}  // namespace

void Executable::Impl::runKernel(Launch& l) {
  void* const* ptrs = l.ptrs.data();
  const kir::KernelFn fn = l.fn;
  if (!l.parallel) {
    fn(ptrs, 0, l.extent);
    return;
  }
  pool->parallelFor(l.extent, [fn, ptrs](int64_t begin, int64_t end) { fn(ptrs, begin, end); },
                    l.grain);
}

void Executable::Impl::runGemm(Launch& l, ThreadPool* p, codegen::GemmPairShare::Side share) {
  const int64_t cBytes = slots[static_cast<size_t>(l.slots[2])].bytes;
  if (l.gemmZeroK)
    std::memset(l.ptrs[2], 0, static_cast<size_t>(cBytes));
  else if (cBytes > 0 && l.gemm.dtype == DType::bf16)
    codegen::gemmBf16(l.gemm, l.ptrs[0], l.ptrs[1], l.ptrs[2], p,
                      static_cast<float*>(epilogueOperands(l.gemm, l.ptrs.data() + 3).sumB));
  else if (cBytes > 0) {
    const codegen::GemmEngine& engine = codegen::GemmEngine::host(l.gemm.dtype);
    if (l.gemmConstantB && !l.packedB) {
      l.packedB = opts.packedWeights ? opts.packedWeights->get(l.gemm, l.ptrs[1]) : engine.packB(l.gemm, l.ptrs[1]);
      l.gemmConstantB = l.packedB != nullptr;  // (null: this product reads B in place)
    }
    engine.run(l.gemm, l.ptrs[0], l.ptrs[1], l.ptrs[2], p, epilogueOperands(l.gemm, l.ptrs.data() + 3),
               share, l.packedB.get());
  }
}

void Executable::Impl::poisonDying(const Launch& l) {
  for (int s : l.dying) {
    const Slot& sl = slots[static_cast<size_t>(s)];
    poison(slotPtr[static_cast<size_t>(s)], sl.bytes, sl.dtype);
  }
}

void Executable::Impl::runInto(const std::vector<void*>& inputPtrs, bool skipState,
                               std::vector<Tensor>& results) {
  std::vector<Tensor*> resultPtrs(outputs.size(), nullptr);
  size_t count = 0;
  for (size_t o = 0; o < outputs.size(); ++o) count += skipState && outputIsState[o] ? 0 : 1;
  results.resize(count);
  for (size_t o = 0, k = 0; o < outputs.size(); ++o) {
    if (skipState && outputIsState[o]) continue;
    if (outputInDonated[o]) {  // in the donated input's tensor: its entry is left as it is
      ++k;
      continue;
    }
    // Every output is written whole by its launch (or copied from the arena below), so it
    // is not zero-filled first; under poisonFreed it starts as NaN, so that a kernel that
    // leaves part of an output unwritten fails the poisoned tests.
    Tensor& t = results[k++];
    // (A default Tensor() reads as f32[] but holds no storage.)
    const bool reusable = t.type() == outputs[o].type && (t.nbytes() == 0 || t.data());
    if (!reusable) t = Tensor::uninitialized(outputs[o].type);
    if (opts.poisonFreed) poison(t.data(), static_cast<int64_t>(t.nbytes()), t.dtype());
    resultPtrs[o] = &t;
  }
  execute(inputPtrs, resultPtrs);
  for (size_t o = 0; o < outputs.size(); ++o)
    if (resultPtrs[o] && !outputs[o].bound && resultPtrs[o]->nbytes() > 0)
      std::memcpy(resultPtrs[o]->data(), slotPtr[static_cast<size_t>(outputs[o].slot)],
                  resultPtrs[o]->nbytes());
}

void Executable::Impl::execute(const std::vector<void*>& inputPtrs,
                               const std::vector<Tensor*>& results) {
  // Subnormals flushed to zero, here and in the pool's workers (support/float_mode.h).
  const FlushSubnormals flush;
  auto* base = static_cast<unsigned char*>(arena.get());
  for (size_t s = 0; s < slots.size(); ++s) {
    const Slot& sl = slots[s];
    switch (sl.kind) {
      case SlotKind::Arena: slotPtr[s] = base + sl.offset; break;
      case SlotKind::Input: slotPtr[s] = inputPtrs[static_cast<size_t>(sl.index)]; break;
      case SlotKind::Constant: slotPtr[s] = constants[static_cast<size_t>(sl.index)].data(); break;
      case SlotKind::Output: slotPtr[s] = results[static_cast<size_t>(sl.index)]->data(); break;
      case SlotKind::Alias: break;
    }
  }
  auto at = [&](int s) { return slotPtr[static_cast<size_t>(s)]; };
  // Aliases (new.X in X, updates in place, slice views at an offset) point at earlier slots.
  for (size_t s = 0; s < slots.size(); ++s)
    if (slots[s].kind == SlotKind::Alias)
      slotPtr[s] = static_cast<unsigned char*>(at(slots[s].index)) + slots[s].offset;
  if (opts.poisonFreed && base) std::memset(base, 0xFF, static_cast<size_t>(stats.arenaBytes));
  auto now = [&] {
    return opts.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  };

  for (size_t i = 0; i < launches.size(); ++i) {
    Launch& l = launches[i];
    for (size_t b = 0; b < l.slots.size(); ++b) l.ptrs[b] = at(l.slots[b]);
    const auto t0 = now();
    if (l.partner == static_cast<int>(i) + 1) {
      // A GEMM pair: one GEMM per thread, each on the serial path with its own packing
      // scratch (thread_local in codegen/gemm.cpp), each timed on its own thread. The
      // thread that finishes first helps the other; that time counts to the other launch.
      Launch& r = launches[++i];
      for (size_t b = 0; b < r.slots.size(); ++b) r.ptrs[b] = at(r.slots[b]);
      codegen::GemmPairShare share;
      double helped[2] = {0, 0};
      // Nested in another pool's job the halves run one after the other: no help then.
      const bool help = opts.gemmPairHelp && pool->runsSideBySide(2);
      pool->runOnThreads(2, [&](int t) {
        Launch& half = t == 0 ? l : r;
        const auto t1 = now();
        if (help) {
          struct Finish {  // also when the GEMM throws: the other thread stops helping
            codegen::GemmPairShare& s;
            int side;
            ~Finish() { s.finish(side); }
          } finish{share, t};
          runGemm(half, &serial, {&share, t});
        } else {
          runGemm(half, &serial);
        }
        if (opts.profile) half.seconds += secondsSince(t1);
        if (help) helped[t] = share.help(t);
      });
      if (opts.profile) {
        l.seconds += helped[1];
        r.seconds += helped[0];
        const double wall = secondsSince(t0);
        for (Launch* h : {&l, &r}) {
          h->stepSeconds += wall;
          ++h->runs;
        }
      }
      if (opts.poisonFreed) {  // after both: each half's dying buffers were live in the other's
        poisonDying(l);
        poisonDying(r);
      }
      continue;
    }
    if (l.kind == Launch::Kind::Kernel)
      runKernel(l);
    else if (l.kind == Launch::Kind::Library)
      l.library(l.ptrs.data(), l.ptrs.data() + l.libraryOperands, *pool);
    else
      runGemm(l, pool);
    if (opts.profile) {
      const double spent = secondsSince(t0);
      l.seconds += spent;
      l.stepSeconds += spent;
      ++l.runs;
    }
    if (opts.poisonFreed) poisonDying(l);
  }
  for (const StateCopy& c : copies)
    std::memcpy(at(c.dst), at(c.src), static_cast<size_t>(c.bytes));
}

Executable::Executable(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Executable::~Executable() = default;

std::vector<Tensor> Executable::run(const std::map<std::string, Tensor>& inputs) {
  std::vector<Tensor> out;
  run(inputs, out);
  return out;
}

void Executable::run(const std::map<std::string, Tensor>& inputs, std::vector<Tensor>& out) {
  static const std::map<std::string, Tensor> none;
  run(inputs, none, out);
}

void Executable::run(const std::map<std::string, Tensor>& inputs,
                     const std::map<std::string, Tensor>& more, std::vector<Tensor>& out) {
  Impl& m = *impl_;
  if (m.opts.updateInPlace)
    throw std::logic_error("a stateful executable (updateInPlace) runs with runStep");
  std::vector<void*> ptrs;
  std::vector<std::string> missing;
  for (const Impl::IO& in : m.inputs) {
    const Tensor* t = nullptr;
    if (auto it = inputs.find(in.name); it != inputs.end()) t = &it->second;
    else if (auto jt = more.find(in.name); jt != more.end()) t = &jt->second;
    if (!t) {
      missing.push_back("%" + in.name);
      ptrs.push_back(nullptr);
      continue;
    }
    checkInputType(in.name, in.type, *t, "the given tensor");
    ptrs.push_back(const_cast<void*>(t->data()));  // kernels only read inputs
  }
  if (!missing.empty())
    throw std::invalid_argument(fmt::format("missing input{}: {}", missing.size() > 1 ? "s" : "",
                                            fmt::join(missing, ", ")));
  m.checkIndices(ptrs);
  m.runInto(ptrs, false, out);
}

std::map<std::string, Tensor> Executable::runStep(ParamStore& store,
                                                  const std::map<std::string, Tensor>& batch) {
  std::map<std::string, Tensor> out;
  runStep(store, batch, out);
  return out;
}

void Executable::runStep(ParamStore& store, const std::map<std::string, Tensor>& batch,
                         std::map<std::string, Tensor>& out) {
  Impl& m = *impl_;
  if (!m.opts.updateInPlace)
    throw std::logic_error("runStep needs an executable compiled with updateInPlace");
  const std::set<std::string> state(m.stateNames.begin(), m.stateNames.end());
  std::vector<void*> ptrs;
  std::vector<std::string> missing;
  for (const Impl::IO& in : m.inputs) {
    if (state.count(in.name)) {
      if (!store.contains(in.name)) {
        missing.push_back("%" + in.name + " (store)");
        ptrs.push_back(nullptr);
        continue;
      }
      Tensor& t = store.at(in.name);
      checkInputType(in.name, in.type, t, "the parameter store");
      ptrs.push_back(t.data());
      continue;
    }
    auto it = batch.find(in.name);
    if (it == batch.end()) {
      missing.push_back("%" + in.name);
      ptrs.push_back(nullptr);
      continue;
    }
    checkInputType(in.name, in.type, it->second, "the batch");
    ptrs.push_back(const_cast<void*>(it->second.data()));
  }
  if (!missing.empty())
    throw std::invalid_argument(fmt::format("missing input{}: {}", missing.size() > 1 ? "s" : "",
                                            fmt::join(missing, ", ")));
  m.checkIndices(ptrs);
  // The tensors `out` holds under the outputs' names are written over in place.
  std::vector<Tensor> results;
  for (size_t i = 0; i < m.outputs.size(); ++i) {
    if (m.outputIsState[i]) continue;
    auto it = out.find(m.outputs[i].name);
    results.push_back(it == out.end() ? Tensor() : std::move(it->second));
  }
  out.clear();
  m.runInto(ptrs, true, results);
  size_t next = 0;
  for (size_t i = 0; i < m.outputs.size(); ++i)
    if (!m.outputIsState[i]) out.emplace(m.outputs[i].name, std::move(results[next++]));
}

const std::vector<std::string>& Executable::stateNames() const { return impl_->stateNames; }
const ExecStats& Executable::stats() const { return impl_->stats; }

std::vector<std::string> Executable::launchNames() const {
  std::vector<std::string> names;
  for (const Launch& l : impl_->launches) names.push_back(l.name);
  return names;
}

std::vector<Executable::LaunchTime> Executable::profile() const {
  std::vector<LaunchTime> out;
  for (const Launch& l : impl_->launches)
    out.push_back({l.name, l.kind == Launch::Kind::Gemm, l.seconds, l.runs, l.partner,
                   l.stepSeconds});
  return out;
}

std::vector<int> Executable::launchSteps() const { return impl_->stepOf; }

std::vector<Executable::ArenaBuffer> Executable::arenaBuffers() const {
  std::vector<ArenaBuffer> out;
  const int end = static_cast<int>(impl_->launches.size());
  for (const Slot& s : impl_->slots)
    if (s.kind == SlotKind::Arena)
      out.push_back({s.name, s.offset, s.bytes, s.first,
                     s.lastUse == Impl::kEnd ? end : std::max(s.first, s.lastUse)});
  return out;
}

GraphBackend cpuF64Backend(const ExecOptions& opts) {
  return [opts](const Graph& g) -> GraphRunner {
    std::shared_ptr<Executable> exe = Executable::compile(*promoteToF64(g), opts);
    return [exe](const std::map<std::string, Tensor>& inputs) { return exe->run(inputs); };
  };
}

bool Executable::outputInDonatedInput(size_t i) const {
  return i < impl_->outputInDonated.size() && impl_->outputInDonated[i];
}

void Executable::paramsChanged() {
  for (Launch& l : impl_->launches)
    if (l.packedB) {
      l.packedB.reset();
      l.gemmConstantB = true;
    }
}

std::shared_ptr<const codegen::GemmPackedB> PackedWeights::get(const codegen::GemmDesc& d, const void* b) {
  const codegen::GemmEngine& engine = codegen::GemmEngine::host(d.dtype);
  const codegen::GemmBBlocking blocking = codegen::gemmBBlocking(engine.config(), d);
  const auto key = std::make_tuple(b, static_cast<int>(d.dtype), d.n, d.k, d.ldb, d.transB, blocking.nc, blocking.ks);
  std::lock_guard<std::mutex> lock(mutex_);  // (GEMM pairs pack on two threads)
  auto it = packed_.find(key);
  if (it != packed_.end()) return it->second;
  auto p = engine.packB(d, b);
  if (p) packed_.emplace(key, p);
  return p;
}

void PackedWeights::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  packed_.clear();
}

}  // namespace tgc::runtime
