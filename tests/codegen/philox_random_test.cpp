// Random Philox draws (dropout) against the interpreter: philox_uniform fused into random
// groups (alone, dropout, broadcast, transposed, sliced, concatenated, reduced, two draws) on
// random shapes of 1-4 dims with last dims 1..70 and random 64-bit seeds and offsets
// (some just below 2^32, 2^63 and 2^64), through checkCase (the Kernel IR evaluator and
// the compiled kernel in three parallel chunks, so chunks start inside quads); and the CPU
// attention kernels with dropout at random lengths 1..70 (rows that start inside a group
// of four), causal or masked, both ISAs, one and two threads. Seeded: a failure reproduces.
// Run it with TGC_NO_PHILOX_QUADS=1 too (the per-element draw).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "codegen/attention_cpu.h"
#include "codegen/library.h"
#include "library_test_util.h"
#include "ir/interpreter.h"
#include "lower_test_util.h"
#include "support/thread_pool.h"

namespace tgc::lower_test {
namespace {

using library_test::runLibraryKernel;

// Offsets that make the 64-bit counter cross 2^32, 2^63 (the sign bit) or wrap at 2^64
// inside the draw, or anything.
uint64_t randomOffset(std::mt19937_64& r) {
  const uint64_t near = r() % 40;
  switch (r() % 5) {
    case 0: return (uint64_t{1} << 32) - near;
    case 1: return (uint64_t{1} << 63) - near;
    case 2: return uint64_t{0} - near;
    default: return r();
  }
}

TEST(PhiloxRandom, DrawsFusedIntoRandomGroupsMatchTheInterpreter) {
  std::mt19937_64 r(8);
  const int64_t lead[] = {1, 2, 3, 4, 5, 8};
  int kinds[8] = {};
  for (int trial = 0; trial < 64; ++trial) {
    const size_t rank = 1 + r() % 4;
    Shape full;
    for (size_t d = 0; d + 1 < rank; ++d) full.push_back(lead[r() % std::size(lead)]);
    full.push_back(1 + static_cast<int64_t>(r() % 70));
    const DType dt = r() % 3 == 0 ? DType::f64 : DType::f32;
    const int kind = static_cast<int>(r() % 8);
    ++kinds[kind];
    Case c;
    Value* seed = c.in({DType::i64, {}});
    Value* offset = c.in({DType::i64, {}});
    const uint64_t s = r(), o = randomOffset(r);
    c.inputs.at("in0").setI(0, static_cast<int64_t>(s));
    c.inputs.at("in1").setI(0, static_cast<int64_t>(o));
    auto draw = [&](Shape shape, Value* off = nullptr) {
      return c.op(OpKind::PhiloxUniform, {seed, off ? off : offset}, {}, {{dt, shape}});
    };
    std::string what;
    c.tol = kExact;
    switch (kind) {
      case 0: what = "draw", draw(full); break;
      case 1: {  // res + where(u >= p, x * 2, 0): exact, a wrong keep moves an element by 2x
        what = "dropout";
        Value* x = c.in({dt, full});
        Value* res = c.in({dt, full});
        Value* p = c.in({dt, {}});
        Value* zero = c.in({dt, {}});
        Value* two = c.in({dt, {}});
        c.inputs.at("in4").setF(0, 0.3);
        c.inputs.at("in5").setF(0, 0);
        c.inputs.at("in6").setF(0, 2);
        Value* kept = c.op(OpKind::Where, {c.op(OpKind::Ge, {draw(full), p}), x, zero});
        c.op(OpKind::Add, {res, c.op(OpKind::Mul, {kept, two})});
        break;
      }
      case 2: {  // a draw broadcast over some dims (a suffix, some dims 1)
        Shape ds(full.begin() + static_cast<std::ptrdiff_t>(r() % rank), full.end());
        for (auto& d : ds)
          if (r() % 3 == 0) d = 1;
        what = "broadcast draw " + shapeStr(ds);
        c.op(OpKind::Mul, {draw(ds), c.in({dt, full})});
        break;
      }
      case 3: {  // a transposed draw
        std::vector<int64_t> perm(rank);
        for (size_t d = 0; d < rank; ++d) perm[d] = static_cast<int64_t>(d);
        std::shuffle(perm.begin(), perm.end(), r);
        Shape ds(rank);
        for (size_t d = 0; d < rank; ++d) ds[static_cast<size_t>(perm[d])] = full[d];
        what = "transposed draw perm " + shapeStr(perm);
        Value* t = c.op(OpKind::Transpose, {draw(ds)}, {{"perm", perm}});
        c.op(OpKind::Add, {t, c.in({dt, full})});
        break;
      }
      case 4: {  // a slice of a longer draw along a random axis
        const auto axis = static_cast<int64_t>(r() % rank);
        const int64_t start = static_cast<int64_t>(r() % 5), step = 1 + static_cast<int64_t>(r() % 2);
        Shape ds = full;
        ds[static_cast<size_t>(axis)] = start + step * (full[static_cast<size_t>(axis)] - 1) + 1 +
                                        static_cast<int64_t>(r() % 3);
        what = fmt::format("slice axis {} start {} step {} of {}", axis, start, step, shapeStr(ds));
        Value* sl = c.op(OpKind::Slice, {draw(ds)},
                         {{"axis", axis},
                          {"start", start},
                          {"end", start + step * (full[static_cast<size_t>(axis)] - 1) + 1},
                          {"step", step}});
        c.op(OpKind::Mul, {sl, c.in({dt, full})});
        break;
      }
      case 5: {  // two draws concatenated along a random axis
        const auto axis = static_cast<int64_t>(r() % rank);
        const int64_t n = full[static_cast<size_t>(axis)];
        if (n < 2) {
          what = "draw";
          draw(full);
          break;
        }
        Shape a = full, b = full;
        a[static_cast<size_t>(axis)] = 1 + static_cast<int64_t>(r() % static_cast<uint64_t>(n - 1));
        b[static_cast<size_t>(axis)] = n - a[static_cast<size_t>(axis)];
        what = fmt::format("concat axis {} of {} {}", axis, shapeStr(a), shapeStr(b));
        Value* off2 = c.in({DType::i64, {}});
        c.inputs.at("in2").setI(0, static_cast<int64_t>(o + 3));
        Value* cat = c.op(OpKind::Concat, {draw(a), draw(b, off2)}, {{"axis", axis}});
        c.op(OpKind::Mul, {c.in({dt, full}), cat});
        break;
      }
      case 6: {  // reduce_sum(u * x) over random axes
        std::vector<int64_t> axes;
        for (size_t d = 0; d < rank; ++d)
          if (r() % 2) axes.push_back(static_cast<int64_t>(d));
        const bool keep = r() % 2;
        what = fmt::format("reduce_sum axes {} keepdims {}", shapeStr(axes), keep);
        Value* m = c.op(OpKind::Mul, {draw(full), c.in({dt, full})});
        c.op(OpKind::ReduceSum, {m}, {{"axes", axes}, {"keepdims", keep}});
        c.tol = dt == DType::f64 ? Tolerance{1e-12, 1e-12} : Tolerance{2e-5, 2e-5};
        break;
      }
      case 7: {  // two draws of one group, the second at another offset
        what = "two draws";
        Value* off2 = c.in({DType::i64, {}});
        c.inputs.at("in2").setI(0, static_cast<int64_t>(o + 1));
        c.op(OpKind::Sub, {draw(full), draw(full, off2)});
        break;
      }
    }
    c.label = fmt::format("trial {}: {} {} {} seed {:#x} offset {:#x}", trial, what,
                          dtypeName(dt), shapeStr(full), s, o);
    SCOPED_TRACE(c.label);
    checkCase(c);
    if (HasFailure()) return;
  }
  for (int k : kinds) EXPECT_GT(k, 0);
}

// ---- attention with dropout ------------------------------------------------------------------

struct Attention {
  Graph g{"attention"};
  std::map<std::string, Tensor> in;
  Node* fwd = nullptr;
  Node* bwd = nullptr;
  std::vector<std::string> fwdIn, bwdIn;
};

// q, k, v, [mask], seed, offset -> out, lse; then dq, dk, dv from a random dout.
void build(Attention& a, std::mt19937_64& r, std::string& label) {
  const int64_t b = 1 + static_cast<int64_t>(r() % 2), h = 1 + static_cast<int64_t>(r() % 2);
  const bool causal = r() % 2;  // needs as many queries as keys
  const int64_t tk = 1 + static_cast<int64_t>(r() % 70);
  const int64_t tq = causal ? tk : 1 + static_cast<int64_t>(r() % 70);
  const int64_t d = r() % 2 ? 8 : 16;
  const DType dt = r() % 3 == 0 ? DType::f64 : DType::f32;
  const int maskKind = static_cast<int>(r() % 3);  // none, key padding, full
  const double pDrop = r() % 2 ? 0.1 : 0.5;
  const uint64_t seed = r(), offset = randomOffset(r);
  label = fmt::format("B{} H{} Tq{} Tk{} D{} {}{} mask {} p {} seed {:#x} offset {:#x}", b, h,
                      tq, tk, d, dtypeName(dt), causal ? " causal" : "", maskKind, pDrop, seed,
                      offset);
  auto input = [&](const std::string& name, Tensor t) {
    Value* v = a.g.add(OpKind::Input, {}, {{"role", std::string("data")}}, {name}, {t.type()})
                   ->result();
    a.in.emplace(name, std::move(t));
    return v;
  };
  auto random = [&](const std::string& name, Shape s) {
    Tensor t(TensorType{dt, s});
    for (int64_t i = 0; i < t.numel(); ++i)
      t.setF(i, std::uniform_real_distribution<double>(-1, 1)(r));
    return input(name, std::move(t));
  };
  std::vector<Value*> ops{random("q", {b, h, tq, d}), random("k", {b, h, tk, d}),
                          random("v", {b, h, tk, d})};
  a.fwdIn = {"q", "k", "v"};
  if (maskKind != 0) {
    Tensor m(TensorType{DType::boolean, maskKind == 1 ? Shape{b, 1, 1, tk} : Shape{b, h, tq, tk}});
    const int64_t len = static_cast<int64_t>(r() % static_cast<uint64_t>(tk + 1));
    for (int64_t e = 0; e < m.numel(); ++e)
      m.setI(e, maskKind == 1 ? (e % tk < len) : (r() % 4 != 0));
    ops.push_back(input("mask", std::move(m)));
    a.fwdIn.push_back("mask");
  }
  Tensor st(TensorType{DType::i64, {}}), ot(TensorType{DType::i64, {}});
  st.setI(0, static_cast<int64_t>(seed));
  ot.setI(0, static_cast<int64_t>(offset));
  ops.push_back(input("seed", std::move(st)));
  ops.push_back(input("offset", std::move(ot)));
  a.fwdIn.insert(a.fwdIn.end(), {"seed", "offset"});
  const AttrMap attrs{{"scale", 1.0 / std::sqrt(static_cast<double>(d))},
                      {"causal", causal},
                      {"has_mask", maskKind != 0},
                      {"p_drop", pDrop}};
  a.fwd = a.g.add(OpKind::FusedAttention, ops, attrs, {"out", "lse"});
  Value* dout = random("dout", {b, h, tq, d});
  std::vector<Value*> gops{ops[0], ops[1], ops[2], a.fwd->result(0), a.fwd->result(1), dout};
  gops.insert(gops.end(), ops.begin() + 3, ops.end());
  a.bwd = a.g.add(OpKind::FusedAttentionGrad, gops, attrs, {"dq", "dk", "dv"});
  a.g.setOutputs({a.fwd->result(0), a.fwd->result(1), a.bwd->result(0), a.bwd->result(1),
                  a.bwd->result(2)});
}

TEST(PhiloxRandom, AttentionDropoutMatchesTheInterpreter) {
  const codegen::AttentionIsa saved = codegen::attentionIsa();
  std::mt19937_64 r(9);
  ThreadPool one(1), two(2);
  for (int trial = 0; trial < 200; ++trial) {
    std::string label;
    Attention a;
    build(a, r, label);
    const bool avx2 = codegen::attentionHasAvx2() && trial % 3 != 2;
    codegen::setAttentionIsa(avx2 ? codegen::AttentionIsa::Avx2 : codegen::AttentionIsa::Portable);
    ThreadPool& pool = trial % 2 ? two : one;
    SCOPED_TRACE(fmt::format("trial {}: {} {} threads {}", trial, label, avx2 ? "avx2" : "portable",
                             trial % 2 + 1));
    const std::vector<Tensor> want = Interpreter().run(a.g, a.in);
    std::vector<const Tensor*> fin;
    for (const std::string& n : a.fwdIn) fin.push_back(&a.in.at(n));
    std::vector<Tensor> fwd = runLibraryKernel(*a.fwd, fin, pool);
    std::vector<const Tensor*> bin{fin[0], fin[1], fin[2], &fwd[0], &fwd[1], &a.in.at("dout")};
    bin.insert(bin.end(), fin.begin() + 3, fin.end());
    std::vector<Tensor> bwd = runLibraryKernel(*a.bwd, bin, pool);
    const double tol = a.in.at("q").dtype() == DType::f32 ? 2e-5 : 1e-11;
    const Tensor* got[] = {&fwd[0], &fwd[1], &bwd[0], &bwd[1], &bwd[2]};
    for (size_t i = 0; i < std::size(got); ++i)
      EXPECT_TRUE(library_test::nearScaled(a.g.outputs()[i]->name(), *got[i], want[i], tol));
    if (HasFailure()) break;
  }
  codegen::setAttentionIsa(saved);
}

}  // namespace
}  // namespace tgc::lower_test
