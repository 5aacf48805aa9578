// Graphviz output: well-formed dot (checked by a small scanner here, and by `dot` itself
// when it is installed), one dot node per op, one edge per operand, escaped labels.
#include "ir/graphviz.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "ir/parser.h"
#include "tests/ir/all_ops_graph.h"

namespace tgc {
namespace {

// What a scan of dot text finds: statements outside strings, and whether it is balanced.
struct DotScan {
  bool stringsClosed = true;
  bool bracesBalanced = true;
  std::vector<std::string> lines;  // each line with every "..." string replaced by ""
};

DotScan scanDot(const std::string& dot) {
  DotScan r;
  int braces = 0, brackets = 0;
  bool inString = false;
  std::string line;
  for (size_t i = 0; i < dot.size(); ++i) {
    char c = dot[i];
    if (inString) {
      if (c == '\\' && i + 1 < dot.size()) {
        ++i;  // an escaped character, quotes included
      } else if (c == '"') {
        inString = false;
        line += '"';
      } else if (c == '\n') {
        r.stringsClosed = false;  // a raw newline inside a label
      }
      continue;
    }
    if (c == '"') {
      inString = true;
      line += '"';
      continue;
    }
    if (c == '{') ++braces;
    if (c == '}') --braces;
    if (c == '[') ++brackets;
    if (c == ']') --brackets;
    if (braces < 0 || brackets < 0) r.bracesBalanced = false;
    if (c == '\n') {
      r.lines.push_back(line);
      line.clear();
    } else {
      line += c;
    }
  }
  if (inString) r.stringsClosed = false;
  if (braces != 0 || brackets != 0) r.bracesBalanced = false;
  return r;
}

TEST(Graphviz, AllOpsGraphIsWellFormedDot) {
  auto g = test::buildAllOpsGraph();
  std::string dot = graphToDot(*g);
  EXPECT_EQ(dot.rfind("digraph \"all_ops\" {\n", 0), 0u);
  EXPECT_EQ(dot.substr(dot.size() - 2), "}\n");
  DotScan scan = scanDot(dot);
  EXPECT_TRUE(scan.stringsClosed);
  EXPECT_TRUE(scan.bracesBalanced);

  std::regex nodeStmt(R"(^  n(\d+) \[label="".*\];$)");
  std::regex edgeStmt(R"(^  n(\d+) -> n(\d+) \[label=""\];$)");
  std::set<int> nodes;
  std::map<std::pair<int, int>, int> edges;
  for (const auto& line : scan.lines) {
    std::smatch m;
    if (std::regex_match(line, m, nodeStmt)) {
      EXPECT_TRUE(nodes.insert(std::stoi(m[1])).second) << "node declared twice: " << line;
    } else if (std::regex_match(line, m, edgeStmt)) {
      ++edges[{std::stoi(m[1]), std::stoi(m[2])}];
    }
  }
  // One dot node per op, one edge per operand, from its producer to its user.
  EXPECT_EQ(nodes.size(), g->size());
  std::map<const Node*, int> index;
  for (size_t i = 0; i < g->size(); ++i) index[g->nodes()[i].get()] = static_cast<int>(i);
  std::map<std::pair<int, int>, int> want;
  for (size_t i = 0; i < g->size(); ++i)
    for (const Value* o : g->nodes()[i]->operands()) ++want[{index[o->def()], static_cast<int>(i)}];
  EXPECT_EQ(edges, want);
}

TEST(Graphviz, LabelsShowOpNameTypeAndRoles) {
  auto g = parseGraph(
      "graph @g {\n"
      "  %x = input() : f32[2,3]\n"
      "  %c = constant() {value=[1.0]} : f32[]\n"
      "  %y = softmax(%x) {axis=0} : f32[2,3]\n"
      "  %z = mul(%y, %c) : f32[2,3]\n"
      "  return %z\n"
      "}\n");
  std::string dot = graphToDot(*g);
  EXPECT_NE(dot.find("  n0 [label=\"input\\n%x : f32[2,3]\", shape=invhouse"), std::string::npos)
      << dot;
  EXPECT_NE(dot.find("  n1 [label=\"constant\\nvalue=[1.0]\\n%c : f32[]\", fillcolor=lightgrey"),
            std::string::npos)
      << dot;
  EXPECT_NE(dot.find("  n2 [label=\"softmax\\naxis=0\\n%y : f32[2,3]\"];"), std::string::npos)
      << dot;
  EXPECT_NE(dot.find("  n3 [label=\"mul\\n%z : f32[2,3]\\n-> output 0\", fillcolor=palegreen, "
                     "peripheries=2];"),
            std::string::npos)
      << dot;
  EXPECT_NE(dot.find("  n0 -> n2 [label=\"f32[2,3]\"];"), std::string::npos) << dot;
  EXPECT_NE(dot.find("  n1 -> n3 [label=\"f32[]\"];"), std::string::npos) << dot;
}

TEST(Graphviz, EscapesQuotesBackslashesAndControlBytes) {
  auto g = parseGraph(
      "graph @\"a \\\"b\\\"\" {\n"
      "  %\"q\\\"\\\\\\n\" = input() {role=\"x\\\"y\"} : f32[1]\n"
      "  return %\"q\\\"\\\\\\n\"\n"
      "}\n");
  std::string dot = graphToDot(*g);
  EXPECT_EQ(dot.rfind("digraph \"a \\\"b\\\"\" {", 0), 0u) << dot;
  // The label shows the name as the text format writes it, escaped once more for dot.
  EXPECT_NE(dot.find(R"(role=\"x\\\"y\")"), std::string::npos) << dot;
  EXPECT_NE(dot.find(R"(%\"q\\\"\\\\\\n\" : f32[1])"), std::string::npos) << dot;
  DotScan scan = scanDot(dot);
  EXPECT_TRUE(scan.stringsClosed);
  EXPECT_TRUE(scan.bracesBalanced);
}

TEST(Graphviz, LongAttributeListsAreCut) {
  std::string values;
  for (int i = 0; i < 100; ++i) values += (i ? ", " : "") + std::to_string(i) + ".5";
  auto g = parseGraph("graph @g {\n  %c = constant() {value=[" + values +
                      "]} : f32[100]\n  return %c\n}\n");
  std::string dot = graphToDot(*g);
  EXPECT_NE(dot.find("...\\n%c : f32[100]"), std::string::npos) << dot;
  EXPECT_EQ(dot.find("99.5"), std::string::npos);
}

TEST(Graphviz, DotAcceptsTheOutputWhenInstalled) {
  if (std::system("dot -V > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "graphviz 'dot' is not installed";
  auto dir = std::filesystem::temp_directory_path();
  auto in = dir / "irio_graphviz_test.dot";
  auto out = dir / "irio_graphviz_test.svg";
  std::ofstream(in) << graphToDot(*test::buildAllOpsGraph());
  std::string cmd = "dot -Tsvg " + in.string() + " -o " + out.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_GT(std::filesystem::file_size(out), 1000u);
  std::filesystem::remove(in);
  std::filesystem::remove(out);
}

}  // namespace
}  // namespace tgc
