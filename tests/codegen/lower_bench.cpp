// Lowered kernels at Transformer shapes (the small preset: 1024 tokens, d_model 512, d_ff
// 2048, 8 heads, sequence 32, vocabulary 8000), run on the thread pool like the runtime
// does, best of several runs. Each line gives the time, the bytes the kernel must move
// (its buffers, once) and, as a yardstick measured in the same run, the time a parallel
// memcpy of as many bytes (half read, half written) takes: "x copy" near 1 means the kernel
// runs at memory speed (gather's figure counts its whole table, of which it reads only the
// rows named, so it looks faster than memory). Figures vary a lot with other load on the
// machine: compare lines of one run, not runs. Not a test: `build/tests/codegen/lower_bench [reps]`.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "codegen/jit.h"
#include "codegen/llvm_emitter.h"
#include "codegen/lower.h"
#include "ir/tensor.h"
#include "support/thread_pool.h"

namespace {

using namespace tgc;
using namespace tgc::codegen;

double bestSeconds(int reps, const std::function<void()>& f) {
  f();  // warm up (page faults, caches)
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

struct Bench {
  Graph g{"bench"};
  Value* in(TensorType t) {
    return g.add(OpKind::Input, {}, {}, {fmt::format("in{}", g.size())}, {t})->result();
  }
  Value* op(OpKind k, std::vector<Value*> operands, AttrMap attrs = {},
            std::vector<TensorType> declared = {}) {
    return g.add(k, std::move(operands), std::move(attrs), {"bench.out"}, std::move(declared))->result();
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 10;
  Jit jit(JitOptions::fromEnv());
  ThreadPool& pool = ThreadPool::global();
  fmt::print("threads: {}\n", pool.numThreads());
  int counter = 0;

  auto run = [&](const std::string& label, Bench& b) {
    std::vector<const Node*> group;
    for (const auto& n : b.g.nodes())
      if (n->op() != OpKind::Input) group.push_back(n.get());
    LoweredKernel lk = lowerGroup(group);
    lk.kernel.name += fmt::format("_{}", counter++);
    kir::KernelFn fn = compileKernels(jit, {&lk.kernel})[0];
    std::vector<Tensor> ts;
    std::vector<void*> bufs;
    double bytes = 0;
    for (const Value* v : lk.values) {
      ts.emplace_back(v->type());
      Tensor& t = ts.back();
      for (int64_t i = 0; i < t.numel(); ++i) t.setF(i, static_cast<double>(i % 13) * 0.25);
      bufs.push_back(t.data());
      bytes += static_cast<double>(t.nbytes());
    }
    const int64_t n = lk.kernel.parallelExtent;
    double s = bestSeconds(reps, [&] {
      pool.parallelFor(n, [&](int64_t lo, int64_t hi) { fn(bufs.data(), lo, hi); });
    });
    const auto half = static_cast<size_t>(bytes / 2);
    std::vector<char> src(half, 1), dst(half, 0);
    double copy = bestSeconds(reps, [&] {
      pool.parallelFor(pool.numThreads(), [&](int64_t lo, int64_t hi) {
        size_t a = half * static_cast<size_t>(lo) / static_cast<size_t>(pool.numThreads());
        size_t e = half * static_cast<size_t>(hi) / static_cast<size_t>(pool.numThreads());
        std::memcpy(dst.data() + a, src.data() + a, e - a);
      });
    });
    fmt::print("{:44s} {:9.1f} us  {:7.1f} MB  {:6.1f} GB/s  {:5.2f} x copy\n", label, s * 1e6,
               bytes / 1e6, bytes / s / 1e9, s / copy);
  };

  const DType F = DType::f32;
  using Ax = std::vector<int64_t>;
  { Bench b; auto x = b.in({F, {1024, 512}}); auto y = b.in({F, {512}});
    b.op(OpKind::Add, {x, y}); run("add bias [1024,512] + [512]", b); }
  { Bench b; auto x = b.in({F, {1024, 2048}}); b.op(OpKind::Relu, {x}); run("relu [1024,2048]", b); }
  { Bench b; auto x = b.in({F, {1024, 2048}}); b.op(OpKind::Gelu, {x}); run("gelu [1024,2048]", b); }
  { Bench b; auto x = b.in({F, {1024, 512}}); auto y = b.in({F, {1024, 512}});
    auto s = b.in({F, {}}); auto m = b.g.add(OpKind::Mul, {x, s}, {}, {"t"})->result();
    b.op(OpKind::Add, {m, y}); run("fused x * s + y [1024,512] (2 nodes)", b); }
  { Bench b; auto x = b.in({F, {1024, 512}}); auto g = b.in({F, {512}}); auto be = b.in({F, {512}});
    b.op(OpKind::LayerNorm, {x, g, be}); run("layer_norm [1024,512]", b); }
  { Bench b; auto x = b.in({F, {32, 8, 32, 32}}); b.op(OpKind::Softmax, {x}); run("softmax [32,8,32,32]", b); }
  { Bench b; auto x = b.in({F, {1024, 8000}}); b.op(OpKind::LogSoftmax, {x}); run("log_softmax [1024,8000]", b); }
  { Bench b; auto x = b.in({F, {1024, 512}}); b.op(OpKind::ReduceSum, {x}, {{"axes", Ax{0}}});
    run("reduce_sum [1024,512] axis 0 (bias grad)", b); }
  { Bench b; auto x = b.in({F, {1024, 512}}); b.op(OpKind::ReduceSum, {x}, {{"axes", Ax{1}}});
    run("reduce_sum [1024,512] axis 1", b); }
  { Bench b; auto x = b.in({F, {32, 32, 8, 64}}); b.op(OpKind::Transpose, {x}, {{"perm", Ax{0, 2, 1, 3}}});
    run("transpose [32,32,8,64] (0,2,1,3) heads", b); }
  { Bench b; auto x = b.in({F, {1024, 512}}); b.op(OpKind::Transpose, {x}, {{"perm", Ax{1, 0}}});
    run("transpose [1024,512] (1,0)", b); }
  { Bench b; auto t = b.in({F, {8000, 512}}); auto i = b.in({DType::i64, {1024}});
    b.op(OpKind::Gather, {t, i}); run("gather [8000,512] at [1024]", b); }
  { Bench b; auto i = b.in({DType::i64, {1024}}); auto u = b.in({F, {1024, 512}});
    b.op(OpKind::ScatterAdd, {i, u}, {{"rows", int64_t{8000}}}); run("scatter_add [1024,512] into 8000 rows", b); }
  { Bench b; auto s = b.in({DType::i64, {}}); auto o = b.in({DType::i64, {}});
    b.op(OpKind::PhiloxUniform, {s, o}, {}, {{F, {1024, 512}}}); run("philox_uniform [1024,512]", b); }
  { Bench b; auto x = b.in({F, {1024, 256}}); auto y = b.in({F, {1024, 256}});
    b.op(OpKind::Concat, {x, y}, {{"axis", int64_t{1}}}); run("concat 2 x [1024,256] axis 1", b); }
  return 0;
}
