#include <gtest/gtest.h>

#include <functional>

#include "frontend/parser.h"

namespace tgc::fe {
namespace {

struct Parsed {
  Diags diags;
  FileAst ast;
};

std::unique_ptr<Parsed> parse(const std::string& src) {
  auto p = std::make_unique<Parsed>();
  int id = p->diags.addFile("t.tg", src);
  p->ast = parseFile(p->diags.file(id).text, id, p->diags);
  return p;
}

// A compact rendering of an expression: (+ a (* b c)).
std::string show(const Expr& e) {
  switch (e.kind) {
    case ExprKind::Int: return std::to_string(e.ival);
    case ExprKind::Float: return std::to_string(e.fval);
    case ExprKind::Str: return "\"" + e.text + "\"";
    case ExprKind::Bool: return e.bval ? "true" : "false";
    case ExprKind::Name: return e.text;
    case ExprKind::Unary: return std::string("(") + (e.op == Op::Neg ? "neg" : opSpelling(e.op)) + " " + show(*e.kids[0]) + ")";
    case ExprKind::Binary:
      return std::string("(") + opSpelling(e.op) + " " + show(*e.kids[0]) + " " + show(*e.kids[1]) + ")";
    case ExprKind::Call: {
      std::string s = "(call " + show(*e.kids[0]);
      for (const auto& a : e.args) s += " " + (a.name.empty() ? "" : a.name + "=") + show(*a.value);
      return s + ")";
    }
    case ExprKind::Index: {
      std::string s = "(index " + show(*e.kids[0]);
      for (size_t i = 1; i < e.kids.size(); ++i) s += " " + show(*e.kids[i]);
      return s + ")";
    }
    case ExprKind::Member: return "(. " + show(*e.kids[0]) + " " + e.text + ")";
    case ExprKind::List: {
      std::string s = "[";
      for (size_t i = 0; i < e.kids.size(); ++i) s += (i ? " " : "") + show(*e.kids[i]);
      return s + "]";
    }
    case ExprKind::Comprehension:
      return "[" + show(*e.kids[0]) + " for " + e.text + " in " + show(*e.kids[1]) +
             (e.kids.size() > 2 ? ".." + show(*e.kids[2]) : "") + "]";
  }
  return "?";
}

std::string exprOf(const std::string& src) {
  auto p = parse("let v = " + src + "\n");
  EXPECT_EQ(p->diags.errorCount(), 0u) << p->diags.render();
  if (p->ast.lets.empty()) return "";
  return show(*p->ast.lets[0]->value);
}

TEST(ParserTest, Precedence) {
  EXPECT_EQ(exprOf("a + b * c"), "(+ a (* b c))");
  EXPECT_EQ(exprOf("a - b - c"), "(- (- a b) c)");
  EXPECT_EQ(exprOf("a @ b + c"), "(+ (@ a b) c)");
  EXPECT_EQ(exprOf("-x ** 2"), "(neg (** x 2))");
  EXPECT_EQ(exprOf("2 ** -1"), "(** 2 (neg 1))");
  EXPECT_EQ(exprOf("a ** b ** c"), "(** a (** b c))");
  EXPECT_EQ(exprOf("not a == b"), "(not (== a b))");
  EXPECT_EQ(exprOf("a and b or c and d"), "(or (and a b) (and c d))");
  EXPECT_EQ(exprOf("a < b + 1"), "(< a (+ b 1))");
  EXPECT_EQ(exprOf("(a + b) * c"), "(* (+ a b) c)");
  EXPECT_EQ(exprOf("x % 2 / 3"), "(/ (% x 2) 3)");
}

TEST(ParserTest, PostfixForms) {
  EXPECT_EQ(exprOf("softmax(x, axis=-1)"), "(call softmax x axis=(neg 1))");
  EXPECT_EQ(exprOf("layers[i](x, mask)"), "(call (index layers i) x mask)");
  EXPECT_EQ(exprOf("x.shape[-1]"), "(index (. x shape) (neg 1))");
  EXPECT_EQ(exprOf("f32[B, S, 4]"), "(index f32 B S 4)");
  EXPECT_EQ(exprOf("i64[]"), "(index i64)");
  EXPECT_EQ(exprOf("m.attn.forward(q)"), "(call (. (. m attn) forward) q)");
  EXPECT_EQ(exprOf("[1, 2, 3,]"), "[1 2 3]");
  EXPECT_EQ(exprOf("[]"), "[]");
  EXPECT_EQ(exprOf("[L(i) for i in 0..n]"), "[(call L i) for i in 0..n]");
  EXPECT_EQ(exprOf("[x * 2 for x in xs]"), "[(* x 2) for x in xs]");
}

TEST(ParserTest, TopLevelItems) {
  auto p = parse(R"(
import "nn.tg"
config {
  d_model: int = 512
  heads = 8, d_ff = 2048
}
preset tiny { d_model = 64, heads = 4 }
preset base {
  d_model = 512
}
dim B = 2, S
let x = 1
fn f(a, b: int = 2) { return a + b }
module M(n: int) {
  param w: f32[n, n] = normal(0.02)
  fn forward(x) { return x @ w }
}
graph train(x: f32[B, S]) training {
  output y = x
}
graph infer(x: f32[B, S]) { output y = x }
)");
  ASSERT_EQ(p->diags.errorCount(), 0u) << p->diags.render();
  const FileAst& a = p->ast;
  ASSERT_EQ(a.imports.size(), 1u);
  EXPECT_EQ(a.imports[0].path, "nn.tg");
  ASSERT_EQ(a.config.size(), 3u);
  EXPECT_EQ(a.config[0].name, "d_model");
  EXPECT_NE(a.config[0].type, nullptr);
  EXPECT_EQ(a.config[2].name, "d_ff");
  ASSERT_EQ(a.presets.size(), 2u);
  EXPECT_EQ(a.presets[0].entries.size(), 2u);
  ASSERT_EQ(a.dims.size(), 2u);
  EXPECT_NE(a.dims[0].def, nullptr);
  EXPECT_EQ(a.dims[1].def, nullptr);
  EXPECT_EQ(a.lets.size(), 1u);
  ASSERT_EQ(a.fns.size(), 1u);
  EXPECT_EQ(a.fns[0]->params.size(), 2u);
  ASSERT_EQ(a.modules.size(), 1u);
  ASSERT_EQ(a.modules[0]->body.size(), 2u);
  EXPECT_EQ(a.modules[0]->body[0]->kind, StmtKind::Param);
  EXPECT_EQ(a.modules[0]->body[1]->kind, StmtKind::Fn);
  ASSERT_EQ(a.graphs.size(), 2u);
  EXPECT_TRUE(a.graphs[0]->training);
  EXPECT_FALSE(a.graphs[1]->training);
}

TEST(ParserTest, StatementsIncludingElseOnTheNextLine) {
  auto p = parse(R"(
fn f(x) {
  let a, b = g(x)
  a = a + 1; b = b * 2
  if a > 1 {
    return a
  }
  else if b > 1 { return b }
  else { x }
  for i in 0..3 { a = a + i }
  for layer in layers { x = layer(x) }
  return a, b
}
)");
  ASSERT_EQ(p->diags.errorCount(), 0u) << p->diags.render();
  const auto& body = p->ast.fns[0]->body;
  ASSERT_EQ(body.size(), 7u);
  EXPECT_EQ(body[0]->kind, StmtKind::Let);
  EXPECT_EQ(body[0]->names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(body[1]->kind, StmtKind::Assign);
  EXPECT_EQ(body[2]->kind, StmtKind::Assign);
  ASSERT_EQ(body[3]->kind, StmtKind::If);
  ASSERT_EQ(body[3]->else_body.size(), 1u);
  EXPECT_EQ(body[3]->else_body[0]->kind, StmtKind::If);
  EXPECT_EQ(body[3]->else_body[0]->else_body.size(), 1u);
  EXPECT_EQ(body[4]->kind, StmtKind::For);
  EXPECT_NE(body[4]->hi, nullptr);
  EXPECT_EQ(body[5]->hi, nullptr);
  EXPECT_EQ(body[6]->kind, StmtKind::Return);
  EXPECT_EQ(body[6]->value->kind, ExprKind::List);
}

TEST(ParserTest, RecoversAndReportsSeveralErrors) {
  auto p = parse(R"(
fn f(x) {
  let a = (1 +
  let b = 2
  let c = * 3
  return b
}
graph g(x: f32[2]) {
  output y = x +
}
module M( { }
fn ok() { return 1 }
)");
  std::string d = p->diags.render();
  EXPECT_EQ(p->diags.errorCount(), 4u) << d;
  // The unclosed '(' ends at the line that starts with `let`.
  EXPECT_NE(d.find("t.tg:3:15: error: expected an expression, got end of line"), std::string::npos) << d;
  EXPECT_NE(d.find("t.tg:5:11: error: expected an expression, got '*'"), std::string::npos) << d;
  EXPECT_NE(d.find("t.tg:10:1: error: expected an expression, got '}'"), std::string::npos) << d;
  EXPECT_NE(d.find("t.tg:11:11: error: expected a parameter name, got '{'"), std::string::npos) << d;
  // The item after the broken one still parses.
  ASSERT_FALSE(p->ast.fns.empty());
  EXPECT_EQ(p->ast.fns.back()->name, "ok");
}

TEST(ParserTest, MessagesNameWhatWasExpected) {
  struct Case {
    const char* src;
    const char* msg;
  } cases[] = {
      {"graph g(x: f32[2]) { output = x }", "1:29: error: expected an output name, got '='"},
      {"let a = f(x=1, 2)", "a positional argument cannot follow keyword arguments"},
      {"let a = f(x=1, x=2)", "keyword argument 'x' is given twice"},
      {"fn f(a, a) { }", "duplicate parameter 'a'"},
      {"fn f(a = 1, b) { }", "parameter 'b' needs a default value"},
      {"let a = 1 < 2 < 3", "comparisons cannot be chained"},
      {"fn f() { g() = 1 }", "only a plain name can be assigned to"},
      {"fn f() { module M() {} }", "'module' is only allowed at the top level"},
      {"x = 1", "expected a top-level item"},
      {"let a = \"abc", "unterminated string"},
      {"fn f() { let a = 1 let b = 2 }", "expected end of statement, got 'let'"},
      {"config { a 1 }", "expected '=' and a default value, got number 1"},
  };
  for (const auto& c : cases) {
    auto p = parse(c.src);
    EXPECT_NE(p->diags.render().find(c.msg), std::string::npos) << c.src << "\n" << p->diags.render();
  }
}

TEST(ParserTest, DeepNestingIsAnErrorNotACrash) {
  std::string deep = "let a = " + std::string(5000, '(') + "1" + std::string(5000, ')');
  auto p = parse(deep);
  EXPECT_NE(p->diags.render().find("nesting is too deep"), std::string::npos);

  std::string unary = "let a = " + std::string(5000, '-') + "1";
  EXPECT_NE(parse(unary)->diags.render().find("too deep"), std::string::npos);

  // Left-associative chains build deep trees without deep parser recursion.
  std::string chain = "let a = 1";
  for (int i = 0; i < 20000; ++i) chain += " + 1";
  EXPECT_NE(parse(chain)->diags.render().find("too deeply nested"), std::string::npos);

  std::string calls = "let a = f";
  for (int i = 0; i < 20000; ++i) calls += "()";
  EXPECT_NE(parse(calls)->diags.render().find("too deeply nested"), std::string::npos);

  std::string blocks = "fn f() {";
  for (int i = 0; i < 5000; ++i) blocks += " if true {";
  EXPECT_NE(parse(blocks)->diags.render().find("nesting is too deep"), std::string::npos);
}

TEST(ParserTest, ErrorCountIsCapped) {
  std::string many;
  for (int i = 0; i < 500; ++i) many += "x = 1\n";
  auto p = parse(many);
  EXPECT_EQ(p->diags.errorCount(), Diags::kMaxErrors);
  EXPECT_NE(p->diags.render().find("too many errors"), std::string::npos);
}

}  // namespace
}  // namespace tgc::fe

namespace tgc::fe {
namespace {

TEST(SuggestionTest, ClosestNameWithinAFewEdits) {
  std::vector<std::string> names = {"d_model", "heads", "first", "B", "S"};
  EXPECT_EQ(closestName("d_modle", names), "d_model");  // a swap is one edit
  EXPECT_EQ(closestName("frist", names), "first");
  EXPECT_EQ(closestName("head", names), "heads");
  EXPECT_EQ(closestName("C", names), "");               // not a suggestion
  EXPECT_EQ(closestName("vocabulary", names), "");
  EXPECT_EQ(didYouMean("haeds", names), " (did you mean 'heads'?)");
  EXPECT_EQ(editDistance("kitten", "sitting"), 3u);
}

}  // namespace
}  // namespace tgc::fe
