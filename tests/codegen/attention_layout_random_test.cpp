// Randomized check of fused_attention(+_grad) layout="bthd": the interpreter's bthd op
// against its bhtd op on the transposed tensors, and the CPU kernels (both ISAs, 1 and 2
// threads, f32 / f64) against the interpreter's bthd op. Random B, H, Tq != Tk, head dims
// (in-place and padded), causal, key padding / per-query / per-head masks, dropout.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "codegen/attention_cpu.h"
#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/tensor.h"
#include "library_test_util.h"
#include "support/thread_pool.h"

namespace tgc {
namespace {

using codegen::AttentionIsa;
using library_test::nearScaled;
using library_test::swapDims12;

struct Rand {
  std::mt19937_64 rng;
  int64_t pick(int64_t lo, int64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  template <class T>
  T of(std::initializer_list<T> xs) {
    return xs.begin()[pick(0, static_cast<int64_t>(xs.size()) - 1)];
  }
};

struct Problem {
  Graph g;
  Node* fwd = nullptr;
  Node* bwd = nullptr;
  std::map<std::string, Tensor> in;
  std::vector<std::string> fwdNames, bwdExtra;
};

// One fwd + grad graph; q, k, v, dout are [B, T, H, D] when bthd, else [B, H, T, D].
void build(Problem& p, bool bthd, const std::map<std::string, Tensor>& in, const AttrMap& base) {
  p.in = in;
  auto input = [&](const std::string& name) {
    return p.g.add(OpKind::Input, {}, {{"role", std::string("data")}}, {name},
                   {p.in.at(name).type()})->result();
  };
  std::vector<Value*> ops{input("q"), input("k"), input("v")};
  std::vector<Value*> extra;
  for (const char* n : {"mask", "seed", "offset"})
    if (p.in.count(n)) extra.push_back(input(n));
  AttrMap attrs = base;
  if (bthd) attrs["layout"] = std::string("bthd");
  std::vector<Value*> f = ops;
  f.insert(f.end(), extra.begin(), extra.end());
  p.fwd = p.g.add(OpKind::FusedAttention, f, attrs, {"out", "lse"});
  std::vector<Value*> b{ops[0], ops[1], ops[2], p.fwd->result(0), p.fwd->result(1), input("dout")};
  b.insert(b.end(), extra.begin(), extra.end());
  p.bwd = p.g.add(OpKind::FusedAttentionGrad, b, attrs, {"dq", "dk", "dv"});
  p.g.setOutputs({p.fwd->result(0), p.fwd->result(1), p.bwd->result(0), p.bwd->result(1),
                  p.bwd->result(2)});
}

TEST(AttentionLayoutRandom, BthdMatchesBhtdAndTheKernelsMatchTheInterpreter) {
  Rand r{std::mt19937_64(20261130)};
  ThreadPool pool1(1), pool2(2);
  const AttentionIsa savedIsa = codegen::attentionIsa();
  const int cases = 60;
  for (int it = 0; it < cases; ++it) {
    const int64_t b = r.pick(1, 2), h = r.pick(1, 5), tq = r.pick(1, 70);
    const bool causal = r.pick(0, 3) == 0;
    const int64_t tk = causal ? tq : r.of<int64_t>({tq, r.pick(1, 70)});
    const int64_t d = r.of<int64_t>({5, 16, 32, 40, 64});
    const int64_t dv = r.pick(0, 2) == 0 ? r.of<int64_t>({5, 16, 32, 40, 64}) : d;
    const DType dt = r.pick(0, 1) ? DType::f32 : DType::f64;
    const int maskKind = static_cast<int>(r.pick(0, 4));  // none, [B,1,1,Tk], [B,1,Tq,Tk], [1,H,Tq,Tk], [B,H,Tq,Tk]
    const double pDrop = r.pick(0, 2) == 0 ? 0.3 : 0.0;
    const std::string what = "case " + std::to_string(it) + ": B" + std::to_string(b) + " H" +
                             std::to_string(h) + " Tq" + std::to_string(tq) + " Tk" +
                             std::to_string(tk) + " D" + std::to_string(d) + " Dv" +
                             std::to_string(dv) + (causal ? " causal" : "") + " mask" +
                             std::to_string(maskKind) + (pDrop > 0 ? " dropout " : " ") +
                             std::string(dtypeName(dt));
    SCOPED_TRACE(what);
    std::map<std::string, Tensor> in;  // bthd
    auto random = [&](const std::string& name, Shape s) {
      Tensor t(TensorType{dt, s});
      for (int64_t i = 0; i < t.numel(); ++i)
        t.setF(i, std::uniform_real_distribution<double>(-1.5, 1.5)(r.rng));
      in.emplace(name, t);
    };
    random("q", {b, tq, h, d});
    random("k", {b, tk, h, d});
    random("v", {b, tk, h, dv});
    random("dout", {b, tq, h, dv});
    if (maskKind > 0) {
      Shape ms = maskKind == 1   ? Shape{b, 1, 1, tk}
                 : maskKind == 2 ? Shape{b, 1, tq, tk}
                 : maskKind == 3 ? Shape{1, h, tq, tk}
                                 : Shape{b, h, tq, tk};
      Tensor m(TensorType{DType::boolean, ms});
      const int64_t cut = r.pick(0, tk);  // key padding: keys < cut allowed (0: none)
      for (int64_t e = 0; e < m.numel(); ++e)
        m.setI(e, maskKind == 1 ? (e % tk < cut) : static_cast<int64_t>(r.pick(0, 3) != 0));
      in.emplace("mask", m);
    }
    if (pDrop > 0) {
      Tensor s(TensorType{DType::i64, {}}), o(TensorType{DType::i64, {}});
      s.setI(0, static_cast<int64_t>(r.pick(1, 1 << 30)));
      o.setI(0, r.pick(0, 1000));
      in.emplace("seed", s);
      in.emplace("offset", o);
    }
    const AttrMap attrs{{"scale", 1.0 / std::sqrt(static_cast<double>(d))},
                        {"causal", causal},
                        {"has_mask", maskKind > 0},
                        {"p_drop", pDrop}};
    Problem pt, ph;
    build(pt, true, in, attrs);
    std::map<std::string, Tensor> inH = in;
    for (const char* n : {"q", "k", "v", "dout"}) inH.at(n) = swapDims12(in.at(n));
    build(ph, false, inH, attrs);
    const std::vector<Tensor> want = Interpreter().run(pt.g, pt.in);
    const std::vector<Tensor> wantH = Interpreter().run(ph.g, ph.in);
    // The interpreter: bthd is bhtd on the transposes (same arithmetic: exact).
    const double exact = 0;
    EXPECT_TRUE(nearScaled("interp out", swapDims12(want[0]), wantH[0], exact));
    EXPECT_TRUE(nearScaled("interp lse", want[1], wantH[1], exact));
    for (int i = 2; i < 5; ++i)
      EXPECT_TRUE(nearScaled("interp grad " + std::to_string(i), swapDims12(want[static_cast<size_t>(i)]),
                       wantH[static_cast<size_t>(i)], exact));
    // The kernels, each ISA and pool.
    const double tol = dt == DType::f32 ? 3e-5 : 1e-10;
    for (AttentionIsa isa : {AttentionIsa::Avx2, AttentionIsa::Portable}) {
      if (isa == AttentionIsa::Avx2 && !codegen::attentionHasAvx2()) continue;
      codegen::setAttentionIsa(isa);
      for (ThreadPool* pool : {&pool1, &pool2}) {
        std::vector<const Tensor*> f{&pt.in.at("q"), &pt.in.at("k"), &pt.in.at("v")};
        for (const char* n : {"mask", "seed", "offset"})
          if (pt.in.count(n)) f.push_back(&pt.in.at(n));
        std::vector<Tensor> fo = library_test::runLibraryKernel(*pt.fwd, f, *pool);
        std::vector<const Tensor*> g{f[0], f[1], f[2], &fo[0], &fo[1], &pt.in.at("dout")};
        g.insert(g.end(), f.begin() + 3, f.end());
        std::vector<Tensor> go = library_test::runLibraryKernel(*pt.bwd, g, *pool);
        const std::string tag = std::string(isa == AttentionIsa::Avx2 ? "avx2" : "portable") +
                                (pool == &pool1 ? " 1t " : " 2t ");
        EXPECT_TRUE(nearScaled(tag + "out", fo[0], want[0], tol));
        EXPECT_TRUE(nearScaled(tag + "lse", fo[1], want[1], tol));
        EXPECT_TRUE(nearScaled(tag + "dq", go[0], want[2], tol));
        EXPECT_TRUE(nearScaled(tag + "dk", go[1], want[3], tol));
        EXPECT_TRUE(nearScaled(tag + "dv", go[2], want[4], tol));
      }
    }
  }
  codegen::setAttentionIsa(savedIsa);
}

}  // namespace
}  // namespace tgc
