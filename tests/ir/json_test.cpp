// Graph IR as JSON: the schema, and the error paths malformed documents report.
#include "ir/json.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ir/parser.h"
#include "ir/printer.h"

namespace tgc {
namespace {

using nlohmann::json;

const char* kSmall =
    "graph @small [B=2] {\n"
    "  %x = input() {role=\"param\"} : f32[2,3]\n"
    "  %c = constant() {value=[inf, -inf, nan, 0.5]} : f32[4]\n"
    "  %y = softmax(%x) {axis=0} : f32[2,3]\n"
    "  %s = reduce_sum(%y) {axes=[1], keepdims=true} : f32[2,1]\n"
    "  %t = cast(%s) {dtype=i64} : i64[2,1]\n"
    "  return %y, %t\n"
    "}\n";

TEST(Json, Schema) {
  json j = graphToJson(*parseGraph(kSmall));
  EXPECT_EQ(j["graph"], "small");
  EXPECT_EQ(j["dims"], json::parse(R"([["B", 2]])"));
  ASSERT_EQ(j["nodes"].size(), 5u);
  EXPECT_EQ(j["nodes"][0],
            json::parse(R"({"op": "input", "operands": [], "attrs": {"role": "param"},
      "results": [{"name": "x", "type": {"dtype": "f32", "shape": [2, 3]}}]})"));
  EXPECT_EQ(j["nodes"][2]["operands"], json::parse(R"(["x"])"));
  EXPECT_EQ(j["nodes"][2]["attrs"], json::parse(R"({"axis": 0})"));
  EXPECT_EQ(j["nodes"][3]["attrs"], json::parse(R"({"axes": [1], "keepdims": true})"));
  EXPECT_EQ(j["nodes"][4]["attrs"], json::parse(R"({"dtype": "i64"})"));
  EXPECT_EQ(j["outputs"], json::parse(R"(["y", "t"])"));
}

TEST(Json, NonFiniteFloatsAreStrings) {
  json j = graphToJson(*parseGraph(kSmall));
  EXPECT_EQ(j["nodes"][1]["attrs"]["value"], json::parse(R"(["inf", "-inf", "nan", 0.5])"));
  // The dump is standard JSON (nlohmann would write null for a raw NaN).
  EXPECT_EQ(j.dump().find("null"), std::string::npos);
  auto g = graphFromJson(j);
  const auto& v = g->nodes()[1]->attrFloats("value");
  EXPECT_TRUE(std::isinf(v[0]) && v[0] > 0);
  EXPECT_TRUE(std::isinf(v[1]) && v[1] < 0);
  EXPECT_TRUE(std::isnan(v[2]));
}

TEST(Json, ReadsLooseButValidForms) {
  // Optional keys left out, an int for a float attribute, "inf" for a float.
  auto g = graphFromJsonText(R"({
    "graph": "g",
    "nodes": [
      {"op": "input", "results": [{"name": "x", "type": {"dtype": "f32", "shape": [3]}}]},
      {"op": "input", "results": [{"name": "w", "type": {"dtype": "f32", "shape": [3]}}]},
      {"op": "layer_norm", "operands": ["x", "w", "w"], "attrs": {"eps": 1},
       "results": [{"name": "n", "type": {"dtype": "f32", "shape": [3]}}]},
      {"op": "constant", "attrs": {"value": ["inf", 2, 0.25]},
       "results": [{"name": "c", "type": {"dtype": "f64", "shape": [3]}}]}
    ],
    "outputs": ["n"]})");
  EXPECT_DOUBLE_EQ(g->nodes()[2]->attrFloat("eps"), 1.0);
  EXPECT_EQ(g->nodes()[3]->attrFloats("value")[1], 2.0);
  EXPECT_TRUE(g->dims().empty());
  EXPECT_EQ(printGraph(*g),
            "graph @g {\n"
            "  %x = input() : f32[3]\n"
            "  %w = input() : f32[3]\n"
            "  %n = layer_norm(%x, %w, %w) {eps=1.0} : f32[3]\n"
            "  %c = constant() {value=[inf,2.0,0.25]} : f64[3]\n"
            "  return %n\n"
            "}\n");
}

TEST(Json, SyntaxErrorsGiveLineAndColumn) {
  try {
    graphFromJsonText("{\n  \"graph\": \"g\",\n  \"nodes\": [}\n", "bad.json");
    FAIL() << "expected a ParseError";
  } catch (const ParseError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("bad.json:3:13: error: json: syntax error", 0), 0u) << msg;
    EXPECT_NE(msg.find("\n  \"nodes\": [}\n            ^"), std::string::npos) << msg;
  }
}

TEST(Json, NumbersBeyondDoubleAreParseErrors) {
  try {
    graphFromJsonText("{\"graph\": \"g\",\n \"nodes\": [], \"outputs\": [1e999]}", "big.json");
    FAIL() << "expected a ParseError";
  } catch (const ParseError& e) {
    EXPECT_EQ(std::string(e.what()),
              "big.json:2:27: error: json: number overflow parsing '1e999'\n"
              " \"nodes\": [], \"outputs\": [1e999]}\n"
              "                          ^");
  }
}

// ---- malformed documents: each error names the JSON path --------------------------------

struct BadJson {
  const char* name;
  std::string text;
  const char* message;  // the whole message after "<file>: json: "
};

void PrintTo(const BadJson& b, std::ostream* os) { *os << b.name; }

class JsonRejects : public ::testing::TestWithParam<BadJson> {};

TEST_P(JsonRejects, NamingThePath) {
  const BadJson& b = GetParam();
  try {
    auto g = graphFromJsonText(b.text, "bad.json");
    FAIL() << "accepted:\n" << printGraph(*g);
  } catch (const ParseError& e) {
    EXPECT_EQ(std::string(e.what()), std::string("bad.json: json: ") + b.message);
  }
}

// A node list around one node, after an input %x : f32[2,3].
std::string withNode(const std::string& node, const std::string& outputs = R"(["x"])") {
  return R"({"graph": "g", "nodes": [
      {"op": "input", "results": [{"name": "x", "type": {"dtype": "f32", "shape": [2, 3]}}]},
      )" +
         node + R"(], "outputs": )" + outputs + "}";
}

std::string node(const std::string& op, const std::string& operands, const std::string& attrs,
                 const std::string& type = R"({"dtype": "f32", "shape": [2, 3]})") {
  return R"({"op": ")" + op + R"(", "operands": )" + operands + R"(, "attrs": )" + attrs +
         R"(, "results": [{"name": "y", "type": )" + type + "}]}";
}

const BadJson kBadJson[] = {
    {"top_level_not_object", "[1, 2]", "(top level): expected an object, got an array"},
    {"missing_nodes", R"({"graph": "g", "outputs": []})", "nodes: missing"},
    {"missing_graph", R"({"nodes": [], "outputs": []})", "graph: missing"},
    {"unknown_top_key", R"({"graph": "g", "nodes": [], "outputs": [], "extra": 1})",
     "extra: unknown key (expected one of graph, dims, nodes, outputs)"},
    {"graph_not_string", R"({"graph": 3, "nodes": [], "outputs": []})",
     "graph: expected a string, got an integer"},
    {"nodes_not_array", R"({"graph": "g", "nodes": {}, "outputs": []})",
     "nodes: expected an array, got an object"},
    {"dim_not_pair", R"({"graph": "g", "dims": [["B"]], "nodes": [], "outputs": []})",
     "dims[0]: expected a [name, size] pair, got an array"},
    {"dim_name_not_identifier",
     R"({"graph": "g", "dims": [["a b", 1]], "nodes": [], "outputs": []})",
     "dims[0][0]: dim name \"a b\" is not an identifier"},
    {"dim_negative", R"({"graph": "g", "dims": [["B", -4]], "nodes": [], "outputs": []})",
     "dims[0][1]: dim 'B' has negative size -4"},
    {"dim_twice", R"({"graph": "g", "dims": [["B", 1], ["B", 2]], "nodes": [], "outputs": []})",
     "dims[1][0]: dim 'B' is bound twice"},
    {"node_not_object", withNode("7"), "nodes[1]: expected an object, got an integer"},
    {"node_unknown_key", withNode(R"({"op": "neg", "operand": ["x"], "results": []})"),
     "nodes[1].operand: unknown key (expected one of op, results, operands, attrs)"},
    {"node_missing_op", withNode(R"({"results": []})"), "nodes[1].op: missing"},
    {"unknown_op", withNode(node("softmx", R"(["x"])", "{}")),
     "nodes[1].op: unknown op \"softmx\" (did you mean \"softmax\"?)"},
    {"unknown_operand", withNode(node("neg", R"(["z"])", "{}")),
     "nodes[1].operands[0]: unknown value \"z\""},
    {"operand_not_string", withNode(node("neg", "[0]", "{}")),
     "nodes[1].operands[0]: expected a string, got an integer"},
    {"arity", withNode(node("neg", R"(["x", "x"])", "{}")),
     "nodes[1].operands: 'neg' takes 1 operand, got 2"},
    {"unknown_attribute_control_bytes", withNode(node("neg", R"(["x"])", R"({"a\nb": 0})")),
     "nodes[1].attrs.a\\x0ab: unknown attribute for 'neg' (it has none)"},
    {"unknown_attribute", withNode(node("softmax", R"(["x"])", R"({"axs": 0})")),
     "nodes[1].attrs.axs: unknown attribute for 'softmax' (did you mean 'axis'?) (known: axis)"},
    {"attribute_wrong_kind", withNode(node("softmax", R"(["x"])", R"({"axis": 0.5})")),
     "nodes[1].attrs.axis: expected an integer, got a float"},
    {"attribute_list_element", withNode(node("transpose", R"(["x"])", R"({"perm": [1, "0"]})")),
     "nodes[1].attrs.perm[1]: expected an integer, got a string"},
    {"attribute_int_too_large",
     withNode(node("softmax", R"(["x"])", R"({"axis": 9223372036854775808})")),
     "nodes[1].attrs.axis: integer does not fit in 64 bits"},
    {"attribute_bad_float_string",
     withNode(node("layer_norm", R"(["x", "x", "x"])", R"({"eps": "tiny"})")),
     "nodes[1].attrs.eps: expected a number or \"inf\", \"-inf\", \"nan\", got \"tiny\""},
    {"attribute_unknown_dtype", withNode(node("cast", R"(["x"])", R"({"dtype": "f31"})")),
     "nodes[1].attrs.dtype: unknown dtype \"f31\" (did you mean \"f32\"?) (expected one of f32, "
     "f64, bf16, f16, i32, i64, bool)"},
    {"missing_attribute", withNode(node("reduce_sum", R"(["x"])", "{}")),
     "nodes[1].attrs.axes: missing required attribute (ints)"},
    {"attrs_not_object", withNode(node("neg", R"(["x"])", "[]")),
     "nodes[1].attrs: expected an object, got an array"},
    {"results_empty", withNode(R"({"op": "neg", "operands": ["x"], "results": []})"),
     "nodes[1].results: a node needs at least one result"},
    {"result_name_empty",
     withNode(R"({"op": "neg", "operands": ["x"], "results": [{"name": "", "type": {}}]})"),
     "nodes[1].results[0].name: value names must not be empty"},
    {"redefinition", withNode(R"({"op": "neg", "operands": ["x"],
         "results": [{"name": "x", "type": {"dtype": "f32", "shape": [2, 3]}}]})"),
     "nodes[1].results[0].name: redefinition of value \"x\""},
    {"type_missing_shape", withNode(node("neg", R"(["x"])", "{}", R"({"dtype": "f32"})")),
     "nodes[1].results[0].type.shape: missing"},
    {"type_bad_dtype", withNode(node("neg", R"(["x"])", "{}", R"({"dtype": 32, "shape": []})")),
     "nodes[1].results[0].type.dtype: expected a string, got an integer"},
    {"shape_negative",
     withNode(node("neg", R"(["x"])", "{}", R"({"dtype": "f32", "shape": [2, -3]})")),
     "nodes[1].results[0].type.shape[1]: dimension -3 is negative"},
    {"shape_float", withNode(node("neg", R"(["x"])", "{}", R"({"dtype": "f32", "shape": [2.5]})")),
     "nodes[1].results[0].type.shape[0]: expected an integer, got a float"},
    {"shape_too_large",
     withNode(node("neg", R"(["x"])", "{}", R"({"dtype": "f32", "shape": [1048576, 1048577]})")),
     "nodes[1].results[0].type.shape: f32[1048576,1048577] is too large (its dimensions multiply "
     "to more than 2^40)"},
    {"integer_beyond_64_bits",
     withNode(
         node("neg", R"(["x"])", "{}", R"({"dtype": "f32", "shape": [18446744073709551616]})")),
     "nodes[1].results[0].type.shape[0]: integer does not fit in 64 bits"},
    {"declared_type_mismatch",
     withNode(node("neg", R"(["x"])", "{}", R"({"dtype": "f32", "shape": [3, 2]})")),
     "nodes[1]: neg %y (f32[2,3]): declared result type f32[3,2] but the op gives f32[2,3]"},
    {"shape_rule_rejects", withNode(node("softmax", R"(["x"])", R"({"axis": 2})")),
     "nodes[1]: softmax %y (f32[2,3]): axis 2 is out of range for rank 2"},
    {"unknown_output", withNode(node("neg", R"(["x"])", "{}"), R"(["x", "yy"])"),
     "outputs[1]: unknown value \"yy\" (did you mean \"y\"?)"},
    {"outputs_not_array", withNode(node("neg", R"(["x"])", "{}"), R"("y")"),
     "outputs: expected an array, got a string"},
};

INSTANTIATE_TEST_SUITE_P(Catalogue, JsonRejects, ::testing::ValuesIn(kBadJson),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(Json, ErrorsFromAJsonValueNameTheFile) {
  json j = {{"graph", "g"}, {"nodes", json::array()}};
  try {
    graphFromJson(j, "api");
    FAIL() << "expected a ParseError";
  } catch (const ParseError& e) {
    EXPECT_EQ(std::string(e.what()), "api: json: outputs: missing");
  }
  // A document built in memory may hold bytes that are not UTF-8; the text form could not
  // read such a name back, so it is refused.
  json bad = {
      {"graph", std::string("g\xff")}, {"nodes", json::array()}, {"outputs", json::array()}};
  EXPECT_THROW(graphFromJson(bad), ParseError);
}

}  // namespace
}  // namespace tgc
