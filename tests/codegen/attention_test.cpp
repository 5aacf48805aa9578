// The CPU FlashAttention kernels (codegen/attention_cpu.h) through the library registry
// (codegen/library.h): against a naive double reference written here from ir/fused_ops.h,
// against the interpreter's reference kernels, against central differences of the forward
// kernel, and inside a compiled graph (runtime/executable.h) with poisoning on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "codegen/attention_cpu.h"
#include "codegen/library.h"
#include "library_test_util.h"
#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/philox.h"
#include "ir/tensor.h"
#include "runtime/executable.h"
#include "support/thread_pool.h"
#include "tests/runtime/exec_test_util.h"

namespace tgc {
namespace {

using codegen::AttentionIsa;
using library_test::runLibraryKernel;

enum class MaskKind {
  None,
  KeyPadding,  // [B, 1, 1, Tk]: item 0 sees a prefix of the keys, item 1 (if any) none
  Full,        // [B, H, Tq, Tk] random, with query row 0 of every head fully masked
};

struct Case {
  int64_t b = 1, h = 1, tq = 1, tk = 1, d = 16, dv = 16;
  bool causal = false;
  MaskKind mask = MaskKind::None;
  double pDrop = 0;
  DType dtype = DType::f32;
  uint64_t offset = 977;  // dropout's Philox offset
  bool bthd = false;      // layout="bthd": q, k, v, out, dout, dq, dk, dv are [B, T, H, D]
  // An additive bias with bias_grad (dbias the fourth gradient): per head [1, H, Tq, Tk]
  // (ALiBi's shape), per key [B, 1, 1, Tk], or [B, H, Tq, Tk].
  enum class Bias { None, Heads, Keys, Full } bias = Bias::None;
};

std::string describe(const Case& c) {
  return "B" + std::to_string(c.b) + " H" + std::to_string(c.h) + " Tq" + std::to_string(c.tq) +
         " Tk" + std::to_string(c.tk) + " D" + std::to_string(c.d) + " Dv" + std::to_string(c.dv) +
         (c.causal ? " causal" : "") +
         (c.mask == MaskKind::KeyPadding ? " padding" : c.mask == MaskKind::Full ? " mask" : "") +
         (c.pDrop > 0 ? " dropout" : "") + (c.bthd ? " bthd" : "") +
         (c.bias != Case::Bias::None ? " bias" + std::to_string(static_cast<int>(c.bias)) : "") +
         " " + std::string(dtypeName(c.dtype));
}

constexpr uint64_t kSeed = 0x1234abcd5678ull;

// The two graphs' nodes and the tensors they run on.
struct Problem {
  Case c;
  Graph g;
  Node* fwd = nullptr;
  Node* bwd = nullptr;
  std::map<std::string, Tensor> in;  // q, k, v, [mask], [seed, offset], dout

  double scale() const { return 1.0 / std::sqrt(static_cast<double>(c.d)); }
};

Tensor makeMask(const Case& c, std::mt19937_64& rng) {
  if (c.mask == MaskKind::KeyPadding) {
    Tensor m(TensorType{DType::boolean, {c.b, 1, 1, c.tk}});
    for (int64_t b = 0; b < c.b; ++b)
      for (int64_t j = 0; j < c.tk; ++j)
        m.setI(b * c.tk + j, b == 0 ? j < (c.tk + 1) / 2 + 1 : 0);  // item 1+: no key at all
    return m;
  }
  Tensor m(TensorType{DType::boolean, {c.b, c.h, c.tq, c.tk}});
  for (int64_t e = 0; e < m.numel(); ++e) {
    const int64_t i = e / c.tk % c.tq;
    m.setI(e, i == 0 ? 0 : static_cast<int64_t>(rng() % 4 != 0));
  }
  return m;
}

void build(Problem& p) {
  const Case& c = p.c;
  Graph& g = p.g;
  std::mt19937_64 rng(static_cast<uint64_t>(c.tq * 131 + c.tk * 7 + c.d));
  auto input = [&](const std::string& name, const TensorType& t) {
    return g.add(OpKind::Input, {}, {{"role", std::string("data")}}, {name}, {t})->result();
  };
  auto random = [&](const std::string& name, Shape s) {
    Tensor t(TensorType{c.dtype, s});
    for (int64_t i = 0; i < t.numel(); ++i)
      t.setF(i, std::uniform_real_distribution<double>(-1, 1)(rng));
    p.in.emplace(name, t);
    return input(name, t.type());
  };
  // [B, H, T, D], or [B, T, H, D] in layout bthd.
  auto heads = [&](int64_t t, int64_t d) {
    return c.bthd ? Shape{c.b, t, c.h, d} : Shape{c.b, c.h, t, d};
  };
  Value* q = random("q", heads(c.tq, c.d));
  Value* k = random("k", heads(c.tk, c.d));
  Value* v = random("v", heads(c.tk, c.dv));
  std::vector<Value*> extra;
  if (c.mask != MaskKind::None) {
    Tensor m = makeMask(c, rng);
    extra.push_back(input("mask", m.type()));
    p.in.emplace("mask", m);
  }
  if (c.bias != Case::Bias::None)
    extra.push_back(random("bias", c.bias == Case::Bias::Heads  ? Shape{1, c.h, c.tq, c.tk}
                                   : c.bias == Case::Bias::Keys ? Shape{c.b, 1, 1, c.tk}
                                                                : Shape{c.b, c.h, c.tq, c.tk}));
  if (c.pDrop > 0) {
    const TensorType i64{DType::i64, {}};
    extra.push_back(input("seed", i64));
    extra.push_back(input("offset", i64));
    Tensor s(i64), o(i64);
    s.setI(0, static_cast<int64_t>(kSeed));
    o.setI(0, static_cast<int64_t>(c.offset));
    p.in.emplace("seed", s);
    p.in.emplace("offset", o);
  }
  AttrMap attrs{{"scale", p.scale()},
                {"causal", c.causal},
                {"has_mask", c.mask != MaskKind::None},
                {"p_drop", c.pDrop}};
  if (c.bthd) attrs["layout"] = std::string("bthd");
  const bool bias = c.bias != Case::Bias::None;
  if (bias) attrs["has_bias"] = true;
  std::vector<Value*> ops{q, k, v};
  ops.insert(ops.end(), extra.begin(), extra.end());
  p.fwd = g.add(OpKind::FusedAttention, ops, attrs, {"out", "lse"});
  Value* dout = random("dout", heads(c.tq, c.dv));
  std::vector<Value*> gops{q, k, v, p.fwd->result(0), p.fwd->result(1), dout};
  gops.insert(gops.end(), extra.begin(), extra.end());
  std::vector<std::string> grads{"dq", "dk", "dv"};
  if (bias) {
    attrs["bias_grad"] = true;
    grads.push_back("dbias");
  }
  p.bwd = g.add(OpKind::FusedAttentionGrad, gops, attrs, grads);
  std::vector<Value*> outs{p.fwd->result(0), p.fwd->result(1)};
  for (size_t i = 0; i < p.bwd->numResults(); ++i) outs.push_back(p.bwd->result(i));
  g.setOutputs(outs);
}

std::vector<const Tensor*> forwardOperands(const Problem& p) {
  std::vector<const Tensor*> ops{&p.in.at("q"), &p.in.at("k"), &p.in.at("v")};
  if (p.c.mask != MaskKind::None) ops.push_back(&p.in.at("mask"));
  if (p.c.bias != Case::Bias::None) ops.push_back(&p.in.at("bias"));
  if (p.c.pDrop > 0) {
    ops.push_back(&p.in.at("seed"));
    ops.push_back(&p.in.at("offset"));
  }
  return ops;
}

std::vector<const Tensor*> backwardOperands(const Problem& p, const Tensor& out,
                                            const Tensor& lse) {
  std::vector<const Tensor*> f = forwardOperands(p);
  std::vector<const Tensor*> ops{f[0], f[1], f[2], &out, &lse, &p.in.at("dout")};
  ops.insert(ops.end(), f.begin() + 3, f.end());
  return ops;
}

// x [B, T, H, D] of a bthd case as [B, H, T, D] (written here, not with the kernels' strides);
// any other tensor as it is.
Tensor asBhtd(const Case& c, const Tensor& x) {
  return c.bthd && x.type().rank() == 4 ? library_test::swapDims12(x) : x;
}

// ---- the naive reference: ir/fused_ops.h, literally, in double ---------------------------

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

// Backward from the given out (the kernel's, as the op receives it).
Reference reference(const Problem& p, const Tensor& outForBackward) {
  const Case& c = p.c;
  auto rows = [&](const Tensor& x) { return asBhtd(c, x).toDoubles(); };  // [B, H, T, D]
  const std::vector<double> q = rows(p.in.at("q")), k = rows(p.in.at("k")),
                            v = rows(p.in.at("v")), dout = rows(p.in.at("dout")),
                            out = rows(outForBackward);
  const Tensor* mask = c.mask != MaskKind::None ? &p.in.at("mask") : nullptr;
  const bool f32 = c.dtype == DType::f32;
  const double keepScale = f32 ? static_cast<float>(1.0 / (1.0 - c.pDrop)) : 1.0 / (1.0 - c.pDrop);
  const double ninf = -std::numeric_limits<double>::infinity();
  Reference r;
  r.out.assign(static_cast<size_t>(c.b * c.h * c.tq * c.dv), 0);
  r.lse.assign(static_cast<size_t>(c.b * c.h * c.tq), 0);
  r.dq.assign(static_cast<size_t>(c.b * c.h * c.tq * c.d), 0);
  r.dk.assign(static_cast<size_t>(c.b * c.h * c.tk * c.d), 0);
  r.dv.assign(static_cast<size_t>(c.b * c.h * c.tk * c.dv), 0);
  const size_t tt = static_cast<size_t>(c.tq * c.tk);
  std::vector<double> pm(tt), z(tt), s(tt);
  std::vector<char> allowed(tt);
  for (int64_t bb = 0; bb < c.b; ++bb)
    for (int64_t hh = 0; hh < c.h; ++hh) {
      const int64_t bh = bb * c.h + hh;
      const double* qh = q.data() + bh * c.tq * c.d;
      const double* kh = k.data() + bh * c.tk * c.d;
      const double* vh = v.data() + bh * c.tk * c.dv;
      const double* gh = dout.data() + bh * c.tq * c.dv;
      for (int64_t i = 0; i < c.tq; ++i)
        for (int64_t j = 0; j < c.tk; ++j) {
          bool a = !(c.causal && j > i);
          if (mask) {
            const Shape& ms = mask->shape();
            const int64_t idx = (((ms[0] == 1 ? 0 : bb) * ms[1] + (ms[1] == 1 ? 0 : hh)) * ms[2] +
                                 (ms[2] == 1 ? 0 : i)) * ms[3] + (ms[3] == 1 ? 0 : j);
            a = a && mask->getI(idx) != 0;
          }
          allowed[static_cast<size_t>(i * c.tk + j)] = a;
        }
      for (int64_t i = 0; i < c.tq; ++i) {
        double mx = ninf;
        for (int64_t j = 0; j < c.tk; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < c.d; ++e) dot += qh[i * c.d + e] * kh[j * c.d + e];
          const size_t e = static_cast<size_t>(i * c.tk + j);
          s[e] = p.scale() * dot;
          if (allowed[e]) mx = std::max(mx, s[e]);
        }
        double sum = 0;
        for (int64_t j = 0; j < c.tk; ++j)
          if (allowed[static_cast<size_t>(i * c.tk + j)]) sum += std::exp(s[static_cast<size_t>(i * c.tk + j)] - mx);
        const double lse = sum > 0 ? mx + std::log(sum) : ninf;
        r.lse[static_cast<size_t>(bh * c.tq + i)] = lse;
        double* orow = r.out.data() + (bh * c.tq + i) * c.dv;
        for (int64_t j = 0; j < c.tk; ++j) {
          const size_t e = static_cast<size_t>(i * c.tk + j);
          pm[e] = allowed[e] ? std::exp(s[e] - lse) : 0;
          z[e] = 1;
          if (c.pDrop > 0) {
            const uint64_t idx = static_cast<uint64_t>((bh * c.tq + i) * c.tk + j);
            const float u = philoxUniformAt(kSeed, c.offset, idx);
            const bool keep = f32 ? u >= static_cast<float>(c.pDrop) : u >= c.pDrop;
            z[e] = keep ? keepScale : 0;
          }
          for (int64_t o = 0; o < c.dv; ++o) orow[o] += pm[e] * z[e] * vh[j * c.dv + o];
        }
      }
      for (int64_t i = 0; i < c.tq; ++i) {
        const double* gi = gh + i * c.dv;
        const double* oi = out.data() + (bh * c.tq + i) * c.dv;
        double delta = 0;
        for (int64_t o = 0; o < c.dv; ++o) delta += gi[o] * oi[o];
        double* dqi = r.dq.data() + (bh * c.tq + i) * c.d;
        for (int64_t j = 0; j < c.tk; ++j) {
          const size_t e = static_cast<size_t>(i * c.tk + j);
          if (pm[e] == 0) continue;  // ds and p z are 0
          double dpz = 0;
          double* dvj = r.dv.data() + (bh * c.tk + j) * c.dv;
          for (int64_t o = 0; o < c.dv; ++o) {
            dpz += gi[o] * vh[j * c.dv + o];
            dvj[o] += pm[e] * z[e] * gi[o];
          }
          const double ds = pm[e] * (dpz * z[e] - delta);
          double* dkj = r.dk.data() + (bh * c.tk + j) * c.d;
          for (int64_t x = 0; x < c.d; ++x) {
            dqi[x] += p.scale() * ds * kh[j * c.d + x];
            dkj[x] += p.scale() * ds * qh[i * c.d + x];
          }
        }
      }
    }
  return r;
}

// |got - want| <= tol * max(1, max |want|) everywhere; -inf must match -inf.
::testing::AssertionResult near(const char* what, const Tensor& got,
                                const std::vector<double>& want, double tol) {
  double scale = 1;
  for (double w : want)
    if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.getF(i), w = want[static_cast<size_t>(i)];
    if (std::isinf(w) && g == w) continue;
    if (!(std::fabs(g - w) <= tol * scale))
      return ::testing::AssertionFailure()
             << what << " element " << i << ": " << g << " vs " << w << " (scale " << scale << ")";
  }
  return ::testing::AssertionSuccess();
}

double tolerance(DType d) { return d == DType::f32 ? 2e-5 : 1e-11; }

void checkAgainstReference(const Case& c, ThreadPool& pool) {
  SCOPED_TRACE(describe(c));
  Problem p;
  p.c = c;
  build(p);
  std::vector<Tensor> fwd = runLibraryKernel(*p.fwd, forwardOperands(p), pool);
  std::vector<Tensor> bwd = runLibraryKernel(*p.bwd, backwardOperands(p, fwd[0], fwd[1]), pool);
  const Reference r = reference(p, fwd[0]);
  const double tol = tolerance(c.dtype);
  EXPECT_TRUE(near("out", asBhtd(c, fwd[0]), r.out, tol));
  EXPECT_TRUE(near("lse", fwd[1], r.lse, tol));
  EXPECT_TRUE(near("dq", asBhtd(c, bwd[0]), r.dq, tol));
  EXPECT_TRUE(near("dk", asBhtd(c, bwd[1]), r.dk, tol));
  EXPECT_TRUE(near("dv", asBhtd(c, bwd[2]), r.dv, tol));
  for (const Tensor* t : {&fwd[0], &bwd[0], &bwd[1], &bwd[2]})
    for (int64_t i = 0; i < t->numel(); ++i) ASSERT_FALSE(std::isnan(t->getF(i))) << i;
}

class AttentionKernel : public ::testing::TestWithParam<AttentionIsa> {
 protected:
  void SetUp() override {
    saved_ = codegen::attentionIsa();
    if (GetParam() == AttentionIsa::Avx2 && !codegen::attentionHasAvx2())
      GTEST_SKIP() << "no AVX2 and FMA on this CPU";
    codegen::setAttentionIsa(GetParam());
  }
  void TearDown() override { codegen::setAttentionIsa(saved_); }
  ThreadPool pool_{2};
  AttentionIsa saved_ = AttentionIsa::Portable;
};

TEST_P(AttentionKernel, SequenceLengthsMasksAndDropout) {
  for (int64_t t : {1, 7, 64, 257})
    for (DType dt : {DType::f32, DType::f64})
      for (bool causal : {false, true})
        for (MaskKind m : {MaskKind::None, MaskKind::KeyPadding, MaskKind::Full})
          for (double drop : {0.0, 0.25}) {
            if (t == 257 && (m == MaskKind::Full || dt == DType::f64) && drop == 0) continue;
            Case c;
            c.b = 2;
            c.h = t >= 64 ? 1 : 2;
            c.tq = c.tk = t;
            c.d = t == 7 ? 5 : 32;   // head dims that are not a multiple of the vector
            c.dv = t == 7 ? 9 : 24;
            c.causal = causal;
            c.mask = m;
            c.pDrop = drop;
            c.dtype = dt;
            checkAgainstReference(c, pool_);
          }
}

// One query against many keys, a decoding step's shape: its scores are dot products with
// the keys as stored (no transposed copy), up to the one-block limit and past it.
TEST_P(AttentionKernel, OneQueryAgainstManyKeys) {
  for (int64_t tk : {1, 5, 37, 64, 130, 300})
    for (int64_t d : {64, 32, 40})
      for (MaskKind m : {MaskKind::None, MaskKind::KeyPadding, MaskKind::Full})
        for (double drop : {0.0, 0.25}) {
          Case c;
          c.b = 3;
          c.h = 2;
          c.tq = 1;
          c.tk = tk;
          c.d = d;
          c.dv = d == 40 ? 64 : d;
          c.mask = m;
          c.pDrop = drop;
          checkAgainstReference(c, pool_);
        }
}

// The Transformer's head dims (multiples of the column padding: q, k, v, dout are read and
// dq, dk, dv accumulated in place, without padded copies) at lengths around the block
// product's row tiles (6, then 1-5 or 4 + 3 / 4 + 4) and the 8 x 8 transposes' edges;
// head dim 40 pads dv while d is read in place (-40: pads d while dv is read in place).
TEST_P(AttentionKernel, ShortLengthsAtHeadDims32And64) {
  for (int64_t t : {1, 2, 5, 7, 11, 31, 32, 33, 65})
    for (int64_t d : {32, 64, 40, -40})
      for (bool causal : {false, true})
        for (MaskKind m : {MaskKind::None, MaskKind::KeyPadding, MaskKind::Full})
          for (double drop : {0.0, 0.25}) {
            if ((d == 40 || d == -40) && (t != 33 || m == MaskKind::Full)) continue;
            Case c;
            c.b = 2;
            c.h = 2;
            c.tq = c.tk = t;
            c.d = d == 40 ? 64 : d == -40 ? 40 : d;
            c.dv = d == -40 ? 64 : d;
            c.causal = causal;
            c.mask = m;
            c.pDrop = drop;
            // f64 at the lengths whose row tiles are 2, 5 and 3 (its AVX2 kernel has 4 lanes).
            const bool f64 = (t == 2 || t == 5 || t == 11 || t == 33) && m == MaskKind::None;
            c.dtype = f64 ? DType::f64 : DType::f32;
            checkAgainstReference(c, pool_);
          }
}

// Several key blocks at head dim 64: dq accumulates over the key blocks in place, dk and dv
// per key block straight into the outputs.
TEST_P(AttentionKernel, Length257AtHeadDim64) {
  for (bool causal : {false, true}) {
    Case c;
    c.b = 2;
    c.h = 1;
    c.tq = c.tk = 257;
    c.d = c.dv = 64;
    c.causal = causal;
    c.mask = MaskKind::KeyPadding;
    c.pDrop = causal ? 0.1 : 0;
    checkAgainstReference(c, pool_);
  }
}

TEST_P(AttentionKernel, CrossAttentionWithMoreKeysThanQueries) {
  for (DType dt : {DType::f32, DType::f64}) {
    Case c;
    c.b = 2;
    c.h = 2;
    c.tq = 7;
    c.tk = 130;
    c.d = 64;
    c.dv = 64;
    c.mask = MaskKind::KeyPadding;
    c.dtype = dt;
    checkAgainstReference(c, pool_);
  }
}

// The vectorized Philox carries the 64-bit counter from word 0 into word 1, like
// philoxUniformAt: counters that cross 2^32 inside a row.
TEST_P(AttentionKernel, DropoutCountersCrossing32Bits) {
  for (DType dt : {DType::f32, DType::f64}) {
    Case c;
    c.b = 1;
    c.h = 2;
    c.tq = c.tk = 70;
    c.pDrop = 0.5;
    c.dtype = dt;
    c.offset = (uint64_t{1} << 32) - 3 * 70 - 29;
    checkAgainstReference(c, pool_);
  }
}

TEST_P(AttentionKernel, Length1024) {
  Case c;
  c.b = 1;
  c.h = 2;
  c.tq = c.tk = 1024;
  c.d = c.dv = 64;
  c.causal = true;
  c.pDrop = 0.1;
  checkAgainstReference(c, pool_);
}

// Layout bthd (rows of a head H * D apart, heads interleaved): the lengths, masks, dropout,
// dtypes and head dims above, with 3 heads so that a stride off by one head or one row
// lands on another head's data. Head dim 32 / 64 read and accumulate in place through the
// stride; 40 pads dv (-40 pads d), 5 / 9 pad both.
TEST_P(AttentionKernel, HeadsInsideRowsLayout) {
  for (int64_t t : {1, 7, 64, 257})
    for (int64_t d : {32, 64, 40, -40, 5})
      for (bool causal : {false, true})
        for (MaskKind m : {MaskKind::None, MaskKind::KeyPadding, MaskKind::Full})
          for (double drop : {0.0, 0.25}) {
            if (t == 257 && (d != 64 || m == MaskKind::Full)) continue;
            if (d != 32 && d != 64 && (m == MaskKind::Full || t == 1)) continue;
            Case c;
            c.bthd = true;
            c.b = 2;
            c.h = t == 257 ? 2 : 3;
            c.tq = c.tk = t;
            c.d = d == 40 ? 64 : d == -40 ? 40 : d;
            c.dv = d == -40 ? 64 : d == 5 ? 9 : d;
            c.causal = causal;
            c.mask = m;
            c.pDrop = drop;
            c.dtype = (t == 7 || d == 40) && !causal ? DType::f64 : DType::f32;
            checkAgainstReference(c, pool_);
          }
  Case cross;  // more keys than queries
  cross.bthd = true;
  cross.b = 2;
  cross.h = 3;
  cross.tq = 7;
  cross.tk = 130;
  cross.d = cross.dv = 64;
  cross.mask = MaskKind::KeyPadding;
  checkAgainstReference(cross, pool_);
}

INSTANTIATE_TEST_SUITE_P(Isa, AttentionKernel,
                         ::testing::Values(AttentionIsa::Avx2, AttentionIsa::Portable),
                         [](const auto& param) {
                           return param.param == AttentionIsa::Avx2 ? "Avx2" : "Portable";
                         });

TEST(AttentionKernel, FullyMaskedRowsGiveZerosAndMinusInfinity) {
  ThreadPool pool(2);
  Problem p;
  p.c.b = 2;
  p.c.h = 2;
  p.c.tq = p.c.tk = 70;
  p.c.mask = MaskKind::KeyPadding;  // batch item 1 has no key at all
  p.c.pDrop = 0.5;
  build(p);
  std::vector<Tensor> fwd = runLibraryKernel(*p.fwd, forwardOperands(p), pool);
  std::vector<Tensor> bwd = runLibraryKernel(*p.bwd, backwardOperands(p, fwd[0], fwd[1]), pool);
  const int64_t perItem = p.c.h * p.c.tq;
  for (int64_t i = perItem; i < 2 * perItem; ++i) {
    EXPECT_EQ(fwd[1].getF(i), -std::numeric_limits<double>::infinity());
    for (int64_t o = 0; o < p.c.dv; ++o) EXPECT_EQ(fwd[0].getF(i * p.c.dv + o), 0.0);
  }
  for (const Tensor& g : bwd)
    for (int64_t i = g.numel() / 2; i < g.numel(); ++i) ASSERT_EQ(g.getF(i), 0.0) << i;
}

// The backward kernel is the derivative of the forward kernel: central differences of
// sum(out * dout) along random directions of q, k and v, in f64.
TEST(AttentionKernel, BackwardMatchesCentralDifferences) {
  ThreadPool pool(2);
  Problem p;
  p.c.b = 1;
  p.c.h = 2;
  p.c.tq = p.c.tk = 70;
  p.c.d = 8;
  p.c.dv = 8;
  p.c.causal = true;
  p.c.mask = MaskKind::Full;
  p.c.pDrop = 0.2;
  p.c.dtype = DType::f64;
  build(p);
  std::vector<Tensor> fwd = runLibraryKernel(*p.fwd, forwardOperands(p), pool);
  std::vector<Tensor> grads = runLibraryKernel(*p.bwd, backwardOperands(p, fwd[0], fwd[1]), pool);
  const Tensor& dout = p.in.at("dout");
  auto loss = [&] {
    Tensor out = runLibraryKernel(*p.fwd, forwardOperands(p), pool)[0];
    double l = 0;
    for (int64_t i = 0; i < out.numel(); ++i) l += out.getF(i) * dout.getF(i);
    return l;
  };
  std::mt19937_64 rng(5);
  const char* names[] = {"q", "k", "v"};
  for (int w = 0; w < 3; ++w) {
    Tensor& x = p.in.at(names[w]);
    const Tensor x0 = x;
    Tensor dir(x.type());
    double predicted = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      dir.setF(i, std::uniform_real_distribution<double>(-1, 1)(rng));
      predicted += dir.getF(i) * grads[static_cast<size_t>(w)].getF(i);
    }
    const double h = 1e-5;
    for (int64_t i = 0; i < x.numel(); ++i) x.setF(i, x0.getF(i) + h * dir.getF(i));
    const double up = loss();
    for (int64_t i = 0; i < x.numel(); ++i) x.setF(i, x0.getF(i) - h * dir.getF(i));
    const double down = loss();
    x = x0;
    EXPECT_NEAR((up - down) / (2 * h), predicted, 1e-7 * std::max(1.0, std::fabs(predicted)))
        << names[w];
  }
}

TEST(AttentionKernel, RejectsBf16) {
  Graph g;
  const TensorType t{DType::bf16, {1, 4, 8}};
  std::vector<Value*> qkv;
  for (const char* n : {"q", "k", "v"})
    qkv.push_back(g.add(OpKind::Input, {}, {{"role", std::string("data")}}, {n}, {t})->result());
  Node* n = g.add(OpKind::FusedAttention, qkv, {{"scale", 0.5}}, {"out", "lse"});
  try {
    codegen::bindLibraryKernel(*n);
    FAIL() << "bf16 was accepted";
  } catch (const IRError& e) {
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
  }
}

// ---- against the interpreter, and through a compiled graph ---------------------------------

// The interpreter's reference kernels (ir/interp_attention.cpp).
std::vector<Tensor> interpret(const Graph& g, const std::map<std::string, Tensor>& in) {
  return Interpreter().run(g, in);
}

// The library kernels' results (forward, then backward from the kernel's out and lse)
// against the interpreter's graph outputs, in order; returns them.
std::pair<std::vector<Tensor>, std::vector<Tensor>> expectKernelsMatchTheInterpreter(Problem& p,
                                                                                      ThreadPool& pool) {
  const std::vector<Tensor> want = interpret(p.g, p.in);
  std::vector<Tensor> fwd = runLibraryKernel(*p.fwd, forwardOperands(p), pool);
  std::vector<Tensor> bwd = runLibraryKernel(*p.bwd, backwardOperands(p, fwd[0], fwd[1]), pool);
  std::vector<const Tensor*> got{&fwd[0], &fwd[1]};
  for (const Tensor& t : bwd) got.push_back(&t);
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    EXPECT_TRUE(near(p.g.outputs()[i]->name().c_str(), *got[i], want[i].toDoubles(),
                     tolerance(p.c.dtype)));
  return {std::move(fwd), std::move(bwd)};
}

TEST(AttentionKernel, MatchesTheInterpreter) {
  ThreadPool pool(2);
  for (DType dt : {DType::f32, DType::f64})
    for (bool causal : {false, true})
      for (bool bthd : {false, true}) {
        Problem p;
        p.c.bthd = bthd;
        p.c.b = 2;
        p.c.h = 2;
        p.c.tq = p.c.tk = 67;
        p.c.d = p.c.dv = 16;
        p.c.causal = causal;
        p.c.mask = causal ? MaskKind::KeyPadding : MaskKind::Full;
        p.c.pDrop = 0.1;
        p.c.dtype = dt;
        build(p);
        SCOPED_TRACE(describe(p.c));
        expectKernelsMatchTheInterpreter(p, pool);
      }
}

// An additive bias, per head, per key or full, with its gradient: against the interpreter
// at one block (L 7) and several (L 67, causal: the skipped blocks add nothing to dbias),
// with masks, dropout and layout bthd; the batch items that share a per-head bias run in
// one task, so dbias is the same on 1 and 3 threads, bit for bit.
TEST(AttentionKernel, AdditiveBiasAndItsGradientMatchTheInterpreter) {
  ThreadPool pool(2), pool3(3), pool1(1);
  for (auto bias : {Case::Bias::Heads, Case::Bias::Keys, Case::Bias::Full})
    for (int64_t l : {7, 67})
      for (bool causal : {false, true})
        for (DType dt : {DType::f32, DType::f64}) {
          Problem p;
          p.c.bias = bias;
          p.c.bthd = l == 67 && !causal;
          p.c.b = 2;
          p.c.h = 3;
          p.c.tq = p.c.tk = l;
          p.c.d = p.c.dv = l == 7 ? 5 : 16;
          p.c.causal = causal;
          p.c.mask = causal ? MaskKind::KeyPadding : MaskKind::Full;
          p.c.pDrop = l == 67 ? 0.1 : 0.0;
          p.c.dtype = dt;
          build(p);
          SCOPED_TRACE(describe(p.c));
          const auto [fwd, bwd] = expectKernelsMatchTheInterpreter(p, pool);
          ASSERT_EQ(bwd.size(), 4u);
          for (ThreadPool* other : {&pool1, &pool3}) {
            std::vector<Tensor> again =
                runLibraryKernel(*p.bwd, backwardOperands(p, fwd[0], fwd[1]), *other);
            EXPECT_EQ(std::memcmp(again[3].data(), bwd[3].data(), bwd[3].nbytes()), 0);
          }
        }
}

// fused_attention between generated kernels in a compiled graph, with the freed buffers
// poisoned: a library launch reads its operands and writes each result where the plan says.
TEST(AttentionExecutable, CompiledGraphMatchesTheReference) {
  for (DType dt : {DType::f32, DType::f64}) {
    Problem p;
    p.c.b = 2;
    p.c.h = 2;
    p.c.tq = p.c.tk = 33;
    p.c.causal = true;
    p.c.mask = MaskKind::KeyPadding;
    p.c.pDrop = 0.2;
    p.c.dtype = dt;
    build(p);
    SCOPED_TRACE(describe(p.c));
    // q arrives through a generated kernel, and the gradients leave through one.
    Graph& g = p.g;
    Value* q = g.findValue("q");
    Node* q2 = g.add(OpKind::Mul, {q, q}, {}, {"q2"});
    g.moveBefore(q2, p.fwd);
    p.fwd->setOperand(0, q2->result());
    p.bwd->setOperand(0, q2->result());
    Node* dq2 = g.add(OpKind::Add, {p.bwd->result(0), p.bwd->result(0)}, {}, {"dq2"});
    g.setOutput(2, dq2->result());
    runtime::ExecOptions opts = testing::testExecOptions();
    opts.poisonFreed = true;
    opts.numThreads = 2;
    auto exe = runtime::Executable::compile(g, opts);
    EXPECT_EQ(exe->stats().libraryCalls, 2);
    const auto names = exe->launchNames();
    EXPECT_NE(std::find(names.begin(), names.end(), "lib:out"), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "lib:dq"), names.end());
    std::vector<Tensor> got = exe->run(p.in);
    std::vector<Tensor> again = exe->run(p.in);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].bitwiseEqual(again[i])) << i;

    // The same values by hand: q squared, the kernels, dq doubled.
    Tensor qsq = p.in.at("q");
    for (int64_t i = 0; i < qsq.numel(); ++i) qsq.setF(i, qsq.getF(i) * qsq.getF(i));
    p.in.at("q") = qsq;
    const Reference r = reference(p, got[0]);
    std::vector<double> dq2want = r.dq;
    for (double& x : dq2want) x *= 2;
    const double tol = tolerance(dt);
    EXPECT_TRUE(near("out", got[0], r.out, tol));
    EXPECT_TRUE(near("lse", got[1], r.lse, tol));
    EXPECT_TRUE(near("dq2", got[2], dq2want, tol));
    EXPECT_TRUE(near("dk", got[3], r.dk, tol));
    EXPECT_TRUE(near("dv", got[4], r.dv, tol));
  }
}

TEST(AttentionExecutable, CompiledGraphMatchesTheInterpreter) {
  Problem p;
  p.c.b = 2;
  p.c.h = 3;
  p.c.tq = p.c.tk = 40;
  p.c.mask = MaskKind::Full;
  p.c.pDrop = 0.3;
  build(p);
  const std::vector<Tensor> want = interpret(p.g, p.in);
  runtime::ExecOptions opts = testing::testExecOptions();
  opts.poisonFreed = true;
  opts.numThreads = 2;
  std::vector<Tensor> got = runtime::Executable::compile(p.g, opts)->run(p.in);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(near(p.g.outputs()[i]->name().c_str(), got[i], want[i].toDoubles(), 2e-5));
}


// ---- the cut at a key-padding mask's last allowed key --------------------------------------

// A key-padding mask [B, 1, 1, Tk] lets the kernels stop at each item's last allowed key; the
// same mask stored once per query ([B, 1, Tq, Tk]) does not. Both must give the same values
// (the keys cut off add exact zeros): at l = 70 lengths across both key blocks, at l = 40
// (one key block: the forward's exact softmax) lengths inside it; 1, 0 and all keys, head
// dims read in place (64) and through padded copies (40), causal, dropout, both ISAs.
template <class T>
void checkKeyPaddingCut(int64_t l, int64_t d, bool causal, double pDrop) {
  const std::vector<int64_t> lengths = l > 64 ? std::vector<int64_t>{l, 36, 1, 0, 65, 17}
                                               : std::vector<int64_t>{l, 36, 1, 0, 33, 17};
  const int64_t items = static_cast<int64_t>(lengths.size()), heads = 2;
  const int64_t batch = items * heads, n = batch * l * d;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(-1, 1);
  auto fill = [&](int64_t size) {
    std::vector<T> x(static_cast<size_t>(size));
    for (T& e : x) e = static_cast<T>(u(rng));
    return x;
  };
  const std::vector<T> q = fill(n), k = fill(n), v = fill(n), dout = fill(n);
  std::vector<uint8_t> keyMask, queryMask;
  for (int64_t b = 0; b < items; ++b)
    for (int64_t i = 0; i < l; ++i)
      for (int64_t j = 0; j < l; ++j) {
        const uint8_t a = j < lengths[static_cast<size_t>(b)] ? 1 : 0;
        if (i == 0) keyMask.push_back(a);
        queryMask.push_back(a);
      }
  codegen::AttentionParams p;
  p.dtype = std::is_same_v<T, float> ? DType::f32 : DType::f64;
  p.batch = batch;
  p.tq = p.tk = l;
  p.d = p.dv = d;
  p.scale = 0.125;
  p.causal = causal;
  p.hasMask = true;
  p.maskStrideJ = 1;
  p.pDrop = pDrop;
  p.seed = 5;
  p.offset = 9;
  ThreadPool pool(2);
  auto run = [&](bool perQuery) {
    codegen::AttentionParams pp = p;
    pp.maskStrideI = perQuery ? l : 0;
    for (int64_t bh = 0; bh < batch; ++bh) pp.maskBase.push_back(bh / heads * (perQuery ? l : 1) * l);
    const uint8_t* m = perQuery ? queryMask.data() : keyMask.data();
    const T nan = std::numeric_limits<T>::quiet_NaN();
    std::vector<T> out(static_cast<size_t>(n), nan), lse(static_cast<size_t>(batch * l), nan);
    std::vector<T> dq(out), dk(out), dv(out);
    codegen::attentionForward(pp, q.data(), k.data(), v.data(), m, out.data(), lse.data(), pool);
    codegen::attentionBackward(pp, q.data(), k.data(), v.data(), out.data(), lse.data(),
                               dout.data(), m, dq.data(), dk.data(), dv.data(), pool);
    return std::vector<std::vector<T>>{out, lse, dq, dk, dv};
  };
  const auto cut = run(false), whole = run(true);
  const char* names[] = {"out", "lse", "dq", "dk", "dv"};
  for (size_t r = 0; r < cut.size(); ++r)
    for (size_t i = 0; i < cut[r].size(); ++i) {
      const T a = cut[r][i], b = whole[r][i];
      ASSERT_TRUE(a == b || (std::isnan(a) && std::isnan(b)))
          << names[r] << " element " << i << ": " << a << " vs " << b;
    }
  // The keys past an item's length get no gradient.
  for (int64_t bh = 0; bh < batch; ++bh)
    for (int64_t j = lengths[static_cast<size_t>(bh / heads)]; j < l; ++j)
      for (int64_t c = 0; c < d; ++c) {
        ASSERT_EQ(cut[3][static_cast<size_t>((bh * l + j) * d + c)], T(0));
        ASSERT_EQ(cut[4][static_cast<size_t>((bh * l + j) * d + c)], T(0));
      }
}

TEST(AttentionKernel, KeyPaddingCutMatchesTheSameMaskPerQuery) {
  const AttentionIsa saved = codegen::attentionIsa();
  std::vector<AttentionIsa> isas{AttentionIsa::Portable};
  if (codegen::attentionHasAvx2()) isas.push_back(AttentionIsa::Avx2);
  for (AttentionIsa isa : isas) {
    codegen::setAttentionIsa(isa);
    for (int64_t l : {70, 40})
      for (int64_t d : {64, 40})
        for (bool causal : {false, true})
          for (double pDrop : {0.0, 0.2}) {
            SCOPED_TRACE(::testing::Message()
                         << (isa == AttentionIsa::Avx2 ? "avx2" : "portable") << " l " << l
                         << " d " << d << (causal ? " causal" : "") << " p_drop " << pDrop);
            checkKeyPaddingCut<float>(l, d, causal, pDrop);
            if (d == 64 && pDrop == 0) checkKeyPaddingCut<double>(l, d, causal, pDrop);
          }
  }
  codegen::setAttentionIsa(saved);
}

}  // namespace
}  // namespace tgc
