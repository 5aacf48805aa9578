#include "runtime/matmul_gemm.h"

namespace tgc::runtime {

MatmulGemm matmulGemm(const Node& n) {
  const TensorType& at = n.operand(0)->type();
  const TensorType& bt = n.operand(1)->type();
  const TensorType& ot = n.result()->type();
  const bool ta = n.attrBool("transpose_a"), tb = n.attrBool("transpose_b");
  const int64_t aRows = at.shape[at.rank() - 2], aCols = at.shape.back();
  const int64_t bRows = bt.shape[bt.rank() - 2], bCols = bt.shape.back();
  const int64_t m = ot.shape[ot.rank() - 2], nn = ot.shape.back(), k = ta ? aRows : aCols;
  MatmulGemm d{.dtype = ot.dtype, .m = m, .n = nn, .k = k, .transA = ta, .transB = tb,
               .lda = aCols, .ldb = bCols, .ldc = nn, .batch = {}, .strideA = {},
               .strideB = {}, .strideC = {}};

  const size_t rank = static_cast<size_t>(ot.rank()) - 2;
  auto padded = [&](const Shape& s) {  // batch dims, left-padded with 1 to `rank`
    Shape b(s.begin(), s.end() - 2);
    b.insert(b.begin(), rank - b.size(), 1);
    return b;
  };
  const Shape aB = padded(at.shape), bB = padded(bt.shape);
  int64_t sa = aRows * aCols, sb = bRows * bCols, sc = m * nn;
  std::vector<int64_t> batch, strideA, strideB, strideC;  // innermost first while building
  for (size_t i = rank; i-- > 0;) {
    const int64_t count = ot.shape[i];
    if (count != 1) {
      const int64_t stA = aB[i] == 1 ? 0 : sa, stB = bB[i] == 1 ? 0 : sb;
      // Merge with the dim inside it when each operand steps through both as one.
      if (!batch.empty() && strideA.back() * batch.back() == stA &&
          strideB.back() * batch.back() == stB && strideC.back() * batch.back() == sc) {
        batch.back() *= count;
      } else {
        batch.push_back(count);
        strideA.push_back(stA);
        strideB.push_back(stB);
        strideC.push_back(sc);
      }
    }
    sa *= aB[i];
    sb *= bB[i];
    sc *= count;
  }
  // One B for a batch of A's stored back to back (activations times a weight): one product
  // with the batch folded into A's rows, so B is packed once instead of once per item.
  if (batch.size() == 1 && !ta && strideB[0] == 0 && strideA[0] == m * d.lda &&
      strideC[0] == m * nn) {
    d.m *= batch[0];
    batch.clear();
    strideA.clear();
    strideB.clear();
    strideC.clear();
  }
  d.batch.assign(batch.rbegin(), batch.rend());
  d.strideA.assign(strideA.rbegin(), strideA.rend());
  d.strideB.assign(strideB.rbegin(), strideB.rend());
  d.strideC.assign(strideC.rbegin(), strideC.rend());
  return d;
}

}  // namespace tgc::runtime
