// Round trips over a graph that uses every op: text -> graph -> text is byte-identical,
// JSON -> graph -> JSON is identical, and the two formats agree. Also: mutated inputs
// either parse (and then round-trip) or give a ParseError, never anything else.
#include <gtest/gtest.h>

#include <random>

#include "ir/json.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "tests/ir/all_ops_graph.h"

namespace tgc {
namespace {

using nlohmann::json;

// Node-by-node equality: op, result names and types, attributes (as text: NaN != NaN),
// operand names, outputs.
void expectSameGraph(const Graph& a, const Graph& b) {
  EXPECT_EQ(a.name(), b.name());
  EXPECT_EQ(a.dims(), b.dims());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const Node& x = *a.nodes()[i];
    const Node& y = *b.nodes()[i];
    EXPECT_EQ(x.op(), y.op()) << i;
    ASSERT_EQ(x.numResults(), y.numResults()) << i;
    for (size_t r = 0; r < x.numResults(); ++r) {
      EXPECT_EQ(x.result(r)->name(), y.result(r)->name());
      EXPECT_EQ(x.result(r)->type(), y.result(r)->type());
    }
    ASSERT_EQ(x.operands().size(), y.operands().size()) << i;
    for (size_t o = 0; o < x.operands().size(); ++o)
      EXPECT_EQ(x.operand(o)->name(), y.operand(o)->name());
    ASSERT_EQ(x.attrs().size(), y.attrs().size()) << i;
    for (auto ix = x.attrs().begin(), iy = y.attrs().begin(); ix != x.attrs().end(); ++ix, ++iy) {
      EXPECT_EQ(ix->first, iy->first);
      EXPECT_EQ(attrKind(ix->second), attrKind(iy->second));
      EXPECT_EQ(attrToString(ix->second), attrToString(iy->second));
    }
  }
  ASSERT_EQ(a.outputs().size(), b.outputs().size());
  for (size_t i = 0; i < a.outputs().size(); ++i)
    EXPECT_EQ(a.outputs()[i]->name(), b.outputs()[i]->name());
}

TEST(AllOpsGraph, UsesEveryOpAndVerifies) {
  auto g = test::buildAllOpsGraph();
  std::string missing;
  for (OpKind k : test::opsMissingFrom(*g)) missing += std::string(opName(k)) + " ";
  EXPECT_EQ(missing, "") << "add these ops to tests/ir/all_ops_graph.cpp";
  EXPECT_EQ(verifyGraph(*g), std::vector<std::string>{});
}

TEST(RoundTrip, TextIsByteIdentical) {
  auto g = test::buildAllOpsGraph();
  std::string text = printGraph(*g);
  auto parsed = parseGraph(text, "all_ops.tir");
  expectSameGraph(*g, *parsed);
  EXPECT_EQ(printGraph(*parsed), text);
}

TEST(RoundTrip, JsonIsIdentical) {
  auto g = test::buildAllOpsGraph();
  json j = graphToJson(*g);
  auto fromJson = graphFromJson(j);
  expectSameGraph(*g, *fromJson);
  EXPECT_EQ(printGraph(*fromJson), printGraph(*g));
  EXPECT_EQ(graphToJson(*fromJson), j);
  // Through JSON text too, at any indentation.
  for (int indent : {-1, 2}) {
    std::string dumped = j.dump(indent);
    auto fromText = graphFromJsonText(dumped, "all_ops.json");
    EXPECT_EQ(graphToJson(*fromText).dump(indent), dumped);
  }
}

TEST(RoundTrip, TextAndJsonAgree) {
  auto g = test::buildAllOpsGraph();
  auto viaText = parseGraph(printGraph(*g));
  auto viaJson = graphFromJsonText(graphToJson(*g).dump());
  EXPECT_EQ(graphToJson(*viaText), graphToJson(*viaJson));
  EXPECT_EQ(printGraph(*viaText), printGraph(*viaJson));
}

TEST(RoundTrip, HandWrittenTextBecomesCanonical) {
  // Comments, odd spacing, quoted plain names, defaults written out, int for float.
  auto g = parseGraph(
      "# model\n"
      "graph   @\"g\"[B = 4]{\n"
      "  %\"x\"=input(){role=\"data\"}:f32[4, 8]\n"
      "  %w = input() : f32[8]\n"
      "  %y = layer_norm(%x,%w,%w){eps=2}:f32[4,8]  // gamma = beta\n"
      "  %z = softmax(%y) {axis=-1} : f32[4,8]\n"
      "  return %z,%y\n"
      "}");
  std::string canonical =
      "graph @g [B=4] {\n"
      "  %x = input() : f32[4,8]\n"
      "  %w = input() : f32[8]\n"
      "  %y = layer_norm(%x, %w, %w) {eps=2.0} : f32[4,8]\n"
      "  %z = softmax(%y) : f32[4,8]\n"
      "  return %z, %y\n"
      "}\n";
  EXPECT_EQ(printGraph(*g), canonical);
  EXPECT_EQ(printGraph(*parseGraph(canonical)), canonical);
}

TEST(RoundTrip, LargeGraphs) {
  // Many dims, a long chain and a wide concat: checks of names and dims must stay linear.
  std::string text = "graph @big [";
  for (int i = 0; i < 20000; ++i)
    text += (i ? ", d" : "d") + std::to_string(i) + "=" + std::to_string(i);
  text += "] {\n  %v0 = input() : f32[2]\n";
  for (int i = 1; i < 20000; ++i)
    text += "  %v" + std::to_string(i) + " = neg(%v" + std::to_string(i - 1) + ") : f32[2]\n";
  text += "  %cat = concat(";
  for (int i = 0; i < 20000; ++i) text += (i ? ", %v" : "%v") + std::to_string(i);
  text += ") {axis=0} : f32[40000]\n  return %cat\n}\n";
  auto g = parseGraph(text);
  EXPECT_EQ(g->size(), 20001u);
  EXPECT_EQ(g->dims().size(), 20000u);
  EXPECT_EQ(printGraph(*g), text);
  EXPECT_EQ(printGraph(*graphFromJsonText(graphToJson(*g).dump())), text);
}

// Applies one random edit: delete, duplicate or overwrite a span, insert a token, truncate.
std::string mutate(const std::string& s, std::mt19937& rng) {
  static const char* kTokens[] = {
      "%",    "@",  "\"", "{", "}",   "[",    "]",      "(",     ")",
      ",",    "=",  ":",  "-", "0",   "9",    "1e308",  "inf",   "nan",
      "\\",   "\n", "//", "#", "f32", "bool", "return", "graph", "99999999999999999999",
      "\xff", "\0", " "};
  std::string r = s;
  auto pick = [&](size_t n) {
    return n ? std::uniform_int_distribution<size_t>(0, n - 1)(rng) : 0;
  };
  size_t at = pick(r.size() + 1);
  switch (pick(5)) {
    case 0:
      r.erase(at, 1 + pick(8));
      break;
    case 1:
      r.insert(at, r.substr(pick(r.size()), 1 + pick(16)));
      break;
    case 2: {
      std::string tok = kTokens[pick(std::size(kTokens))];
      if (tok.empty()) tok = std::string(1, '\0');
      r.insert(at, tok);
      break;
    }
    case 3:
      if (at < r.size()) r[at] = static_cast<char>(pick(256));
      break;
    case 4:
      r.resize(at);
      break;
  }
  return r;
}

TEST(RoundTrip, MutatedTextParsesOrFailsCleanly) {
  std::string base = printGraph(*test::buildAllOpsGraph());
  std::mt19937 rng(1234);
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = base;
    for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) text = mutate(text, rng);
    std::unique_ptr<Graph> g;
    try {
      g = parseGraph(text, "mutant.tir");
    } catch (const ParseError& e) {
      ++rejected;
      EXPECT_EQ(std::string(e.what()).rfind("mutant.tir:", 0), 0u) << e.what();
      continue;
    }
    ++accepted;
    std::string printed = printGraph(*g);
    EXPECT_EQ(printGraph(*parseGraph(printed)), printed) << "mutant:\n" << text;
  }
  // Both outcomes happen, so the loop tests something either way.
  EXPECT_GT(accepted, 10);
  EXPECT_GT(rejected, 1000);
}

TEST(RoundTrip, MutatedJsonParsesOrFailsCleanly) {
  std::string base = graphToJson(*test::buildAllOpsGraph()).dump(1);
  std::mt19937 rng(99);
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 1500; ++i) {
    std::string text = mutate(base, rng);
    std::unique_ptr<Graph> g;
    try {
      g = graphFromJsonText(text, "mutant.json");
    } catch (const ParseError& e) {
      ++rejected;
      EXPECT_EQ(std::string(e.what()).rfind("mutant.json:", 0), 0u) << e.what();
      continue;
    }
    ++accepted;
    json j = graphToJson(*g);
    EXPECT_EQ(graphToJson(*graphFromJson(j)), j);
  }
  EXPECT_GT(accepted, 50);
  EXPECT_GT(rejected, 500);
}

}  // namespace
}  // namespace tgc
