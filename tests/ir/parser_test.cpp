// The IR text parser: what it accepts, and a catalogue of malformed inputs, each checked
// for the exact file:line:col of its diagnostic and a fragment of the message.
#include "ir/parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "ir/printer.h"

namespace tgc {
namespace {

// A two-node graph the error cases below are variations of.
std::string graphWith(const std::string& body) {
  return "graph @g {\n  %x = input() : f32[2,3]\n" + body + "  return %x\n}\n";
}

TEST(Parser, ReadsWhatThePrinterWrites) {
  std::string text =
      "graph @net [B=16, S=64] {\n"
      "  %x = input() {role=\"param\"} : f32[2,3]\n"
      "  %c = constant() {value=[1.0]} : f32[]\n"
      "  %y = softmax(%x) {axis=0} : f32[2,3]\n"
      "  %z = mul(%y, %c) : f32[2,3]\n"
      "  return %y, %z\n"
      "}\n";
  auto g = parseGraph(text);
  EXPECT_EQ(g->name(), "net");
  ASSERT_EQ(g->dims().size(), 2u);
  EXPECT_EQ(g->dims()[1], (std::pair<std::string, int64_t>{"S", 64}));
  ASSERT_EQ(g->size(), 4u);
  EXPECT_EQ(g->nodes()[2]->op(), OpKind::Softmax);
  EXPECT_EQ(g->nodes()[2]->attrInt("axis"), 0);
  EXPECT_EQ(g->nodes()[0]->attrString("role"), "param");
  ASSERT_EQ(g->outputs().size(), 2u);
  EXPECT_EQ(g->outputs()[1]->name(), "z");
  EXPECT_EQ(g->outputs()[1]->type(), (TensorType{DType::f32, {2, 3}}));
  EXPECT_EQ(printGraph(*g), text);
}

TEST(Parser, CommentsBlankLinesAndCrlf) {
  std::string text =
      "// a comment before the graph\r\n"
      "# and a hash comment\r\n"
      "\r\n"
      "graph @g {   // trailing comment\r\n"
      "\r\n"
      "  %x = input() : f32[4]  # another\r\n"
      "  %y = neg(%x)\r\n"
      "       : f32[4]\r\n"
      "  return %y\r\n"
      "}\r\n"
      "// after the graph\r\n";
  auto g = parseGraph(text);
  EXPECT_EQ(printGraph(*g),
            "graph @g {\n  %x = input() : f32[4]\n  %y = neg(%x) : f32[4]\n  return %y\n}\n");
}

TEST(Parser, AttributeValuesFollowTheOpTable) {
  auto g = parseGraph(
      "graph @g {\n"
      "  %x = input() : f32[2,3]\n"
      "  %g = input() : f32[3]\n"
      "  %b = input() : f32[3]\n"
      "  %n = layer_norm(%x, %g, %b) {eps=1} : f32[2,3]\n"  // an int literal for a float
      "  %s = reduce_sum(%x) {axes=[]} : f32[2,3]\n"
      "  %m = matmul(%x, %x) {transpose_a=true} : f32[3,3]\n"
      "  %i = cast(%x) {dtype=bool} : bool[2,3]\n"
      "  %k = gelu(%x) {approximate=\"tanh\"} : f32[2,3]\n"
      "  %c = constant() {value=[inf, -inf, nan, -0.0, 1e-05, 2, 1.5e+300]} : f64[7]\n"
      "  return %n\n"
      "}\n");
  const Node& ln = *g->nodes()[3];
  EXPECT_DOUBLE_EQ(ln.attrFloat("eps"), 1.0);
  EXPECT_TRUE(g->nodes()[4]->attrInts("axes").empty());
  EXPECT_TRUE(g->nodes()[5]->attrBool("transpose_a"));
  EXPECT_EQ(g->nodes()[6]->attrDType("dtype"), DType::boolean);
  EXPECT_EQ(g->nodes()[7]->attrString("approximate"), "tanh");
  const auto& v = g->nodes()[8]->attrFloats("value");
  ASSERT_EQ(v.size(), 7u);
  EXPECT_TRUE(std::isinf(v[0]) && v[0] > 0);
  EXPECT_TRUE(std::isinf(v[1]) && v[1] < 0);
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_TRUE(v[3] == 0 && std::signbit(v[3]));
  EXPECT_EQ(v[4], 1e-05);
  EXPECT_EQ(v[5], 2.0);
  EXPECT_EQ(v[6], 1.5e300);
  EXPECT_NE(printGraph(*g).find("{eps=1.0}"), std::string::npos);
}

TEST(Parser, DefaultAttributesAreDropped) {
  auto g = parseGraph(graphWith("  %y = softmax(%x) {axis=-1} : f32[2,3]\n"));
  EXPECT_TRUE(g->nodes()[1]->attrs().empty());
  EXPECT_EQ(printGraph(*g).find("axis"), std::string::npos);
}

TEST(Parser, QuotedNamesAndEscapes) {
  auto g = parseGraph(
      "graph @\"my graph\" {\n"
      "  %\"a b\\n\\\"c\\\"\\\\\" = input() : f32[1]\n"
      "  %\"tab\\there\" = neg(%\"a b\\n\\\"c\\\"\\\\\") : f32[1]\n"
      "  %\"权重\" = neg(%\"tab\\there\") : f32[1]\n"
      "  return %\"权重\"\n"
      "}\n");
  EXPECT_EQ(g->name(), "my graph");
  EXPECT_EQ(g->nodes()[0]->result()->name(), "a b\n\"c\"\\");
  EXPECT_EQ(g->nodes()[1]->result()->name(), "tab\there");
  EXPECT_EQ(g->outputs()[0]->name(), "权重");
  // Plain names with dots and leading digits need no quotes.
  auto h = parseGraph("graph @g {\n  %0.enc.1 = input() : f32[]\n  return %0.enc.1\n}\n");
  EXPECT_EQ(h->outputs()[0]->name(), "0.enc.1");
}

TEST(Parser, EmptyReturnAndEmptyAttributeBraces) {
  auto g = parseGraph("graph @g {\n  %x = input() {} : f32[0,5]\n  return\n}\n");
  EXPECT_TRUE(g->outputs().empty());
  EXPECT_EQ(printGraph(*g), "graph @g {\n  %x = input() : f32[0,5]\n  return\n}\n");
}

TEST(Parser, ExtremeIntegersReadExactly) {
  // INT64_MIN is a valid literal; the shape rule then rejects the axis, naming it.
  try {
    parseGraph(graphWith("  %y = softmax(%x) {axis=-9223372036854775808} : f32[2,3]\n"));
    FAIL() << "expected a ParseError";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("axis -9223372036854775808 is out of range"),
              std::string::npos)
        << e.what();
  }
  // A step near INT64_MAX takes one element (the shape rule must not overflow).
  auto s = parseGraph(graphWith(
      "  %y = slice(%x) {axis=1, start=0, end=2, step=9223372036854775807} : f32[2,1]\n"));
  EXPECT_EQ(s->nodes()[1]->result()->type(), (TensorType{DType::f32, {2, 1}}));
  // An empty dim makes a huge other dim harmless: no elements.
  auto g = parseGraph("graph @g {\n  %x = input() : f32[0,1099511627776]\n  return %x\n}\n");
  EXPECT_EQ(g->outputs()[0]->type().numel(), 0);
}

TEST(Parser, FullDiagnosticHasSourceLineAndCaret) {
  try {
    parseGraph(graphWith("  %y = softmx(%x) : f32[2,3]\n"), "model.tir");
    FAIL() << "expected a ParseError";
  } catch (const ParseError& e) {
    EXPECT_EQ(std::string(e.what()),
              "model.tir:3:8: error: unknown op 'softmx' (did you mean 'softmax'?)\n"
              "  %y = softmx(%x) : f32[2,3]\n"
              "       ^");
  }
}

TEST(Parser, MissingFileIsAParseErrorNamingIt) {
  try {
    parseGraphFile("/nonexistent/dir/g.tir");
    FAIL() << "expected a ParseError";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/g.tir: error: cannot open file"),
              std::string::npos)
        << e.what();
  }
}

TEST(Parser, FileDiagnosticsNameThePath) {
  auto path = std::filesystem::temp_directory_path() / "irio_parser_test_bad.tir";
  { std::ofstream(path) << graphWith("  %y = neg(%q) : f32[2,3]\n"); }
  try {
    parseGraphFile(path.string());
    FAIL() << "expected a ParseError";
  } catch (const ParseError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path.string() + ":3:12: error: unknown value %q", 0), 0u)
        << e.what();
  }
  std::filesystem::remove(path);
  auto good = std::filesystem::temp_directory_path() / "irio_parser_test_good.tir";
  { std::ofstream(good) << graphWith(""); }
  EXPECT_EQ(printGraph(*parseGraphFile(good.string())), graphWith(""));
  std::filesystem::remove(good);
}

// ---- the catalogue of malformed inputs -------------------------------------------------

struct BadInput {
  const char* name;
  std::string text;
  int line;
  int col;
  const char* fragment;
};

void PrintTo(const BadInput& b, std::ostream* os) { *os << b.name; }

class ParserRejects : public ::testing::TestWithParam<BadInput> {};

TEST_P(ParserRejects, AtTheOffendingToken) {
  const BadInput& b = GetParam();
  try {
    auto g = parseGraph(b.text, "bad.tir");
    FAIL() << "accepted:\n" << printGraph(*g);
  } catch (const ParseError& e) {
    std::string msg = e.what();
    std::string where =
        "bad.tir:" + std::to_string(b.line) + ":" + std::to_string(b.col) + ": error: ";
    EXPECT_EQ(msg.rfind(where, 0), 0u) << "want " << where << "\ngot:\n" << msg;
    EXPECT_NE(msg.find(b.fragment), std::string::npos) << "want '" << b.fragment << "' in:\n"
                                                       << msg;
    // The source line and a caret follow the first line.
    EXPECT_NE(msg.find("\n"), std::string::npos) << msg;
    EXPECT_EQ(msg.back(), '^') << msg;
  }
}

const BadInput kBadInputs[] = {
    {"empty_input", "", 1, 1, "expected 'graph' at the start of the input, got end of input"},
    {"not_graph_keyword", "grph @g {\n  return\n}\n", 1, 1, "expected 'graph'"},
    {"missing_graph_name", "graph {\n  return\n}\n", 1, 7, "expected the graph name"},
    {"dim_bound_twice", "graph @g [B=1, B=2] {\n  return\n}\n", 1, 16, "dim 'B' is bound twice"},
    {"dim_negative", "graph @g [B=-1] {\n  return\n}\n", 1, 13, "dim 'B' has negative size -1"},
    {"dim_overflow", "graph @g [B=18446744073709551616] {\n  return\n}\n", 1, 13,
     "does not fit in 64 bits"},
    {"unknown_op", graphWith("  %y = softmx(%x) : f32[2,3]\n"), 3, 8,
     "unknown op 'softmx' (did you mean 'softmax'?)"},
    {"unknown_op_far_from_any", graphWith("  %y = frobnicate(%x) : f32[2,3]\n"), 3, 8,
     "unknown op 'frobnicate'"},
    {"arity_too_many", graphWith("  %y = neg(%x, %x) : f32[2,3]\n"), 3, 8,
     "'neg' takes 1 operand, got 2"},
    {"arity_too_few_variadic", graphWith("  %y = concat() {axis=0} : f32[2,3]\n"), 3, 8,
     "'concat' takes at least 1 operand, got 0"},
    {"arity_source_with_operand", graphWith("  %y = input(%x) : f32[2,3]\n"), 3, 8,
     "'input' takes 0 operands, got 1"},
    {"unknown_value", graphWith("  %y = neg(%q) : f32[2,3]\n"), 3, 12, "unknown value %q"},
    {"unknown_value_suggests", graphWith("  %y = neg(%xx) : f32[2,3]\n"), 3, 12,
     "unknown value %xx (did you mean '%x'?)"},
    {"unknown_return_value", "graph @g {\n  %x = input() : f32[2]\n  return %x, %y\n}\n", 3, 14,
     "unknown value %y"},
    {"use_before_definition",
     "graph @g {\n  %y = neg(%x) : f32[2]\n  %x = input() : f32[2]\n  return %y\n}\n", 2, 12,
     "unknown value %x"},
    {"redefinition", graphWith("  %x = neg(%x) : f32[2,3]\n"), 3, 3,
     "redefinition of %x (first defined at 2:3)"},
    {"named_twice_in_one_node", graphWith("  %a, %a = neg(%x) : f32[2,3], f32[2,3]\n"), 3, 7,
     "%a is named twice"},
    {"empty_value_name", graphWith("  %\"\" = neg(%x) : f32[2,3]\n"), 3, 3,
     "value names must not be empty"},
    {"unknown_dtype", graphWith("  %y = neg(%x) : f33[2,3]\n"), 3, 18,
     "unknown dtype 'f33' (did you mean 'f32'?)"},
    {"type_without_brackets", graphWith("  %y = neg(%x) : f32(2,3)\n"), 3, 21,
     "expected '[' after 'f32' (a scalar is f32[])"},
    {"negative_dimension", graphWith("  %y = neg(%x) : f32[2,-3]\n"), 3, 24,
     "dimension -3 is negative"},
    {"dimension_overflow", graphWith("  %y = input() : f32[99999999999999999999]\n"), 3, 22,
     "integer 99999999999999999999 does not fit in 64 bits"},
    {"too_many_elements", graphWith("  %y = input() : f32[1099511627776,2]\n"), 3, 18,
     "type f32[1099511627776,2] is too large (its dimensions multiply to more than 2^40)"},
    {"empty_but_huge_dims", graphWith("  %y = input() : f32[1099511627776,1099511627776,0]\n"), 3,
     18, "its dimensions multiply to more than 2^40"},
    {"dimension_too_large", graphWith("  %y = input() : f32[0,1099511627777]\n"), 3, 18,
     "type f32[0,1099511627777] is too large (dimension 1099511627777 is larger than 2^40)"},
    {"malformed_number", graphWith("  %y = input() : f32[2x3]\n"), 3, 22, "malformed number '2x3'"},
    {"missing_type", graphWith("  %y = neg(%x)\n"), 4, 3,
     "expected ':' and the result type after the node, got 'return'"},
    {"type_count_mismatch", graphWith("  %a, %b = neg(%x) : f32[2,3]\n"), 3, 22,
     "2 result names but 1 type"},
    {"too_many_results_for_op", graphWith("  %a, %b = neg(%x) : f32[2,3], f32[2,3]\n"), 3, 22,
     "declared result type f32[2,3], f32[2,3] but the op gives f32[2,3]"},
    {"declared_type_mismatch", graphWith("  %y = neg(%x) : f32[3,2]\n"), 3, 18,
     "neg %y (f32[2,3]): declared result type f32[3,2] but the op gives f32[2,3]"},
    {"shape_rule_rejects", graphWith("  %y = softmax(%x) {axis=5} : f32[2,3]\n"), 3, 8,
     "softmax %y (f32[2,3]): axis 5 is out of range for rank 2"},
    {"operand_dtype_rejected",
     graphWith("  %b = input() : bool[2,3]\n  %y = exp(%b) : bool[2,3]\n"), 4, 8,
     "operand bool[2,3] must be a float type"},
    {"constant_value_count", graphWith("  %c = constant() {value=[1.0, 2.0]} : f32[3]\n"), 3, 8,
     "value has 2 elements; f32[3] needs 1 or 3"},
    {"unknown_attribute", graphWith("  %y = softmax(%x) {axes=0} : f32[2,3]\n"), 3, 21,
     "unknown attribute 'axes' for 'softmax' (did you mean 'axis'?) (known: axis)"},
    {"attribute_on_op_without_any", graphWith("  %y = neg(%x) {axis=0} : f32[2,3]\n"), 3, 17,
     "unknown attribute 'axis' for 'neg' (it has none)"},
    {"attribute_given_twice", graphWith("  %y = softmax(%x) {axis=0, axis=1} : f32[2,3]\n"), 3, 29,
     "attribute 'axis' is given twice"},
    {"attribute_float_for_int", graphWith("  %y = softmax(%x) {axis=1.5} : f32[2,3]\n"), 3, 26,
     "attribute 'axis' must be int, got float"},
    {"attribute_string_for_int", graphWith("  %y = softmax(%x) {axis=\"0\"} : f32[2,3]\n"), 3, 26,
     "attribute 'axis' must be int, got string"},
    {"attribute_float_in_ints", graphWith("  %y = transpose(%x) {perm=[1, 0.5]} : f32[3,2]\n"), 3,
     32, "attribute 'perm' must be ints, got a list holding float"},
    {"attribute_scalar_for_list", graphWith("  %y = reduce_sum(%x) {axes=1} : f32[2]\n"), 3, 29,
     "attribute 'axes' must be ints, got int"},
    {"attribute_bool_wrong", graphWith("  %y = matmul(%x, %x) {transpose_b=1} : f32[2,2]\n"), 3, 36,
     "attribute 'transpose_b' must be bool, got int"},
    {"attribute_unknown_dtype", graphWith("  %y = cast(%x) {dtype=f128} : f32[2,3]\n"), 3, 24,
     "unknown dtype 'f128'"},
    {"attribute_int_overflow",
     graphWith("  %y = softmax(%x) {axis=-9223372036854775809} : f32[2,3]\n"), 3, 26,
     "integer -9223372036854775809 does not fit in 64 bits"},
    {"attribute_float_out_of_range",
     graphWith("  %y = layer_norm(%x, %x, %x) {eps=1e999} : f32[2,3]\n"), 3, 36,
     "number 1e999 is out of range"},
    {"missing_attribute", graphWith("  %y = reduce_sum(%x) : f32[2]\n"), 3, 8,
     "'reduce_sum' needs attribute 'axes' (ints)"},
    {"attribute_shape_too_large",
     graphWith("  %y = reshape(%x) {shape=[4294967296,4294967296,4]} : f32[6]\n"), 3, 27,
     "shape [4294967296,4294967296,4] is too large (its dimensions multiply to more than 2^40)"},
    {"unterminated_string", graphWith("  %y = input() {role=\"param} : f32[2]\n"), 3, 22,
     "unterminated string"},
    {"unterminated_quoted_name", graphWith("  %\"abc = input() : f32[2]\n"), 3, 4,
     "unterminated string"},
    {"unknown_escape", graphWith("  %\"a\\qb\" = input() : f32[2]\n"), 3, 6,
     "unknown escape '\\q'"},
    {"invalid_utf8", graphWith("  %\"a\xff\" = input() : f32[2]\n"), 3, 4,
     "string is not valid UTF-8"},
    {"unexpected_character", graphWith("  %y = neg(%x); : f32[2,3]\n"), 3, 15,
     "unexpected character ';'"},
    {"unexpected_nul_byte", graphWith(std::string("  %y = neg(%x)\0 : f32[2,3]\n", 27)), 3, 15,
     "unexpected byte 0x00"},
    {"bare_percent", graphWith("  % = neg(%x) : f32[2,3]\n"), 3, 3,
     "expected a value name after '%'"},
    {"operand_without_percent", graphWith("  %y = neg(x) : f32[2,3]\n"), 3, 12,
     "expected an operand ('%name') or ')', got 'x'"},
    {"missing_equals", graphWith("  %y neg(%x) : f32[2,3]\n"), 3, 6,
     "expected '=' after the result names, got 'neg'"},
    {"missing_close_paren", graphWith("  %y = neg(%x : f32[2,3]\n"), 3, 15,
     "expected ')' after the operands, got ':'"},
    {"missing_return", "graph @g {\n  %x = input() : f32[2]\n}\n", 3, 1,
     "expected 'return' before the closing '}'"},
    {"missing_close_brace", "graph @g {\n  %x = input() : f32[2]\n  return %x\n", 4, 1,
     "expected ',' or '}' to close the graph, got end of input"},
    {"truncated_in_node", "graph @g {\n  %x = input() : f32[2", 2, 23,
     "expected ']' or ',' in the shape, got end of input"},
    {"node_after_return",
     "graph @g {\n  %x = input() : f32[2]\n  return %x\n  %y = neg(%x) : f32[2]\n}\n", 4, 3,
     "expected ',' or '}' to close the graph, got value '%y'"},
    {"return_value_not_a_value", "graph @g {\n  %x = input() : f32[2]\n  return 1\n}\n", 3, 10,
     "expected a value or '}' to close the graph, got number 1"},
    {"trailing_garbage", graphWith("") + "junk\n", 5, 1,
     "unexpected 'junk' after the end of the graph"},
    {"second_graph", graphWith("") + graphWith(""), 5, 1,
     "unexpected 'graph' after the end of the graph"},
    {"return_trailing_comma", "graph @g {\n  %x = input() : f32[2]\n  return %x,\n}\n", 4, 1,
     "expected a value after ',', got '}'"},
    {"minus_without_number", graphWith("  %y = softmax(%x) {axis=-x} : f32[2,3]\n"), 3, 26,
     "expected a number after '-'"},
};

INSTANTIATE_TEST_SUITE_P(Catalogue, ParserRejects, ::testing::ValuesIn(kBadInputs),
                         [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace tgc
