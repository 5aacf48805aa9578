// The Philox draw in generated kernels (codegen/lower_expr.cpp, Ctx::philox) against
// ir/philox.cpp's philoxUniformAt, bit for bit: sizes that leave remainders after the
// interleaved vector loop (vector width x interleave elements an iteration), counters whose
// high word changes inside a kernel (offsets just below 2^32) or that wrap at 2^64, seeds
// using both halves; kernels run in several parallel chunks as the runtime splits them; sizes
// that are multiples of 4 (quad loops: one Philox call for four elements) and others.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/jit.h"
#include "codegen/llvm_emitter.h"
#include "codegen/lower.h"
#include "ir/env_flag.h"
#include "ir/philox.h"
#include "ir/tensor.h"

namespace tgc {
namespace {

using namespace tgc::codegen;

constexpr DType F = DType::f32;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

Jit& jit() {
  static Jit j(JitOptions::fromEnv());
  return j;
}

// A graph whose non-input nodes are one group; inputs are named in0, in1, ...
struct Kernel {
  Graph g{"philox"};
  std::vector<Value*> inputs;
  LoweredKernel lk;
  kir::KernelFn fn = nullptr;
  Value* in(TensorType t) {
    inputs.push_back(
        g.add(OpKind::Input, {}, {}, {fmt::format("in{}", inputs.size())}, {t})->result());
    return inputs.back();
  }
  Value* op(OpKind k, std::vector<Value*> operands, std::vector<TensorType> declared = {}) {
    return g.add(k, std::move(operands), {}, {fmt::format("v{}", g.size())}, std::move(declared))
        ->result();
  }
  LoweredKernel lower() const {
    std::vector<const Node*> group;
    for (const auto& n : g.nodes())
      if (n->op() != OpKind::Input) group.push_back(n.get());
    return lowerGroup(group);
  }
  // Runs the group, compiled on first use, over its parallel range in `chunks` pieces;
  // `given` holds the contents of the inputs. Returns the result.
  Tensor run(const std::vector<Tensor>& given, int chunks = 3) {
    static int counter = 0;
    if (!fn) {
      lk = lower();
      lk.kernel.name += fmt::format("_{}", counter++);  // one JIT for every case
      fn = compileKernels(jit(), {&lk.kernel})[0];
    }
    std::vector<Tensor> ts;
    ts.reserve(lk.values.size());
    std::vector<void*> bufs;
    for (const Value* v : lk.values) {
      ts.emplace_back(v->type());
      for (size_t i = 0; i < inputs.size(); ++i)
        if (v == inputs[i]) ts.back() = given.at(i);
      bufs.push_back(ts.back().data());
    }
    const int64_t n = lk.kernel.parallelExtent;
    for (int c = 0; c < chunks; ++c) fn(bufs.data(), n * c / chunks, n * (c + 1) / chunks);
    const Value* result = g.nodes().back()->result();
    for (size_t b = 0; b < lk.values.size(); ++b)
      if (lk.values[b] == result) return ts[b];
    throw std::logic_error("the kernel does not write the group's result");
  }
};

Tensor scalarI64(uint64_t v) {
  Tensor t({DType::i64, {}});
  t.as<int64_t>()[0] = static_cast<int64_t>(v);
  return t;
}

Tensor scalarF32(float v) {
  Tensor t({F, {}});
  t.as<float>()[0] = v;
  return t;
}

// Last dims that are multiples of 4 lower as quad loops (one call per four elements), the
// others draw per element.
const std::vector<Shape> kShapes = {{1},      {7},        {15},       {17},     {33},  {3, 130},
                                    {2, 5, 67}, {4099},   {4},        {12},     {3, 20},
                                    {2, 3, 36}, {5, 260}, {4096},     {4, 7},   {2, 6, 9}};
const std::vector<uint64_t> kOffsets = {0, (uint64_t{1} << 32) - 5, (uint64_t{1} << 32) - 2000,
                                        0xFFFFFFFFFFFFFFF0ull, 0x123456789ABCDEFull};
const std::vector<uint64_t> kSeeds = {0, 0xDEADBEEFCAFEF00Dull};

TEST(PhiloxKernel, MatchesPhiloxUniformAtBitForBit) {
  for (const Shape& shape : kShapes) {
    Kernel k;
    Value* seed = k.in({DType::i64, {}});
    Value* offset = k.in({DType::i64, {}});
    k.op(OpKind::PhiloxUniform, {seed, offset}, {{F, shape}});
    for (uint64_t s : kSeeds)
      for (uint64_t o : kOffsets) {
        Tensor u = k.run({scalarI64(s), scalarI64(o)});
        for (int64_t i = 0; i < u.numel(); ++i) {
          const float want = philoxUniformAt(s, o, static_cast<uint64_t>(i));
          ASSERT_EQ(bits(u.as<float>()[i]), bits(want))
              << fmt::format("shape [{}] seed {:#x} offset {:#x} element {}",
                             fmt::join(shape, ","), s, o, i);
        }
      }
  }
}

// The dropout of a layer's output as the training step fuses it: res + where(u >= p, x, 0)
// * scale. The scale is a power of two, so the reference below is exact whatever order
// (or FMA) the kernel computes in; a wrong keep decision changes an element by x * scale.
TEST(PhiloxKernel, DropoutKeepsExactlyTheElementsThePhiloxStreamKeeps) {
  const float p = 0.3f, scale = 2.0f;
  for (const Shape& shape : kShapes) {
    Kernel k;
    Value* x = k.in({F, shape});
    Value* res = k.in({F, shape});
    Value* seed = k.in({DType::i64, {}});
    Value* offset = k.in({DType::i64, {}});
    Value* pv = k.in({F, {}});
    Value* zero = k.in({F, {}});
    Value* sv = k.in({F, {}});
    Value* u = k.op(OpKind::PhiloxUniform, {seed, offset}, {{F, shape}});
    Value* kept = k.op(OpKind::Where, {k.op(OpKind::Ge, {u, pv}), x, zero});
    k.op(OpKind::Add, {res, k.op(OpKind::Mul, {kept, sv})});
    Tensor xt({F, shape}), rt({F, shape});
    for (int64_t i = 0; i < xt.numel(); ++i) {
      xt.as<float>()[i] = 1.0f + static_cast<float>(i % 97) * 0.25f;
      rt.as<float>()[i] = -0.5f * static_cast<float>(i % 13);
    }
    for (uint64_t o : kOffsets) {
      const uint64_t s = kSeeds[1];
      Tensor y = k.run({xt, rt, scalarI64(s), scalarI64(o), scalarF32(p), scalarF32(0.0f),
                        scalarF32(scale)});
      for (int64_t i = 0; i < y.numel(); ++i) {
        const bool keep = philoxUniformAt(s, o, static_cast<uint64_t>(i)) >= p;
        const float want = rt.as<float>()[i] + (keep ? xt.as<float>()[i] * scale : 0.0f);
        ASSERT_EQ(bits(y.as<float>()[i]), bits(want))
            << fmt::format("shape [{}] offset {:#x} element {}", fmt::join(shape, ","), o, i);
      }
    }
  }
}

// The draw vectorizes and its chains interleave: the optimized IR of a long Philox loop
// multiplies vectors of i64 (x86: vpmuludq), about two products a round for each of the
// kernel's interleaved vector iterations. Scalar code, or a vector loop without the
// interleave, has a fraction of them.
TEST(PhiloxKernel, TheDrawIsVectorizedAndInterleaved) {
  const TargetSpec target = TargetSpec::host();
  if (target.vectorBits() < 256) GTEST_SKIP() << "no 256-bit vectors on this host";
  if (envFlag("TGC_NO_PHILOX_INTERLEAVE")) GTEST_SKIP() << "TGC_NO_PHILOX_INTERLEAVE is set";
  Kernel k;
  Value* seed = k.in({DType::i64, {}});
  Value* offset = k.in({DType::i64, {}});
  k.op(OpKind::PhiloxUniform, {seed, offset}, {{F, {64, 256}}});
  LoweredKernel lk = k.lower();
  ASSERT_GE(lk.kernel.vectorInterleave, 2);
  const std::string ir = kernelLLVMIR(lk.kernel, target);
  const std::regex vectorMul(R"(= mul (nuw )?(nsw )?<\d+ x i64>)");
  const auto n = std::distance(std::sregex_iterator(ir.begin(), ir.end(), vectorMul),
                               std::sregex_iterator());
  // Ten rounds of two products a chain (LLVM 19 keeps 18: the first round multiplies a zero
  // word); a vector loop without the interleave has one chain.
  EXPECT_GE(n, 15 * lk.kernel.vectorInterleave) << ir;
}

// A draw whose (merged) last dim is a multiple of 4 lowers as a loop over quads: one
// Philox chain (ten rounds, so ten assignments of a product) for every four stores; a single
// row that is not ends in 1-3 elements of a chain each. Other draws run a chain per element;
// without the quads (TGC_NO_PHILOX_QUADS) all do. (A kernel may hold several copies of its
// loop body: a last block of another length.)
TEST(PhiloxKernel, AQuadLoopRunsOneCallForFourElements) {
  if (envFlag("TGC_NO_PHILOX_QUADS")) GTEST_SKIP() << "TGC_NO_PHILOX_QUADS is set";
  // x * philox_uniform, the draw transposed first when `transposed`.
  auto lowered = [](Shape shape, bool transposed = false) {
    Kernel k;
    Value* x = k.in({F, shape});
    Value* seed = k.in({DType::i64, {}});
    Value* offset = k.in({DType::i64, {}});
    Value* u = k.op(OpKind::PhiloxUniform, {seed, offset},
                    {{F, transposed ? Shape{shape[1], shape[0]} : shape}});
    if (transposed)
      u = k.g.add(OpKind::Transpose, {u}, {{"perm", std::vector<int64_t>{1, 0}}},
                  {fmt::format("v{}", k.g.size())})
              ->result();
    k.op(OpKind::Mul, {u, x});
    return kir::print(k.lower().kernel);
  };
  struct Counts {
    int64_t chains, stores;
  };
  auto count = [](const std::string& text) {
    auto n = [&](const char* what) {
      const std::regex re(what);
      return std::distance(std::sregex_iterator(text.begin(), text.end(), re),
                           std::sregex_iterator());
    };
    return Counts{n(R"(ph_p0\w* = )") / 10, n(R"(\] = )")};
  };
  // {40, 66} merges into one dim of 2640 elements: quads across the rows' ends.
  for (Shape quads : {Shape{40, 64}, Shape{40, 66}, Shape{12}}) {
    const std::string text = lowered(quads);
    const Counts c = count(text);
    EXPECT_GE(c.chains, 1) << text;
    EXPECT_EQ(c.stores, 4 * c.chains) << text;
  }
  {  // 2706 = 4 * 676 + 2: quad bodies, then two elements of their own
    const std::string text = lowered({41, 66});
    const Counts c = count(text);
    EXPECT_GE(c.chains, 3) << text;
    EXPECT_EQ(c.stores - 2, 4 * (c.chains - 2)) << text;
  }
  {  // a transposed draw: no merged dims, rows of 66 elements, no quads
    const std::string text = lowered({40, 66}, true);
    const Counts c = count(text);
    EXPECT_GE(c.chains, 1) << text;
    EXPECT_EQ(c.stores, c.chains) << text;
  }
}

}  // namespace
}  // namespace tgc
