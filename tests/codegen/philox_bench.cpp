// The generated kernels that draw Philox4x32-10 numbers, at the small preset's shape
// ([1024, 256]: 262144 elements): philox_uniform alone, the dropout + residual add of a
// layer's output (forward), the dropout gradient with the keep mask recomputed (backward)
// and the dropout of an embedding lookup. Each kernel runs on the calling thread over its
// whole range, timed with the thread's CPU clock (so other load on a shared machine matters
// less); the figure is the median of the runs, in ns per element. Each kernel is also
// compiled without the vector loop's interleave (Kernel::vectorInterleave = 0: the code
// before it existed), the two runs alternating, so one run compares both. Not a test:
// `build/tests/codegen/philox_bench [runs]`.
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "codegen/jit.h"
#include "codegen/llvm_emitter.h"
#include "codegen/lower.h"
#include "ir/tensor.h"

namespace {

using namespace tgc;
using namespace tgc::codegen;

constexpr DType F = DType::f32;
const Shape kShape{1024, 256};

double threadSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Bench {
  Graph g{"bench"};
  Value* in(TensorType t) {
    return g.add(OpKind::Input, {}, {}, {fmt::format("in{}", g.size())}, {t})->result();
  }
  Value* op(OpKind k, std::vector<Value*> operands, std::vector<TensorType> declared = {}) {
    return g.add(k, std::move(operands), {}, {fmt::format("v{}", g.size())}, std::move(declared))
        ->result();
  }
  // where(philox_uniform(seed, offset) >= p, x, zero): the dropout keep mask applied to x.
  Value* dropout(Value* x) {
    Value* seed = in({DType::i64, {}});
    Value* offset = in({DType::i64, {}});
    Value* p = in({F, {}});
    Value* zero = in({F, {}});
    Value* u = op(OpKind::PhiloxUniform, {seed, offset}, {{F, kShape}});
    return op(OpKind::Where, {op(OpKind::Ge, {u, p}), x, zero});
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 15;
  Jit jit(JitOptions::fromEnv());
  int counter = 0;
  auto run = [&](const std::string& label, Bench& b) {
    std::vector<const Node*> group;
    for (const auto& n : b.g.nodes())
      if (n->op() != OpKind::Input) group.push_back(n.get());
    LoweredKernel lk = lowerGroup(group);
    lk.kernel.name += fmt::format("_{}", counter++);
    kir::Kernel plain = lk.kernel;
    plain.name += "_plain";
    plain.vectorInterleave = 0;
    std::vector<kir::KernelFn> fns = compileKernels(jit, {&lk.kernel, &plain});
    std::vector<Tensor> ts;
    std::vector<void*> bufs;
    for (const Value* v : lk.values) {
      ts.emplace_back(v->type());
      Tensor& t = ts.back();
      // Scalars: the integers (seed, offset) 2^32 - 1000, so the counter's high word changes
      // inside the kernel; the floats (p, zero, scale) 0.1.
      for (int64_t i = 0; i < t.numel(); ++i)
        t.setF(i, t.numel() == 1 ? (isInteger(t.dtype()) ? 4294966296.0 : 0.1) : 0.25 * (i % 13));
      bufs.push_back(t.data());
    }
    std::vector<double> ns[2];
    for (int r = -1; r < runs; ++r)
      for (int f = 0; f < 2; ++f) {
        const double t0 = threadSeconds();
        fns[f](bufs.data(), 0, lk.kernel.parallelExtent);
        const double elements = static_cast<double>(kShape[0] * kShape[1]);
        if (r >= 0) ns[f].push_back((threadSeconds() - t0) * 1e9 / elements);  // -1 warms up
      }
    for (auto& v : ns) std::sort(v.begin(), v.end());
    fmt::print("{:48s} {:5.2f} ns/element (interleave {}), {:5.2f} without\n", label,
               ns[0][ns[0].size() / 2], lk.kernel.vectorInterleave, ns[1][ns[1].size() / 2]);
  };

  { Bench b; Value* s = b.in({DType::i64, {}}); Value* o = b.in({DType::i64, {}});
    b.op(OpKind::PhiloxUniform, {s, o}, {{F, kShape}});
    run("philox_uniform [1024,256]", b); }
  { Bench b; Value* x = b.in({F, kShape}); Value* res = b.in({F, kShape});
    Value* scale = b.in({F, {}});
    b.op(OpKind::Add, {res, b.dropout(b.op(OpKind::Mul, {x, scale}))});
    run("res + where(philox >= p, x * s, 0) [1024,256]", b); }
  { Bench b; Value* dy = b.in({F, kShape}); Value* scale = b.in({F, {}});
    b.op(OpKind::Mul, {b.dropout(dy), scale});
    run("where(philox >= p, dy, 0) * s [1024,256]", b); }
  { Bench b; Value* table = b.in({F, {8000, 256}}); Value* ids = b.in({DType::i64, {1024}});
    b.op(OpKind::Mul, {b.dropout(b.op(OpKind::Gather, {table, ids})), b.in({F, {}})});
    run("where(philox >= p, gather(emb, ids), 0) * s", b); }
  return 0;
}
