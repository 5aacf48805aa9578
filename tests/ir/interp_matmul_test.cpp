// Interpreter: matmul against a naive triple loop written here, with transposes and batch
// broadcasting (size-1 batch dims, an operand with fewer batch dims).
#include <fmt/format.h>

#include <cstdint>

#include "tests/ir/interp_test_util.h"

namespace tgc {
namespace {

using namespace interp_test;

// Small integers, so every product and sum is exact in f32 and the comparison can be exact.
std::vector<double> values(int64_t n, int seed) {
  std::vector<double> v;
  uint32_t s = 2654435761u * static_cast<uint32_t>(seed + 1);
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1103515245u + 12345u;
    v.push_back(static_cast<double>((s >> 16) % 9) - 4);
  }
  return v;
}

struct Case {
  Shape a, b;
  bool ta = false, tb = false;
};

// The matmul written out independently: the batch index of the result picks each operand's
// batch by right-aligned numpy rules, then C[m][n] = sum_k A[m][k] B[k][n].
std::vector<double> naive(const Case& c, const std::vector<double>& a, const std::vector<double>& b,
                          Shape& outShape) {
  size_t ra = c.a.size(), rb = c.b.size();
  int64_t M = c.ta ? c.a[ra - 1] : c.a[ra - 2];
  int64_t K = c.ta ? c.a[ra - 2] : c.a[ra - 1];
  int64_t N = c.tb ? c.b[rb - 2] : c.b[rb - 1];
  size_t nb = std::max(ra, rb) - 2;
  Shape batch(nb);
  for (size_t i = 0; i < nb; ++i) {
    // Batch dim i counted from the right of the batch dims.
    size_t fromRight = nb - 1 - i;
    int64_t da = fromRight < ra - 2 ? c.a[ra - 3 - fromRight] : 1;
    int64_t db = fromRight < rb - 2 ? c.b[rb - 3 - fromRight] : 1;
    batch[i] = std::max(da, db);
  }
  outShape = batch;
  outShape.push_back(M);
  outShape.push_back(N);
  int64_t total = 1;
  for (int64_t d : batch) total *= d;
  std::vector<double> out;
  for (int64_t bi = 0; bi < total; ++bi) {
    // Decompose bi into batch coordinates, then to each operand's batch offset.
    std::vector<int64_t> idx(nb);
    int64_t rest = bi;
    for (size_t i = nb; i-- > 0;) {
      idx[i] = rest % batch[i];
      rest /= batch[i];
    }
    auto offset = [&](const Shape& s) {
      size_t r = s.size() - 2, lead = nb - r;
      int64_t off = 0;
      for (size_t i = 0; i < r; ++i) off = off * s[i] + (s[i] == 1 ? 0 : idx[lead + i]);
      return off * s[r] * s[r + 1];
    };
    int64_t ao = offset(c.a), bo = offset(c.b);
    int64_t aCols = c.a[ra - 1], bCols = c.b[rb - 1];
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) {
          double x = c.ta ? a[ao + k * aCols + m] : a[ao + m * aCols + k];
          double y = c.tb ? b[bo + n * bCols + k] : b[bo + k * bCols + n];
          s += x * y;
        }
        out.push_back(s);
      }
  }
  return out;
}

void checkCase(const Case& c, DType d = DType::f32) {
  SCOPED_TRACE(fmt::format("a {} b {} ta {} tb {} {}", shapeStr(c.a), shapeStr(c.b), c.ta, c.tb,
                           dtypeName(d)));
  auto av = values(numElements(c.a), 1), bv = values(numElements(c.b), 2);
  Shape outShape;
  std::vector<double> want = naive(c, av, bv, outShape);
  Tensor got = runOp(OpKind::MatMul, {T(d, c.a, av), T(d, c.b, bv)},
                     {{"transpose_a", c.ta}, {"transpose_b", c.tb}});
  expectExact(got, ty(d, outShape), want);
}

INTERP_OP_TEST(MatMul, HandComputed2x2) {
  // [[1,2],[3,4]] x [[5,6],[7,8]] = [[19,22],[43,50]]; with B transposed: [[17,23],[39,53]].
  Tensor a = T(DType::f32, {2, 2}, {1, 2, 3, 4});
  Tensor b = T(DType::f32, {2, 2}, {5, 6, 7, 8});
  expectExact(runOp(OpKind::MatMul, {a, b}), ty(DType::f32, {2, 2}), {19, 22, 43, 50});
  expectExact(runOp(OpKind::MatMul, {a, b}, {{"transpose_b", true}}), ty(DType::f32, {2, 2}),
              {17, 23, 39, 53});
  // A transposed: [[1,3],[2,4]] x B = [[26,30],[38,44]].
  expectExact(runOp(OpKind::MatMul, {a, b}, {{"transpose_a", true}}), ty(DType::f32, {2, 2}),
              {26, 30, 38, 44});
}

INTERP_OP_TEST(MatMul, TransposesOddSizes) {
  checkCase({{3, 5}, {5, 4}});
  checkCase({{5, 3}, {5, 4}, true, false});
  checkCase({{3, 5}, {4, 5}, false, true});
  checkCase({{5, 3}, {4, 5}, true, true});
  checkCase({{1, 1}, {1, 7}});
  checkCase({{7, 1}, {1, 1}});
}

INTERP_OP_TEST(MatMul, BatchAndBroadcastBatch) {
  checkCase({{2, 3, 4}, {2, 4, 5}});
  checkCase({{2, 1, 3, 4}, {3, 4, 5}});  // size-1 batch dim and fewer dims on b
  checkCase({{3, 4}, {2, 4, 5}});        // a has no batch dims
  checkCase({{2, 3, 4}, {4, 5}});        // b has no batch dims
  checkCase({{1, 3, 4, 2}, {2, 1, 5, 4}, true, true});
  checkCase({{2, 1, 4, 3}, {1, 3, 4, 5}, true, false});
}

INTERP_OP_TEST(MatMul, OtherDTypes) {
  checkCase({{2, 3, 4}, {4, 5}, false, false}, DType::f64);
  checkCase({{3, 4}, {2, 5, 4}, false, true}, DType::i32);
  checkCase({{2, 3}, {3, 2}}, DType::i64);
  // bf16: the sum 256 + 1 + 1 is formed in double and rounded once (258 is a bf16 value).
  expectExact(runOp(OpKind::MatMul,
                    {T(DType::bf16, {1, 3}, {256, 1, 1}), T(DType::bf16, {3, 1}, {1, 1, 1})}),
              ty(DType::bf16, {1, 1}), {258});
  // f32 too: 1 + 2^-24 + 2^-24 accumulated in double is 1 + 2^-23; in float it would stay 1.
  expectExact(runOp(OpKind::MatMul, {T(DType::f32, {1, 3}, {1, 0x1p-24, 0x1p-24}),
                                     T(DType::f32, {3, 1}, {1, 1, 1})}),
              ty(DType::f32, {1, 1}), {1 + 0x1p-23});
}

}  // namespace
}  // namespace tgc
