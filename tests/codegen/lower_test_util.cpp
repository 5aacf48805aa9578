#include "lower_test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "codegen/jit.h"
#include "codegen/llvm_emitter.h"
#include "ir/interpreter.h"
#include "lower_kir_eval.h"

namespace tgc::lower_test {

using codegen::kir::Kernel;

std::mt19937_64& rng() {
  static std::mt19937_64 r(20261129);
  return r;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double draw(DType t, Dist d, int64_t range, int64_t i, int64_t rowLen) {
  auto& r = rng();
  std::uniform_real_distribution<double> uf(-3, 3);
  std::uniform_int_distribution<int64_t> ui(-20, 20);
  if (t == DType::boolean) return static_cast<double>(r() & 1);
  if (!isFloat(t)) {
    switch (d) {
      case Dist::Positive: return static_cast<double>(std::uniform_int_distribution<int64_t>(1, 20)(r));
      case Dist::NonZero: {
        int64_t v = ui(r);
        return v == 0 || v % 5 == 0 ? -1 : static_cast<double>(v);
      }
      case Dist::Index: return static_cast<double>(std::uniform_int_distribution<int64_t>(0, range - 1)(r));
      default: return static_cast<double>(ui(r));
    }
  }
  switch (d) {
    case Dist::Positive: return std::uniform_real_distribution<double>(0.05, 4)(r);
    case Dist::Special: {
      static const double specials[] = {std::nan(""), kInf, -kInf, 0.0, -0.0, 3e9, -3e9, 1e20, -1e20, 2.5, -2.5};
      if (r() % 4 == 0) return specials[r() % std::size(specials)];
      return uf(r);
    }
    case Dist::Masked: {
      int64_t row = rowLen > 0 ? i / rowLen : 0;
      if (row % 5 == 3) return -kInf;  // a fully masked row
      if (r() % 3 == 0) return -kInf;
      return uf(r);
    }
    default: return uf(r);
  }
}

Tensor randomTensor(const TensorType& t, Dist d, int64_t range) {
  Tensor x(t);
  int64_t rowLen = t.shape.empty() ? 1 : t.shape.back();
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = draw(t.dtype, d, range, i, rowLen);
    if (isFloat(t.dtype)) x.setF(i, v);
    else x.setI(i, static_cast<int64_t>(v));
  }
  return x;
}

codegen::Jit& jit() {
  static codegen::Jit j = [] {
    codegen::JitOptions o = codegen::JitOptions::fromEnv();
    o.cacheDir = TGC_BINARY_DIR "/lower_tests_cache";
    return codegen::Jit(o);
  }();
  return j;
}

bool sameExact(double a, double b, bool zeroSign) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && (!zeroSign || std::signbit(a) == std::signbit(b));
}

}  // namespace

Value* Case::in(TensorType t, Dist d, int64_t indexRange) {
  std::string name = fmt::format("in{}", inputs.size());
  inputs[name] = randomTensor(t, d, indexRange);
  return graph->add(OpKind::Input, {}, {}, {name}, {t})->result();
}

Value* Case::op(OpKind k, std::vector<Value*> operands, AttrMap attrs,
                std::vector<TensorType> declared, const std::string& name) {
  std::string n = name.empty() ? fmt::format("grp.{}.{}", opName(k), graph->size()) : name;
  return graph->add(k, std::move(operands), std::move(attrs), {n}, std::move(declared))->result();
}

void expectClose(const Tensor& got, const Tensor& want, Tolerance tol, const std::string& label) {
  ASSERT_EQ(got.type(), want.type()) << label;
  bool exact = tol.rtol == 0 && tol.atol == 0;
  int bad = 0;
  for (int64_t i = 0; i < want.numel() && bad < 5; ++i) {
    bool ok;
    std::string g, w;
    if (!isFloat(want.dtype())) {
      ok = got.getI(i) == want.getI(i);
      g = fmt::format("{}", got.getI(i)), w = fmt::format("{}", want.getI(i));
    } else {
      double a = got.getF(i), b = want.getF(i);
      if (exact || std::isnan(a) || std::isnan(b) || std::isinf(a) || std::isinf(b))
        ok = exact ? sameExact(a, b, tol.zeroSign) : (std::isnan(a) == std::isnan(b) && (std::isnan(a) || a == b));
      else
        ok = std::fabs(a - b) <= tol.atol + tol.rtol * std::fabs(b);
      g = fmt::format("{}", a), w = fmt::format("{}", b);
    }
    if (!ok) {
      ++bad;
      ADD_FAILURE() << label << ": element " << i << " is " << g << ", interpreter says " << w;
    }
  }
}

codegen::LoweredKernel checkCase(Case& c) {
  static int counter = 0;
  Graph& g = *c.graph;
  std::vector<const Node*> group;
  for (const auto& n : g.nodes())
    if (n->op() != OpKind::Input) group.push_back(n.get());
  const Value* result = group.back()->result();
  g.addOutput(const_cast<Value*>(result));
  Tensor want = Interpreter().run(g, c.inputs).at(0);

  codegen::LoweredKernel lk = codegen::lowerGroup(group);
  Kernel& k = lk.kernel;
  EXPECT_EQ(lk.values.size(), k.buffers.size()) << c.label;
  // Buffers: the group's graph inputs, read, and its result, written.
  Tensor got(result->type());
  Tensor gotEval(result->type());
  std::memset(got.data(), 0xA5, got.nbytes());  // poison: every element must be written
  std::memset(gotEval.data(), 0xA5, gotEval.nbytes());
  std::vector<void*> bufs, bufsEval;
  for (size_t i = 0; i < lk.values.size(); ++i) {
    const Value* v = lk.values[i];
    EXPECT_EQ(k.buffers[i].dtype, v->type().dtype) << c.label;
    EXPECT_EQ(k.buffers[i].numel, v->type().numel()) << c.label;
    if (v == result) {
      EXPECT_NE(k.buffers[i].access, codegen::kir::Access::Read) << c.label;
      bufs.push_back(got.data());
      bufsEval.push_back(gotEval.data());
    } else {
      EXPECT_EQ(v->def()->op(), OpKind::Input) << c.label << ": buffer " << v->name()
                                                << " is not an input of the group";
      EXPECT_EQ(k.buffers[i].access, codegen::kir::Access::Read) << c.label;
      Tensor& t = c.inputs.at(v->name());
      bufs.push_back(t.data());
      bufsEval.push_back(t.data());
    }
  }

  test::evalKernel(k, bufsEval.data(), 0, k.parallelExtent);
  expectClose(gotEval, want, c.tol, c.label + " [kir evaluator]");

  std::string name = k.name;
  k.name = fmt::format("{}_{}", name, counter++);
  auto fns = codegen::compileKernels(jit(), {&k});
  k.name = name;
  int64_t n = k.parallelExtent;
  int64_t a = n / 3, b = (2 * n) / 3;  // three chunks, some empty when n < 3
  fns[0](bufs.data(), 0, a);
  fns[0](bufs.data(), a, b);
  fns[0](bufs.data(), b, n);
  expectClose(got, want, c.tol, c.label + " [compiled]");
  return lk;
}

}  // namespace tgc::lower_test
