// `tgc --help` and `tgc <command> --help`: complete (every command and option described, exit
// status and examples given) and accurate (the examples run).
#include <gtest/gtest.h>

#include <sstream>

#include "runtime/safetensors.h"
#include "tests/tools/tool_test_util.h"

namespace tgc {
namespace {

using testing::runTgc;
using testing::TempDir;

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The lines of the section that starts with `title` (e.g. "Options:") up to a blank line.
std::vector<std::string> section(const std::string& help, const std::string& title) {
  std::vector<std::string> all = lines(help), out;
  auto it = std::find(all.begin(), all.end(), title);
  if (it == all.end()) return out;
  for (++it; it != all.end() && !it->empty(); ++it) out.push_back(*it);
  return out;
}

// Entries of a CLI11 listing ("  name  description", long names wrap the description onto
// the next line) whose description is missing.
std::vector<std::string> undescribed(const std::vector<std::string>& entries) {
  std::vector<std::string> bad;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& l = entries[i];
    if (l.size() < 3 || l[2] == ' ') continue;  // a continuation line
    size_t gap = l.find("  ", 2);
    bool same_line = gap != std::string::npos && l.find_first_not_of(' ', gap) != std::string::npos;
    bool next_line = i + 1 < entries.size() && entries[i + 1].rfind(std::string(20, ' '), 0) == 0 &&
                     entries[i + 1].find_first_not_of(' ') != std::string::npos;
    if (!same_line && !next_line) bad.push_back(l);
  }
  return bad;
}

std::vector<std::string> subcommands() {
  auto r = runTgc({"--help"});
  std::vector<std::string> names;
  for (const std::string& l : section(r.out, "Subcommands:")) {
    std::istringstream in(l);
    std::string name;
    in >> name;
    if (!name.empty()) names.push_back(name);
  }
  return names;
}

TEST(HelpTest, TopLevelListsEveryCommandWithADescription) {
  auto r = runTgc({"--help"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Usage: tgc [OPTIONS] SUBCOMMAND"), std::string::npos) << r.out;
  std::vector<std::string> cmds = subcommands();
  for (const char* required : {"compile", "opt", "run"})
    EXPECT_NE(std::find(cmds.begin(), cmds.end(), required), cmds.end()) << required;
  EXPECT_EQ(undescribed(section(r.out, "Subcommands:")), std::vector<std::string>{});
  for (const char* part : {"tgc <command> --help", "Files:", ".safetensors",
                           "Examples:", "Exit status: 0 on success; 1 when a command fails"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part;

  auto v = runTgc({"--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.out, "tgc 0.1.0\n");
}

TEST(HelpTest, EveryCommandHasCompleteHelp) {
  std::vector<std::string> cmds = subcommands();
  ASSERT_FALSE(cmds.empty());
  for (const std::string& cmd : cmds) {
    SCOPED_TRACE("tgc " + cmd + " --help");
    auto r = runTgc({cmd, "--help"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_NE(r.out.find("Usage: tgc " + cmd + " [OPTIONS]"), std::string::npos) << r.out;
    EXPECT_GT(section(r.out, "Options:").size(), 1u) << r.out;
    EXPECT_EQ(undescribed(section(r.out, "Options:")), std::vector<std::string>{});
    EXPECT_EQ(undescribed(section(r.out, "Positionals:")), std::vector<std::string>{});
    EXPECT_NE(r.out.find("Exit status"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("Examples"), std::string::npos) << "no examples:\n" << r.out;
  }
}

TEST(HelpTest, RunHelpDescribesEveryOption) {
  auto r = runTgc({"run", "--help"});
  ASSERT_EQ(r.exit_code, 0);
  for (const char* part :
       {"-i,--inputs", "-o,--outputs", "--random-inputs SEED", "--int-range LO,HI=0,10", "--dist",
        "uniform,normal", "--print", "--f64", "Inputs:", "Outputs:", "mt19937_64",
        "uniform in [-1, 1)", "standard normal", "Exit status: 0 on success; 1"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
}

// The examples of the top-level help and of `tgc run --help` run as written: the model files
// from the source tree, stand-ins for the graph and tensor files (the interpreter would take
// minutes on a whole compiled Transformer, so opt and run get a small graph).
TEST(HelpTest, ExamplesWork) {
  TempDir dir;
  const std::string graph = dir.write("graph.tir", R"(graph @attn {
  %x = input() : f32[2,3]
  %y = softmax(%x) : f32[2,3]
  %z = add(%y, %y) : f32[2,3]
  return %z
}
)");
  TensorFile in;
  in.tensors.emplace("x", Tensor({DType::f32, {2, 3}}, {1, 2, 3, 4, 5, 6}));
  writeSafetensors(dir.file("in.safetensors"), in);
  const std::string models = std::string(TGC_SOURCE_DIR) + "/models/";
  std::vector<std::string> cmds = subcommands();

  std::string help = runTgc({"--help"}).out + runTgc({"run", "--help"}).out;
  int ran = 0;
  for (const std::string& l : lines(help)) {
    std::istringstream words(l);
    std::vector<std::string> args;
    std::string w;
    words >> w;
    if (w != "tgc" || !(words >> w)) continue;
    if (std::find(cmds.begin(), cmds.end(), w) == cmds.end()) continue;
    const bool compile = w == "compile";
    args.push_back(w);
    while (words >> w) {
      if (w.rfind("models/", 0) == 0)
        w = models + w.substr(7);
      else if (w.ends_with(".tir"))
        w = compile ? dir.file(w) : graph;
      else if (w.ends_with(".safetensors") || w.ends_with(".json"))
        w = dir.file(w);
      args.push_back(w);
    }
    auto r = runTgc(args);
    EXPECT_EQ(r.exit_code, 0) << l << "\n" << r.err;
    ++ran;
  }
  EXPECT_GE(ran, 5);
}

}  // namespace
}  // namespace tgc
