// Groups of several nodes lowered to one kernel (values inside the group never reach
// memory), and the shape of the generated loop nests: names, parallel extents, vector
// loops, accumulators, errors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>

#include "codegen/lower.h"
#include "ir/op_table.h"
#include "lower_test_util.h"

namespace tgc::lower_test {
namespace {

namespace kir = codegen::kir;

TensorType ty(DType d, Shape s) { return TensorType{d, std::move(s)}; }
constexpr Tolerance kF32{1e-5, 1e-5};

// Every loop of the kernel, outermost first.
std::vector<const kir::Stmt*> loops(const kir::Kernel& k) {
  std::vector<const kir::Stmt*> out;
  std::function<void(const std::vector<kir::StmtP>&)> walk = [&](const auto& body) {
    for (const auto& s : body) {
      if (s->kind == kir::StmtKind::Loop) out.push_back(s.get());
      walk(s->body);
      walk(s->elseBody);
    }
  };
  walk(k.body);
  return out;
}

int countStores(const std::vector<kir::StmtP>& body) {
  int n = 0;
  for (const auto& s : body) n += (s->kind == kir::StmtKind::Store) + countStores(s->body) + countStores(s->elseBody);
  return n;
}

TEST(LowerGroup, ThreeElementwiseNodesBecomeOneKernel) {
  Case c;
  c.label = "exp(a * b) + c";
  Value* a = c.in(ty(DType::f32, {7, 33}));
  Value* b = c.in(ty(DType::f32, {33}));
  Value* cc = c.in(ty(DType::f32, {7, 1}));
  Value* t1 = c.op(OpKind::Mul, {a, b});
  Value* t2 = c.op(OpKind::Exp, {t1});
  c.op(OpKind::Add, {t2, cc}, {}, {}, "blk.0.out");
  c.tol = kF32;
  codegen::LoweredKernel lk = checkCase(c);
  // Three reads and one write: the products and exponentials stay in registers.
  EXPECT_EQ(lk.kernel.buffers.size(), 4u);
  EXPECT_EQ(countStores(lk.kernel.body), 1);
  EXPECT_EQ(lk.kernel.name, "blk_0_out");
}

TEST(LowerGroup, SixteenBitIntermediatesRoundAsInMemory) {
  Case c;
  c.label = "cast(a, bf16) * cast(b, bf16) -> f32";
  Value* a = c.in(ty(DType::f32, {9, 17}));
  Value* b = c.in(ty(DType::f32, {17}));
  Value* ha = c.op(OpKind::Cast, {a}, {{"dtype", DType::bf16}});
  Value* hb = c.op(OpKind::Cast, {b}, {{"dtype", DType::bf16}});
  Value* m = c.op(OpKind::Mul, {ha, hb});
  c.op(OpKind::Cast, {m}, {{"dtype", DType::f32}});
  c.tol = kExact;
  checkCase(c);
}

TEST(LowerGroup, DropoutWithPhiloxInsideTheGroup) {
  Case c;
  c.label = "where(philox < keep, x * scale, 0)";
  Value* x = c.in(ty(DType::f32, {3, 130}));
  Value* seed = c.in(ty(DType::i64, {}));
  Value* off = c.in(ty(DType::i64, {}));
  Value* keep = c.in(ty(DType::f32, {}), Dist::Positive);
  Value* zero = c.in(ty(DType::f32, {}));
  c.inputs.at("in3").setF(0, 0.9);
  c.inputs.at("in4").setF(0, 0.0);
  Value* r = c.op(OpKind::PhiloxUniform, {seed, off}, {}, {ty(DType::f32, {3, 130})});
  Value* mask = c.op(OpKind::Lt, {r, keep});
  Value* scaled = c.op(OpKind::Div, {x, keep});
  c.op(OpKind::Where, {mask, scaled, zero});
  c.tol = kExact;
  checkCase(c);
}

TEST(LowerGroup, ElementwiseProducerFeedsARowReduction) {
  Case c;
  c.label = "reduce_sum(x * x, -1)";
  Value* x = c.in(ty(DType::f32, {9, 130}));
  Value* sq = c.op(OpKind::Mul, {x, x});
  c.op(OpKind::ReduceSum, {sq}, {{"axes", std::vector<int64_t>{-1}}});
  c.tol = kF32;
  codegen::LoweredKernel lk = checkCase(c);
  EXPECT_EQ(lk.kernel.buffers.size(), 2u);
}

TEST(LowerGroup, BroadcastProducerFeedsALeadingReduction) {
  Case c;
  c.label = "reduce_mean(x - b, [0, 1], keepdims)";
  Value* x = c.in(ty(DType::f64, {3, 17, 33}));
  Value* b = c.in(ty(DType::f64, {17, 1}));
  Value* d = c.op(OpKind::Sub, {x, b});
  c.op(OpKind::ReduceMean, {d}, {{"axes", std::vector<int64_t>{0, 1}}, {"keepdims", true}});
  c.tol = {1e-12, 1e-12};
  checkCase(c);
}

TEST(LowerGroup, MaskedScaledScoresFeedASoftmax) {
  Case c;
  c.label = "softmax(where(mask, s * scale, neg_inf))";
  Value* s = c.in(ty(DType::f32, {2, 3, 9, 17}));
  Value* scale = c.in(ty(DType::f32, {}));
  Value* mask = c.in(ty(DType::boolean, {9, 17}));
  Value* ninf = c.in(ty(DType::f32, {}));
  c.inputs.at("in1").setF(0, 0.125);
  c.inputs.at("in3").setF(0, -std::numeric_limits<double>::infinity());
  for (int64_t j = 0; j < 17; ++j) c.inputs.at("in2").setI(4 * 17 + j, 0);  // a fully masked row
  Value* scaled = c.op(OpKind::Mul, {s, scale});
  Value* masked = c.op(OpKind::Where, {mask, scaled, ninf});
  c.op(OpKind::Softmax, {masked}, {}, {}, "enc.2.attn.softmax");
  c.tol = {1e-5, 1e-6};
  codegen::LoweredKernel lk = checkCase(c);
  EXPECT_EQ(lk.kernel.name, "enc_2_attn_softmax");
}

TEST(LowerGroup, ResidualFeedsALayerNorm) {
  Case c;
  c.label = "layer_norm(x + r)";
  Value* x = c.in(ty(DType::f32, {7, 33}));
  Value* r = c.in(ty(DType::f32, {7, 33}));
  Value* g = c.in(ty(DType::f32, {33}));
  Value* b = c.in(ty(DType::f32, {33}));
  Value* sum = c.op(OpKind::Add, {x, r});
  c.op(OpKind::LayerNorm, {sum, g, b});
  c.tol = {1e-5, 2e-5};
  checkCase(c);
}

TEST(LowerGroup, IndexRemappingProducers) {
  {
    Case c;
    c.label = "transpose(x) + y";
    Value* x = c.in(ty(DType::f32, {9, 17}));
    Value* y = c.in(ty(DType::f32, {17, 9}));
    Value* t = c.op(OpKind::Transpose, {x}, {{"perm", std::vector<int64_t>{1, 0}}});
    c.op(OpKind::Add, {t, y});
    checkCase(c);
  }
  {
    Case c;
    c.label = "gather(table, idx) * scale";
    Value* table = c.in(ty(DType::f32, {33, 7}));
    Value* idx = c.in(ty(DType::i32, {3, 9}), Dist::Index, 33);
    Value* s = c.in(ty(DType::f32, {}));
    Value* gth = c.op(OpKind::Gather, {table, idx});
    c.op(OpKind::Mul, {gth, s});
    checkCase(c);
  }
  {
    Case c;
    c.label = "concat(slice(x), exp(y)) and a transpose of an in-group value";
    Value* x = c.in(ty(DType::f32, {5, 17}));
    Value* y = c.in(ty(DType::f32, {5, 3}));
    Value* sl = c.op(OpKind::Slice, {x}, {{"axis", int64_t{1}}, {"start", int64_t{1}}, {"end", int64_t{16}}, {"step", int64_t{2}}});
    Value* e = c.op(OpKind::Exp, {y});
    Value* cat = c.op(OpKind::Concat, {sl, e}, {{"axis", int64_t{1}}});
    c.op(OpKind::Transpose, {cat}, {{"perm", std::vector<int64_t>{1, 0}}});
    c.tol = kF32;
    checkCase(c);
  }
}

TEST(LowerGroup, ProducersOfGatherAndScatterOperands) {
  {
    Case c;
    c.label = "gather(cast(table, f32), idx + 1)";
    Value* table = c.in(ty(DType::bf16, {9, 17}));
    Value* idx = c.in(ty(DType::i64, {3, 7}), Dist::Index, 8);
    Value* one = c.in(ty(DType::i64, {}));
    c.inputs.at("in2").setI(0, 1);
    Value* t32 = c.op(OpKind::Cast, {table}, {{"dtype", DType::f32}});
    Value* shifted = c.op(OpKind::Add, {idx, one});
    c.op(OpKind::Gather, {t32, shifted});
    checkCase(c);
  }
  {
    Case c;
    c.label = "scatter_add(idx, updates * scale)";
    Value* idx = c.in(ty(DType::i32, {3, 11}), Dist::Index, 5);
    Value* upd = c.in(ty(DType::f64, {3, 11, 4, 3}));
    Value* scale = c.in(ty(DType::f64, {3}));
    Value* scaled = c.op(OpKind::Mul, {upd, scale});
    c.op(OpKind::ScatterAdd, {idx, scaled}, {{"rows", int64_t{5}}});
    c.tol = {1e-12, 1e-12};
    checkCase(c);
  }
}

TEST(LowerKernelShape, ContiguousDimsCollapseAndTheInnerLoopVectorizes) {
  Case c;
  c.label = "a + b, same shape";
  Value* a = c.in(ty(DType::f32, {4, 6, 8}));
  Value* b = c.in(ty(DType::f32, {4, 6, 8}));
  c.op(OpKind::Add, {a, b});
  codegen::LoweredKernel lk = checkCase(c);
  auto ls = loops(lk.kernel);
  ASSERT_EQ(ls.size(), 1u);  // one loop over all 192 elements
  EXPECT_EQ(ls[0]->extent, 192);
  EXPECT_EQ(ls[0]->loop, kir::LoopKind::Vector);
}

TEST(LowerKernelShape, BiasGradientLoopsRowsOuterAndColumnsInnerInParallelBlocks) {
  Case c;
  c.label = "reduce_sum([512, 256], axis 0)";
  Value* x = c.in(ty(DType::f32, {512, 256}));
  c.op(OpKind::ReduceSum, {x}, {{"axes", std::vector<int64_t>{0}}});
  c.tol = {1e-5, 1e-4};
  codegen::LoweredKernel lk = checkCase(c);
  const kir::Kernel& k = lk.kernel;
  EXPECT_GE(k.parallelExtent, 4);  // column blocks, not rows
  auto ls = loops(k);
  // zero the block; rows (serial) around the columns (vector); nothing else
  ASSERT_EQ(ls.size(), 3u);
  EXPECT_EQ(ls[0]->loop, kir::LoopKind::Vector);
  EXPECT_EQ(ls[1]->extent, 512);
  EXPECT_EQ(ls[1]->loop, kir::LoopKind::Serial);
  EXPECT_EQ(ls[2]->loop, kir::LoopKind::Vector);
  EXPECT_EQ(ls[2]->extent * k.parallelExtent, 256);
}

TEST(LowerKernelShape, RowReductionsAndSoftmaxUseLocalAccumulatorsPerRow) {
  for (OpKind op : {OpKind::ReduceMax, OpKind::Softmax, OpKind::LayerNorm}) {
    Case c;
    c.label = std::string(opName(op));
    Value* x = c.in(ty(DType::f32, {256, 64}));
    if (op == OpKind::LayerNorm) {
      Value* g = c.in(ty(DType::f32, {64}));
      Value* b = c.in(ty(DType::f32, {64}));
      c.op(op, {x, g, b});
    } else {
      c.op(op, {x}, op == OpKind::ReduceMax ? AttrMap{{"axes", std::vector<int64_t>{1}}} : AttrMap{});
    }
    c.tol = {1e-5, 1e-5};
    codegen::LoweredKernel lk = checkCase(c);
    EXPECT_GE(lk.kernel.parallelExtent, 16) << c.label;  // blocks of rows
    for (const kir::Stmt* l : loops(lk.kernel))
      if (l->extent == 64) {
        EXPECT_EQ(l->loop, kir::LoopKind::Vector) << c.label;
      }
  }
}

TEST(LowerKernelShape, EmbeddingGradientNeverSharesRowsBetweenIterations) {
  Case c;
  c.label = "scatter_add rows 1000";
  Value* idx = c.in(ty(DType::i64, {64}), Dist::Index, 1000);
  Value* upd = c.in(ty(DType::f32, {64, 48}));
  for (int64_t j = 0; j < 64; j += 2) c.inputs.at("in0").setI(j, 7);  // many duplicates
  c.op(OpKind::ScatterAdd, {idx, upd}, {{"rows", int64_t{1000}}});
  c.tol = {1e-5, 1e-5};
  codegen::LoweredKernel lk = checkCase(c);
  EXPECT_GE(lk.kernel.parallelExtent, 16);
}

TEST(LowerErrors, NameTheOpAndTheValue) {
  auto expectError = [](Case& c, const std::string& what) {
    std::vector<const Node*> group;
    for (const auto& n : c.graph->nodes())
      if (n->op() != OpKind::Input) group.push_back(n.get());
    try {
      codegen::lowerGroup(group);
      ADD_FAILURE() << "no error for " << c.label;
    } catch (const IRError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  {
    Case c;
    c.label = "scatter_add bf16";
    Value* idx = c.in(ty(DType::i64, {4}), Dist::Index, 3);
    Value* upd = c.in(ty(DType::bf16, {4, 2}));
    c.op(OpKind::ScatterAdd, {idx, upd}, {{"rows", int64_t{3}}}, {}, "emb.grad");
    expectError(c, "scatter_add %emb.grad");
  }
  {
    Case c;
    c.label = "reduce_max over nothing";
    Value* x = c.in(ty(DType::f32, {3, 0}));
    c.op(OpKind::ReduceMax, {x}, {{"axes", std::vector<int64_t>{1}}}, {}, "m");
    expectError(c, "reduce_max %m");
  }
  {
    Case c;
    c.label = "a node that does not feed the last one";
    Value* x = c.in(ty(DType::f32, {3}));
    c.op(OpKind::Exp, {x}, {}, {}, "lost");
    c.op(OpKind::Neg, {x});
    expectError(c, "exp %lost");
  }
  {
    Case c;
    c.label = "matmul in a group";
    Value* a = c.in(ty(DType::f32, {3, 4}));
    Value* b = c.in(ty(DType::f32, {4, 5}));
    Value* m = c.op(OpKind::MatMul, {a, b}, {}, {}, "mm");
    c.op(OpKind::Relu, {m});
    expectError(c, "matmul %mm");
  }
}

TEST(LowerClassify, SourcesGemmsViewsAndKernels) {
  Graph g;
  Value* a = g.add(OpKind::Input, {}, {}, {"a"}, {ty(DType::f32, {2, 3})})->result();
  EXPECT_EQ(codegen::classify(*a->def()), codegen::NodeExecution::Source);
  Value* m = g.add(OpKind::MatMul, {a, a}, {{"transpose_b", true}}, {"m"})->result();
  EXPECT_EQ(codegen::classify(*m->def()), codegen::NodeExecution::Gemm);
  Value* r = g.add(OpKind::Reshape, {m}, {{"shape", std::vector<int64_t>{4}}}, {"r"})->result();
  EXPECT_EQ(codegen::classify(*r->def()), codegen::NodeExecution::View);
  Value* e = g.add(OpKind::Exp, {r}, {}, {"e"})->result();
  EXPECT_EQ(codegen::classify(*e->def()), codegen::NodeExecution::Kernel);
}

}  // namespace
}  // namespace tgc::lower_test
