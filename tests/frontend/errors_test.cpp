// Diagnostics of the lowering: where they point, what they say, and that bad input never
// crashes or hangs the front end.
#include <gtest/gtest.h>

#include "tests/frontend/fe_test_util.h"

namespace tgc {
namespace {

using testing::contains;
using testing::countOf;
using testing::errorsOf;

struct Case {
  const char* name;
  const char* src;
  const char* expect;  // a substring of the diagnostics
};

TEST(ErrorsTest, Catalogue) {
  const Case cases[] = {
      {"unknown name", "graph g(x: f32[2]) { output y = relu(xx) }",
       "test.tg:1:38: error: unknown name 'xx' (did you mean 'x'?)"},
      {"unknown function", "graph g(x: f32[2]) { output y = sofmax(x) }",
       "unknown name 'sofmax' (did you mean 'softmax'?)"},
      {"assign undeclared", "fn f(x) { y = x }", "1:11: error: cannot assign to 'y': it is not defined"},
      {"shape mismatch", "graph g(a: f32[2, 3], b: f32[4, 5]) {\n  output y = a @ b\n}",
       "test.tg:2:16: error: matmul %matmul (f32[2,3], f32[4,5]): contraction dims differ"},
      {"broadcast mismatch", "graph g(a: f32[2, 3], b: f32[4]) { output y = a + b }",
       "add %add (f32[2,3], f32[4]): shapes [2,3] and [4] do not broadcast"},
      {"dtype mismatch", "graph g(a: f32[2], b: f64[2]) { output y = a * b }",
       "operands f32[2] and f64[2] have different dtypes"},
      {"unknown attribute", "graph g(x: f32[2]) { output y = softmax(x, axes=0) }",
       "softmax has no attribute 'axes' (did you mean 'axis'?) (attributes: axis)"},
      {"attribute kind", "graph g(x: f32[2]) { output y = softmax(x, axis=\"last\") }",
       "attribute 'axis' of softmax must be an int, got a str"},
      {"missing attribute", "graph g(x: f32[2]) { output y = reduce_sum(x) }",
       "reduce_sum needs the attribute 'axes'"},
      {"too many arguments", "graph g(x: f32[2]) { output y = relu(x, 1) }",
       "too many arguments to relu"},
      {"source op type", "graph g(x: f32[2]) { output y = x + iota(axis=0) }",
       "iota needs its result type as an argument"},
      {"tensor condition", "graph g(x: f32[2]) { if x > 0.0 { output y = x } }",
       "'if' needs a compile-time condition, but this is a tensor"},
      {"return in graph", "graph g(x: f32[2]) { return x }", "'return' is only allowed in a function"},
      {"param outside module", "fn f() { param w: f32[2] }", "'param' declarations belong in a module body"},
      {"output outside graph", "fn f(x) { output y = x }\ngraph g(x: f32[1]) { output y = f(x) }",
       "'output' is only allowed in a graph body"},
      {"module without forward", "module M() { }\nlet m = M()\ngraph g(x: f32[1]) { output y = m(x) }",
       "module 'M' has no 'forward' method"},
      {"unknown member", "module M() { param w: f32[1] }\nlet m = M()\ngraph g(x: f32[1]) { output y = x + m.ww }",
       "module 'M' has no member 'ww' (did you mean 'w'?)"},
      {"unnamed instance",
       "module M() { param w: f32[1]\n fn forward(x) { return x + w } }\ngraph g(x: f32[1]) { output y = M()(x) }",
       "parameter 'w' belongs to an instance of 'M' that has no name"},
      {"tensor op in module body", "module M(x) { let y = relu(x) }\ngraph g(x: f32[1]) { let m = M(x)\n output y = x }",
       "tensor operation 'relu' in a module body"},
      {"param type", "module M() { param w: int }\nlet m = M()", "a parameter's type must be a tensor type"},
      {"param dtype", "module M() { param w: i64[2] }\nlet m = M()", "their type must be a float type"},
      {"initializer", "module M() { param w: f32[2] = xavier_unifrom }\nlet m = M()",
       "unknown initializer 'xavier_unifrom' (did you mean 'xavier_uniform'?)"},
      {"missing argument", "fn f(a, b) { return a }\nlet x = f(1)", "missing argument 'b' in call to 'f'"},
      {"unknown keyword", "fn f(alpha) { return alpha }\nlet x = f(alpah=1)",
       "'f' has no parameter 'alpah' (did you mean 'alpha'?)"},
      {"too many args", "fn f(a) { return a }\nlet x = f(1, 2)", "'f' takes 1 argument, got 2"},
      {"not callable", "let a = 3\nlet b = a(1)", "an int cannot be called"},
      {"bad dimension", "graph g(x: f32[2, -1]) { output y = x }",
       "a dimension must be a non-negative integer, got -1"},
      {"fractional dimension", "config { d = 5 }\ngraph g(x: f32[d / 2]) { output y = x }",
       "a dimension must be a non-negative integer, got 2.5"},
      {"division by zero", "config { a = 1, b = 0 }\nlet c = a / b", "division by zero"},
      {"integer overflow", "let c = 9223372036854775807 + 1", "integer overflow in '+'"},
      {"list index", "let a = [1, 2]\nlet b = a[2]", "index 2 is out of range for a list of 2 elements"},
      {"tensor index", "graph g(x: f32[2]) { output y = x[0] }", "tensors cannot be indexed"},
      {"unpack", "fn f() { return 1, 2 }\nlet a, b, c = f()", "cannot unpack a list of 2 into 3 names"},
      {"no value", "fn f() { }\nlet a = f()", "this expression gives no value"},
      {"output kind", "graph g(x: f32[1]) { output y = 3 }", "an output must be a tensor, got an int"},
      {"loss scalar", "graph g(x: f32[2]) training { output loss = x }", "the loss must be a float scalar, got f32[2]"},
      {"training without loss", "graph g(x: f32[2]) training { output y = x }",
       "training graph 'g' needs an output named 'loss'"},
      {"no outputs", "graph g(x: f32[2]) { let y = x }", "graph 'g' has no outputs"},
      {"duplicate output", "graph g(x: f32[2]) { output y = x\n output y = x }", "output 'y' is defined twice"},
      {"graph input type", "graph g(x: int) { output y = x }", "graph input 'x' needs a tensor type"},
      {"graph input default", "graph g(x: f32[1] = 1) { output y = x }", "graph inputs cannot have default values"},
      {"redefinition", "fn f() { return 1 }\nfn f() { return 2 }", "test.tg:2:1: error: 'f' is already defined"},
      {"builtin name", "fn softmax(x) { return x }", "function 'softmax' has the name of a builtin"},
      {"config builtin", "config { dropout = 0.1 }", "config entry 'dropout' has the name of a builtin"},
      {"config kind", "config { n: int = 1.5 }", "config entry 'n' is an int but its default is a float"},
      {"preset key", "config { d = 1 }\npreset p { dd = 2 }",
       "preset 'p' sets 'dd', which is not a config entry (did you mean 'd'?)"},
      {"dim in config", "dim B = 2\nconfig { n = B * 2 }", "dim 'B' cannot be used here: config entries are evaluated before dims"},
      {"assert", "config { h = 3 }\nlet x = assert(12 % h == 1, \"not divisible\")", "assertion failed: not divisible"},
      {"dropout p", "graph g(x: f32[2]) training { output loss = reduce_sum(dropout(x, 1.5), [0]) }",
       "dropout probability must be in [0, 1), got 1.5"},
      {"for over int", "fn f() { for i in 3 { } }\nlet a = f()", "'for' iterates over a range a..b or a list"},
      {"and on ints", "let a = 1 and 2", "'and' needs two bools"},
      {"string minus", "let a = \"a\" - \"b\"", "operator '-' cannot be applied to a str and a str"},
      {"matmul numbers", "let a = 2 @ 3", "'@' multiplies matrices"},
      {"where literals", "graph g(c: bool[2]) { output y = where(c, 1.0, 0.0) }",
       "where needs a tensor in one of its branches"},
      {"input op", "graph g(x: f32[1]) { output y = input(f32[1]) }", "unknown name 'input'"},
      {"cannot assign member", "module M() { param w: f32[1]\n fn forward(x) { w = x\n return x } }\nlet m = M()\ngraph g(x: f32[1]) { output y = m(x) }",
       "cannot assign to 'w', a member of module 'M', inside a method"},
      {"training outside graph", "let t = training", "'training' is only known while a graph is lowered"},
      {"orphaned method",
       "module P() {\n fn f(x) { return x }\n let c = C(f) }\nmodule C(g) { fn forward(x) { return g(x) } }\n"
       "graph t(x: f32[1]) { let c = P().c\n output y = c(x) }",
       "method 'f' belongs to a module instance that no longer exists"},
      {"two parameters one name",
       "module L() { param w: f32[1]\n fn forward(x) { return x * w } }\n"
       "fn f(x) { let l = L()\n return l(x) }\ngraph g(x: f32[1]) { output y = f(f(x)) }",
       "two different parameters are both named 'f.l.w'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string e = errorsOf(c.src);
    EXPECT_TRUE(contains(e, c.expect)) << e;
    // Every diagnostic shows a source line and a caret, or names the file.
    EXPECT_TRUE(contains(e, "^") || contains(e, "test.tg: error:")) << e;
  }
}

TEST(ErrorsTest, ErrorsInsideCalledFunctionsShowTheCallChain) {
  std::string e = errorsOf(R"(fn inner(a, b) {
  return a @ b
}
fn outer(a, b) { return inner(a, b) }
graph g(a: f32[2, 3], b: f32[2, 3]) {
  output y = outer(a, b)
}
)");
  EXPECT_TRUE(contains(e, "test.tg:2:12: error: matmul %outer.inner.matmul (f32[2,3], f32[2,3])")) << e;
  EXPECT_TRUE(contains(e, "test.tg:4:25: note: in call to 'inner'")) << e;
  EXPECT_TRUE(contains(e, "test.tg:6:14: note: in call to 'outer'")) << e;
}

TEST(ErrorsTest, SeveralIndependentErrorsInOneRun) {
  std::string e = errorsOf(R"(
graph g(a: f32[2, 3], b: f32[4]) {
  let x = a + b
  let y = softmax(a, axis=7)
  let z = x * 2.0
  let w = reshape(a, [5])
  output o = a
}
)");
  EXPECT_TRUE(contains(e, "test.tg:3:13: error: add")) << e;
  EXPECT_TRUE(contains(e, "test.tg:4:11: error: softmax")) << e;
  EXPECT_TRUE(contains(e, "test.tg:6:11: error: reshape")) << e;
  // z uses the failed x: no cascade error.
  EXPECT_EQ(countOf(e, "error:"), 3u) << e;
}

TEST(ErrorsTest, StaticNameErrorsAreAllReportedEvenInCodeNoGraphReaches) {
  std::string e = errorsOf(R"(
fn unused(x) { return x * scael }
module M(d: int) {
  param w: f32[d]
  fn forward(x) { return x + ww }
}
graph g(x: f32[1]) { output y = x + zz }
)");
  EXPECT_TRUE(contains(e, "2:27: error: unknown name 'scael'")) << e;
  EXPECT_TRUE(contains(e, "5:30: error: unknown name 'ww' (did you mean 'w'?)")) << e;
  EXPECT_TRUE(contains(e, "7:37: error: unknown name 'zz'")) << e;
}

TEST(ErrorsTest, RepeatedErrorsInLoopsAreReportedOnce) {
  std::string e = errorsOf(R"(
fn layer(x) { return x @ x }
graph g(x: f32[2, 3]) {
  let y = x
  for i in 0..6 { y = layer(x) }
  output y = x
}
)");
  EXPECT_EQ(countOf(e, "error:"), 1u) << e;
}

TEST(ErrorsTest, CommandLineErrors) {
  const char* src = R"(
config { d_model = 4, name = "a", on = true, dtype = f32 }
preset small { d_model = 2 }
dim B = 2
graph g(x: f32[B, d_model]) { output y = x }
)";
  EXPECT_TRUE(contains(errorsOf(src, {.preset = "smal"}),
                       "test.tg: error: unknown preset 'smal' (did you mean 'small'?) (presets: small)"));
  EXPECT_TRUE(contains(errorsOf(src, {.sets = {{"d_modl", "3"}}}),
                       "--set d_modl: there is no config entry 'd_modl' (did you mean 'd_model'?)"));
  EXPECT_TRUE(contains(errorsOf(src, {.sets = {{"d_model", "abc"}}}), "--set d_model=abc: expected an int"));
  EXPECT_TRUE(contains(errorsOf(src, {.sets = {{"on", "maybe"}}}), "--set on=maybe: expected a bool"));
  EXPECT_TRUE(contains(errorsOf(src, {.sets = {{"dtype", "f33"}}}), "--set dtype=f33: expected a dtype"));
  EXPECT_TRUE(contains(errorsOf(src, {.dims = {{"Q", 2}}}), "--dim Q: the model declares no dim 'Q'"));
  EXPECT_TRUE(contains(errorsOf(src, {.dims = {{"B", 0}}}), "--dim B=0: a dim must be at least 1"));
  EXPECT_TRUE(contains(errorsOf("config { d = 1 }\npreset p { d = \"x\" }\ngraph g(x: f32[1]) { output y = x }",
                                {.preset = "p"}),
                       "test.tg:2:16: error: config entry 'd' is an int, but preset 'p' gives a str"));
}

TEST(ErrorsTest, ImportProblems) {
  auto cyc = testing::memoryFiles({
      {"a.tg", "import \"b.tg\"\ngraph g(x: f32[1]) { output y = x }\n"},
      {"b.tg", "import \"c.tg\"\n"},
      {"c.tg", "import \"a.tg\"\n"},
  });
  std::string e;
  try {
    compileModelFile("a.tg", cyc);
  } catch (const ParseError& err) {
    e = err.what();
  }
  EXPECT_TRUE(contains(e, "c.tg:1:1: error: import cycle: a.tg -> b.tg -> c.tg -> a.tg")) << e;

  auto missing = testing::memoryFiles({{"m.tg", "import \"nope.tg\"\n"}});
  try {
    compileModelFile("m.tg", missing);
    ADD_FAILURE();
  } catch (const ParseError& err) {
    EXPECT_TRUE(contains(err.what(), "m.tg:1:1: error: cannot find imported file 'nope.tg'")) << err.what();
  }
  auto self = testing::memoryFiles({{"s.tg", "import \"s.tg\"\n"}});
  try {
    compileModelFile("s.tg", self);
    ADD_FAILURE();
  } catch (const ParseError& err) {
    EXPECT_TRUE(contains(err.what(), "import cycle: s.tg -> s.tg")) << err.what();
  }
  // Errors in an imported file point into that file.
  auto bad = testing::memoryFiles({{"main.tg", "import \"lib.tg\"\n"}, {"lib.tg", "fn f( {"}});
  try {
    compileModelFile("main.tg", bad);
    ADD_FAILURE();
  } catch (const ParseError& err) {
    EXPECT_TRUE(contains(err.what(), "lib.tg:1:7: error: expected a parameter name")) << err.what();
  }
  try {
    compileModelFile("/nonexistent/model.tg");
    ADD_FAILURE();
  } catch (const ParseError& err) {
    EXPECT_TRUE(contains(err.what(), "/nonexistent/model.tg: error: cannot read the model file"));
  }
}

TEST(ErrorsTest, RunawayRecursionAndLoopsAreStopped) {
  std::string e = errorsOf("fn f(n) { return f(n + 1) }\nlet x = f(0)");
  EXPECT_TRUE(contains(e, "calls nest more than 100 deep: is 'f' recursive without end?")) << e;
  e = errorsOf("module M() { let m = M() }\nlet x = M()");
  EXPECT_TRUE(contains(e, "module instantiations nest more than 100 deep")) << e;
  e = errorsOf("fn f() { for i in 0..10000000 { for j in 0..10000000 { } } }\nlet x = f()");
  EXPECT_TRUE(contains(e, "evaluation limit exceeded")) << e;
  e = errorsOf("let x = [i for i in 0..100000000]");
  EXPECT_TRUE(contains(e, "a list cannot have more than 100000 elements")) << e;
  e = errorsOf("let big = [1] * 100000000");
  EXPECT_TRUE(contains(e, "cannot repeat a list")) << e;
  e = errorsOf("graph g(x: f32[100000000, 100000000, 100000]) { output y = x }");
  EXPECT_TRUE(contains(e, "tensor type has more than")) << e;
}

TEST(ErrorsTest, RecursionThatEndsIsFine) {
  auto m = testing::compileText(R"(
fn fact(n: int) {
  if n <= 1 { return 1 }
  return n * fact(n - 1)
}
graph g(x: f32[fact(4)]) { output y = x }
)");
  EXPECT_EQ(m.graph->inputs()[0]->result()->type().str(), "f32[24]");
}

}  // namespace
}  // namespace tgc
