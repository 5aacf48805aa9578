// Lowering of the model language to Graph IR: what each construct produces.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "ir/verifier.h"
#include "tests/frontend/fe_test_util.h"

namespace tgc {
namespace {

using testing::compileText;
using testing::contains;
using testing::countOps;
using testing::errorsOf;
using testing::findNode;

const char* kLinear = R"(
config {
  d_in = 4
  d_out = 3
  dtype = f32
}
dim B = 2
module Linear(d_in: int, d_out: int, use_bias: bool = true) {
  param weight: dtype[d_in, d_out] = xavier_uniform
  if use_bias {
    param bias: dtype[d_out] = zeros
  }
  fn forward(x) {
    let y = x @ weight
    if use_bias { y = y + bias }
    return y
  }
}
)";

TEST(LowerTest, ModuleParametersBecomeScopedParamInputsAfterTheDataInputs) {
  auto m = compileText(std::string(kLinear) + R"(
let proj = Linear(d_in, d_out)
graph g(x: dtype[B, d_in]) {
  output y = proj(x)
}
)");
  EXPECT_EQ(verifyGraph(*m.graph), std::vector<std::string>{});
  auto ins = m.graph->inputs();
  ASSERT_EQ(ins.size(), 3u);
  EXPECT_EQ(ins[0]->result()->name(), "x");
  EXPECT_EQ(ins[0]->attrString("role"), "data");
  EXPECT_EQ(ins[1]->result()->name(), "proj.weight");
  EXPECT_EQ(ins[1]->attrString("role"), "param");
  EXPECT_EQ(ins[1]->result()->type().str(), "f32[4,3]");
  EXPECT_EQ(ins[2]->result()->name(), "proj.bias");
  ASSERT_EQ(m.params.size(), 2u);
  EXPECT_EQ(m.params[0].name, "proj.weight");
  EXPECT_EQ(m.params[0].kind, "xavier_uniform");
  EXPECT_EQ(m.params[0].arg, 1.0);
  EXPECT_EQ(m.params[1].kind, "zeros");
  ASSERT_EQ(m.graph->outputs().size(), 1u);
  EXPECT_EQ(m.graph->outputs()[0]->name(), "y");
  EXPECT_EQ(m.graph->outputs()[0]->type().str(), "f32[2,3]");
  EXPECT_EQ(m.output_names, std::vector<std::string>{"y"});
  EXPECT_EQ(m.graph->dims(), (std::vector<std::pair<std::string, int64_t>>{{"B", 2}}));
  // Intermediate values carry provenance names.
  EXPECT_NE(findNode(*m.graph, "proj.y"), nullptr) << printGraph(*m.graph);
}

TEST(LowerTest, OnlyParametersAGraphUsesBecomeItsInputs) {
  auto m = compileText(std::string(kLinear) + R"(
let a = Linear(d_in, d_out, false)
let b = Linear(d_out, d_in)
graph first(x: dtype[B, d_in]) { output y = a(x) }
graph both(x: dtype[B, d_in]) { output y = b(a(x)) }
)", {.graph = "first"});
  EXPECT_EQ(m.params.size(), 1u);
  EXPECT_EQ(m.graph_names, (std::vector<std::string>{"first", "both"}));
  auto both = compileText(std::string(kLinear) + R"(
let a = Linear(d_in, d_out, false)
let b = Linear(d_out, d_in)
graph first(x: dtype[B, d_in]) { output y = a(x) }
graph both(x: dtype[B, d_in]) { output y = b(a(x)) }
)", {.graph = "both"});
  ASSERT_EQ(both.params.size(), 3u);
  EXPECT_EQ(both.params[0].name, "a.weight");
  EXPECT_EQ(both.params[1].name, "b.weight");
  EXPECT_EQ(both.params[2].name, "b.bias");
}

TEST(LowerTest, RepeatedLayersHaveDistinctParameters) {
  auto m = compileText(std::string(kLinear) + R"(
module Stack(n: int, d: int) {
  let layers = [Linear(d, d) for i in 0..n]
  fn forward(x) {
    for i in 0..n { x = layers[i](x) }
    return x
  }
}
let encoder = Stack(3, d_in)
graph g(x: dtype[B, d_in]) { output y = encoder(x) }
)");
  std::vector<std::string> names;
  for (const auto& p : m.params) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"encoder.layers.0.weight", "encoder.layers.0.bias",
                                             "encoder.layers.1.weight", "encoder.layers.1.bias",
                                             "encoder.layers.2.weight", "encoder.layers.2.bias"}));
  EXPECT_EQ(countOps(*m.graph, OpKind::MatMul), 3u);
}

TEST(LowerTest, ASharedInstanceSharesItsParameters) {
  auto m = compileText(std::string(kLinear) + R"(
let sq = Linear(d_in, d_in)
graph g(x: dtype[B, d_in]) { output y = sq(sq(x)) }
)");
  EXPECT_EQ(m.params.size(), 2u);
  EXPECT_EQ(countOps(*m.graph, OpKind::MatMul), 2u);
}

TEST(LowerTest, ConfigDefaultsPresetsAndOverrides) {
  const char* src = R"(
config {
  d_model = 64
  heads = 4
  d_k = d_model / heads     // derived: follows overrides of d_model
  scale: float = 1
  name = "relu"
  on = true
}
preset big { d_model = 128, heads = 8 }
dim B = 1
graph g(x: f32[B, d_k]) { output y = x * scale }
)";
  auto m = compileText(src);
  EXPECT_EQ(m.graph->inputs()[0]->result()->type().str(), "f32[1,16]");
  std::map<std::string, std::string> cfg;
  for (const auto& [k, v] : m.config) cfg[k] = configValueToString(v);
  EXPECT_EQ(cfg["d_k"], "16");
  EXPECT_EQ(cfg["scale"], "1");
  EXPECT_TRUE(std::holds_alternative<double>(m.config[3].second));  // an int given to a float
  EXPECT_EQ(cfg["name"], "relu");
  EXPECT_EQ(cfg["on"], "true");

  auto big = compileText(src, {.preset = "big"});
  EXPECT_EQ(big.graph->inputs()[0]->result()->type().str(), "f32[1,16]");
  auto over = compileText(src, {.preset = "big", .sets = {{"d_model", "384"}, {"name", "gelu"}}});
  EXPECT_EQ(over.graph->inputs()[0]->result()->type().str(), "f32[1,48]");
  std::map<std::string, std::string> c2;
  for (const auto& [k, v] : over.config) c2[k] = configValueToString(v);
  EXPECT_EQ(c2["heads"], "8");
  EXPECT_EQ(c2["name"], "gelu");
}

TEST(LowerTest, NamedDimsBindFromDefaultsAndTheCommandLine) {
  const char* src = R"(
dim B = 2, S
graph g(x: f32[B, S]) { output y = x }
)";
  auto m = compileText(src, {.dims = {{"S", 7}, {"B", 3}}});
  EXPECT_EQ(m.graph->inputs()[0]->result()->type().str(), "f32[3,7]");
  EXPECT_EQ(m.graph->dims(), (std::vector<std::pair<std::string, int64_t>>{{"B", 3}, {"S", 7}}));
  std::string e = errorsOf(src);
  EXPECT_TRUE(contains(e, "test.tg:3:19: error: dim 'S' has no size: pass --dim S=N")) << e;
  // A graph records the dims it depends on, directly or through top-level code.
  const char* two = R"(
dim B = 2, S = 3, T = 4
let BT = B * T
graph a(x: f32[S]) { output y = x }
graph b(x: f32[BT]) { output y = x }
)";
  EXPECT_EQ(compileText(two, {.graph = "a"}).graph->dims(),
            (std::vector<std::pair<std::string, int64_t>>{{"B", 2}, {"S", 3}, {"T", 4}}));
  const char* lazy = R"(
dim B = 2, S = 3, T = 4
fn f(x) { return reshape(x, [B, S]) }
graph a(x: f32[S]) { output y = x }
graph b(x: f32[6]) { output y = f(x) }
)";
  EXPECT_EQ(compileText(lazy, {.graph = "a"}).graph->dims(),
            (std::vector<std::pair<std::string, int64_t>>{{"S", 3}}));
  EXPECT_EQ(compileText(lazy, {.graph = "b"}).graph->dims(),
            (std::vector<std::pair<std::string, int64_t>>{{"B", 2}, {"S", 3}}));
}

TEST(LowerTest, LiteralsTakeTheDtypeOfTheOtherOperand) {
  const char* src = R"(
config { dtype = f32 }
dim B = 2
graph g(x: dtype[B, 3], ids: i64[B]) {
  output y = x * 0.125 + 1
  output z = ids * 2 - 1
  output m = ids != 0
  output w = where(reshape(ids > 0, [B, 1]), x, -inf)
}
)";
  for (DType dt : {DType::f32, DType::f64}) {
    auto m = compileText(src, {.sets = {{"dtype", std::string(dtypeName(dt))}}});
    size_t floats = 0, ints = 0;
    for (const auto& n : m.graph->nodes()) {
      if (n->op() != OpKind::Constant) continue;
      DType c = n->result()->type().dtype;
      EXPECT_TRUE(c == dt || c == DType::i64) << printNode(*n);
      floats += c == dt;
      ints += c == DType::i64;
    }
    EXPECT_EQ(floats, 3u);  // 0.125, 1, -inf
    EXPECT_EQ(ints, 4u);    // 2, 1, 0, 0
    EXPECT_EQ(m.graph->outputs()[0]->type(), (TensorType{dt, {2, 3}}));
    EXPECT_EQ(m.graph->outputs()[1]->type().str(), "i64[2]");
    EXPECT_EQ(m.graph->outputs()[2]->type().str(), "bool[2]");
    EXPECT_EQ(m.graph->outputs()[3]->type(), (TensorType{dt, {2, 3}}));
  }
  std::string e = errorsOf(R"(
graph g(ids: i64[2]) { output y = ids * 0.5 }
)");
  EXPECT_TRUE(contains(e, "the number 0.5 cannot be an operand of type i64")) << e;
}

TEST(LowerTest, ConfigArithmeticIsFoldedAtCompileTime) {
  auto m = compileText(R"(
config { d_model = 512, heads = 8 }
let d_k = d_model / heads
let scale = 1.0 / sqrt(d_k)
let odd = 7 / 2
let p = 2 ** 10
let m = -7 % 3
graph g(x: f32[d_k]) {
  assert(d_k == 64 and scale == 0.125 and odd == 3.5 and p == 1024 and m == 2)
  assert(max(1, 5, 3) == 5 and min([4, 2]) == 2 and floor(2.7) == 2 and ceil(2.1) == 3)
  assert(int(3.9) == 3 and float(2) == 2.0 and str(42) + "!" == "42!" and len([1, 2]) == 2)
  assert(maximum(2, 3) == 3 and exp(0.0) == 1.0 and abs(-4) == 4)
  output y = x * scale
}
)");
  EXPECT_EQ(countOps(*m.graph, OpKind::Sqrt), 0u);
  EXPECT_EQ(countOps(*m.graph, OpKind::Constant), 1u);
  EXPECT_EQ(m.graph->inputs()[0]->result()->type().str(), "f32[64]");
}

TEST(LowerTest, CompileTimeIfSelectsTheCode) {
  const char* src = R"(
config { act = "relu", use_bias = false }
graph g(x: f32[4]) {
  let y = x
  if act == "relu" {
    y = relu(y)
  } else if act == "gelu" {
    y = gelu(y)
  } else {
    error("unknown activation " + act)
  }
  if use_bias { y = y + 1.0 }
  output y = y
}
)";
  auto relu = compileText(src);
  EXPECT_EQ(countOps(*relu.graph, OpKind::Relu), 1u);
  EXPECT_EQ(countOps(*relu.graph, OpKind::Gelu), 0u);
  EXPECT_EQ(countOps(*relu.graph, OpKind::Add), 0u);
  auto gelu = compileText(src, {.sets = {{"act", "gelu"}, {"use_bias", "true"}}});
  EXPECT_EQ(countOps(*gelu.graph, OpKind::Gelu), 1u);
  EXPECT_EQ(countOps(*gelu.graph, OpKind::Add), 1u);
  std::string e = errorsOf(src, {.sets = {{"act", "swish"}}});
  EXPECT_TRUE(contains(e, "test.tg:10:5: error: unknown activation swish")) << e;
}

TEST(LowerTest, OpsTakeKeywordAndPositionalAttributesFromTheOpTable) {
  auto m = compileText(R"(
graph g(x: f32[2, 3, 4], ids: i64[5]) {
  let a = softmax(x, axis=1)
  let b = softmax(x, 1)
  let c = reduce_sum(x, axes=[0, 2], keepdims=true)
  let d = reduce_mean(x, -1)
  let e = transpose(x, [2, 0, 1])
  let f = reshape(x, [6, -1])
  let h = slice(x, axis=2, start=-2, end=4)
  let i = concat([x, x], axis=0)
  let j = concat(x, x, x, axis=1)
  let k = cast(ids, f32)
  let l = gelu(x, approximate="tanh")
  let m = iota(i64[3, 4], axis=1)
  let n = layer_norm(x, ones(f32[4]), zeros(f32[4]), eps=1e-6)
  let o = gather(ones(f32[10, 4]), ids)
  output a = a
  output b = b
  output c = c
  output d = d
  output e = e
  output f = f
  output h = h
  output i = i
  output j = j
  output k = k
  output l = l
  output m = m
  output n = n
  output o = o
}
)");
  const auto& o = m.graph->outputs();
  ASSERT_EQ(o.size(), 14u);
  EXPECT_EQ(o[0]->def()->attrInt("axis"), 1);
  EXPECT_EQ(o[1]->def()->attrInt("axis"), 1);
  EXPECT_EQ(o[2]->type().str(), "f32[1,3,1]");
  EXPECT_EQ(o[3]->type().str(), "f32[2,3]");
  EXPECT_EQ(o[4]->type().str(), "f32[4,2,3]");
  EXPECT_EQ(o[5]->type().str(), "f32[6,4]");
  EXPECT_EQ(o[6]->type().str(), "f32[2,3,2]");
  EXPECT_EQ(o[7]->type().str(), "f32[4,3,4]");
  EXPECT_EQ(o[8]->type().str(), "f32[2,9,4]");
  EXPECT_EQ(o[9]->type().str(), "f32[5]");
  EXPECT_EQ(o[10]->def()->attrString("approximate"), "tanh");
  EXPECT_EQ(o[11]->type().str(), "i64[3,4]");
  EXPECT_DOUBLE_EQ(o[12]->def()->attrFloat("eps"), 1e-6);
  EXPECT_EQ(o[13]->type().str(), "f32[5,4]");
}

TEST(LowerTest, FunctionsTakeDefaultsKeywordsAndAnnotations) {
  auto m = compileText(R"(
fn scale(x, by: float = 2, shift: float = 0) { return x * by + shift }
fn pair(x) { return x, -x }
graph g(x: f32[3]) {
  let a, b = pair(scale(x, shift=1))
  output a = a
  output b = b
}
)");
  EXPECT_EQ(m.graph->outputs().size(), 2u);
  EXPECT_EQ(countOps(*m.graph, OpKind::Neg), 1u);
  std::string e = errorsOf(R"(
fn f(x: f32[3], n: int) { return x }
graph g(x: f32[4]) { output y = f(x, 2) }
)");
  EXPECT_TRUE(contains(e, "test.tg:3:35: error: argument 'x' of 'f' must be f32[3], got a tensor f32[4]")) << e;
  e = errorsOf(R"(
fn f(x, n: int) { return x }
graph g(x: f32[4]) { output y = f(x, 2.5) }
)");
  EXPECT_TRUE(contains(e, "argument 'n' of 'f' must be an int, got a float")) << e;
}

TEST(LowerTest, DropoutIsKeyedBySeedAndStepAndOnlyInTrainingGraphs) {
  const char* src = R"(
fn block(x) { return dropout(x, 0.1) }
graph train(x: f32[2, 8]) training {
  let a = block(x)
  let b = block(a)
  output loss = reduce_sum(b, axes=[0, 1])
}
graph infer(x: f32[2, 8]) {
  output y = block(block(x))
}
)";
  auto t = compileText(src);
  EXPECT_TRUE(t.training);
  EXPECT_EQ(t.loss_output, 0);
  ASSERT_NE(t.graph->findValue("seed"), nullptr);
  ASSERT_NE(t.graph->findValue("step"), nullptr);
  EXPECT_EQ(t.graph->findValue("seed")->type().str(), "i64[]");
  EXPECT_EQ(countOps(*t.graph, OpKind::PhiloxUniform), 2u);
  // The counter stride per step covers both sites; the sites start at 0 and 16.
  const Node* stride = findNode(*t.graph, "dropout.elements_per_step");
  ASSERT_NE(stride, nullptr);
  EXPECT_EQ(stride->attrFloats("value"), std::vector<double>{32.0});
  std::vector<double> starts;
  for (const auto& n : t.graph->nodes())
    if (n->op() == OpKind::Constant && n->result()->name().find("dropout.start") != std::string::npos)
      starts.push_back(n->attrFloats("value")[0]);
  EXPECT_EQ(starts, (std::vector<double>{0.0, 16.0}));
  auto i = compileText(src, {.graph = "infer"});
  EXPECT_FALSE(i.training);
  EXPECT_EQ(countOps(*i.graph, OpKind::PhiloxUniform), 0u);
  EXPECT_EQ(i.graph->findValue("seed"), nullptr);
  EXPECT_EQ(i.graph->size(), 1u);  // the input, returned as it is
}

TEST(LowerTest, GraphSelection) {
  const char* src = R"(
graph first(x: f32[1]) { output y = x }
graph train(x: f32[1]) training { output loss = reduce_sum(x, axes=[0]) }
)";
  EXPECT_EQ(compileText(src).graph->name(), "train");
  EXPECT_EQ(compileText(src, {.graph = "first"}).graph->name(), "first");
  EXPECT_EQ(compileText("graph a(x: f32[1]) { output y = x }\ngraph b(x: f32[1]) { output y = x }")
                .graph->name(), "a");
  std::string e = errorsOf(src, {.graph = "frist"});
  EXPECT_TRUE(contains(e, "test.tg: error: no graph named 'frist' (did you mean 'first'?) (graphs: first, train)")) << e;
}

TEST(LowerTest, ImportsResolveRelativeToTheFileThenTheLibraryPath) {
  auto opts = testing::memoryFiles({
      {"models/main.tg", "import \"sub/helpers.tg\"\nimport \"lib.tg\"\n"
                         "graph g(x: f32[2]) { output y = double(triple(x)) }\n"},
      {"models/sub/helpers.tg", "import \"../common.tg\"\nfn double(x) { return twice(x) }\n"},
      {"models/common.tg", "fn twice(x) { return x + x }\n"},
      {"libdir/lib.tg", "import \"common.tg\"\nfn triple(x) { return x * 3 }\n"},
      {"libdir/common.tg", "fn unused() { return 0 }\n"},
  });
  opts.lib_paths = {"libdir"};
  auto m = compileModelFile("models/main.tg", opts);
  EXPECT_EQ(countOps(*m.graph, OpKind::Add), 1u);
  EXPECT_EQ(countOps(*m.graph, OpKind::Mul), 1u);
}

TEST(LowerTest, InstancesInsideModulesAreNamedAfterTheirBinding) {
  auto m = compileText(std::string(kLinear) + R"(
module Block(d: int) {
  let inner = Linear(d, d, false)
  let extra = [Linear(d, d, false), Linear(d, d, false)]
  fn forward(x) { return extra[1](extra[0](inner(x))) }
}
module Outer(d: int) {
  let blocks = [Block(d) for _ in 0..2]
  fn forward(x) { return blocks[1](blocks[0](x)) }
}
let net = Outer(d_in)
graph g(x: f32[B, d_in]) { output y = net(x) }
)");
  std::vector<std::string> names;
  for (const auto& p : m.params) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "net.blocks.0.inner.weight", "net.blocks.0.extra.0.weight",
                       "net.blocks.0.extra.1.weight", "net.blocks.1.inner.weight",
                       "net.blocks.1.extra.0.weight", "net.blocks.1.extra.1.weight"}));
}

TEST(LowerTest, ParameterInitializers) {
  auto m = compileText(R"(
module M() {
  param a: f32[3, 4] = xavier_uniform(2.0)
  param b: f32[3, 4] = xavier_normal
  param c: f32[4] = normal(0.02)
  param d: f32[4] = uniform(0.5)
  param e: f32[4] = ones
  param f: f32[4] = constant(0.25)
  param g: f32[4]
  param h: f32[2, 2]
  param i: f32[16, 4] = uniform
  fn forward(x) { return x @ a }
}
let m = M()
graph g(x: f32[4]) {
  output y = x + m.c + m.d + m.e + m.f + m.g + reduce_sum(m.a, [0]) + reduce_sum(m.b, [0]) +
             reduce_sum(m.h, [0, 1]) + reduce_sum(m.i, [0])
}
)");
  std::map<std::string, std::pair<std::string, double>> got;
  for (const auto& p : m.params) got[p.name] = {p.kind, p.arg};
  EXPECT_EQ(got["m.a"], std::make_pair(std::string("xavier_uniform"), 2.0));
  EXPECT_EQ(got["m.b"], std::make_pair(std::string("xavier_normal"), 1.0));
  EXPECT_EQ(got["m.c"], std::make_pair(std::string("normal"), 0.02));
  EXPECT_EQ(got["m.d"], std::make_pair(std::string("uniform"), 0.5));
  EXPECT_EQ(got["m.e"].first, "ones");
  EXPECT_EQ(got["m.f"], std::make_pair(std::string("constant"), 0.25));
  EXPECT_EQ(got["m.g"].first, "zeros");           // rank 1 without initializer
  EXPECT_EQ(got["m.h"].first, "xavier_uniform");  // rank 2 without initializer
  EXPECT_EQ(got["m.i"], std::make_pair(std::string("uniform"), 0.25));  // 1/sqrt(fan_in)
}

TEST(LowerTest, ParameterNamesAreKeptExactlyEvenWhenAValueHadTheName) {
  // forward binds a local `v` (IR name m.v) before the parameter m.v is first used; the
  // parameter keeps its checkpoint name and the intermediate value moves aside.
  auto m = compileText(R"(
module M() {
  param w: f32[2, 2]
  param v: f32[2, 2]
  fn forward(x) {
    let v = x + 1.0
    return v @ w
  }
  fn second(x) { return x @ v }
}
let m = M()
graph g(x: f32[2, 2]) { output y = m.second(m(x)) }
)");
  ASSERT_NE(m.graph->findValue("m.v"), nullptr);
  EXPECT_EQ(m.graph->findValue("m.v")->def()->op(), OpKind::Input);
  EXPECT_NE(m.graph->findValue("m.v.1"), nullptr);
}

TEST(LowerTest, ListsComprehensionsAndLoops) {
  auto m = compileText(R"(
let sizes = [2 * i + 1 for i in 0..3]
let total = 0
fn sum(xs) {
  let t = 0
  for x in xs { t = t + x }
  return t
}
graph g(x: f32[sum(sizes)]) {
  assert(sizes == sizes and len(sizes + [7]) == 4 and ([1] * 3)[2] == 1)
  output y = x
}
)");
  EXPECT_EQ(m.graph->inputs()[0]->result()->type().str(), "f32[9]");
}

TEST(LowerTest, TensorPropertiesAndTypes) {
  auto m = compileText(R"(
graph g(x: f32[2, 3, 5]) {
  assert(x.shape == [2, 3, 5] and x.rank == 3 and x.dtype == f32)
  let t = x.dtype[x.shape[-1], x.shape[0]]
  assert(t == f32[5, 2] and t.shape[0] == 5)
  let z = zeros(i64[x.shape])
  output z = z
  output f = full(f32[2], 3.5)
}
)");
  EXPECT_EQ(m.graph->outputs()[0]->type().str(), "i64[2,3,5]");
  EXPECT_EQ(m.graph->outputs()[1]->def()->attrFloats("value"), std::vector<double>{3.5});
}

TEST(LowerTest, MethodsAreValues) {
  // A module hands its own method to a child, which calls it; members hold methods weakly.
  auto m = compileText(R"(
module Parent() {
  param w: f32[2]
  fn scale(x) { return x * w }
  let child = Child(scale)
  let again = scale
  fn forward(x) { return again(child(x)) }
}
module Child(f) {
  fn forward(x) { return f(x) + 1.0 }
}
let p = Parent()
graph g(x: f32[2]) { output y = p(x) }
)");
  EXPECT_EQ(countOps(*m.graph, OpKind::Mul), 2u);
  EXPECT_EQ(m.params.size(), 1u);
  EXPECT_EQ(m.params[0].name, "p.w");
}

TEST(LowerTest, TrainingFlagIsVisibleInCode) {
  const char* src = R"(
fn maybe(x) {
  if training { return x * 2.0 }
  return x
}
graph train(x: f32[1]) training { output loss = reduce_sum(maybe(x), [0]) }
graph infer(x: f32[1]) { output y = maybe(x) }
)";
  EXPECT_EQ(countOps(*compileText(src).graph, OpKind::Mul), 1u);
  EXPECT_EQ(countOps(*compileText(src, {.graph = "infer"}).graph, OpKind::Mul), 0u);
}

}  // namespace
}  // namespace tgc

namespace tgc {
namespace {

// docs/language.md's complete example compiles as written, with its preset.
TEST(LowerTest, TheLanguageGuidesExampleCompiles) {
  std::ifstream in(std::string(TGC_SOURCE_DIR) + "/docs/language.md");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string doc = ss.str();
  size_t at = doc.find("## A complete example");
  ASSERT_NE(at, std::string::npos);
  size_t b = doc.find("```\n", at) + 4, e = doc.find("```", b);
  std::string example = doc.substr(b, e - b);
  auto m = compileText(example, {.preset = "big"});
  EXPECT_EQ(m.loss_output, 0);
  EXPECT_EQ(m.params.front().name, "blocks.0.ffn.linear1.weight");
  EXPECT_EQ(m.params.front().type.str(), "f32[256,1024]");
}

}  // namespace
}  // namespace tgc
