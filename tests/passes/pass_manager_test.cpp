#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "ir/builder.h"
#include "passes/pass_manager.h"
#include "pass_test_util.h"

using namespace tgc;
using namespace tgc::pass_test;

namespace {

// x, an unused relu, two identical adds: canonicalize sees nothing, cse merges the adds,
// dce removes the relu.
constexpr std::string_view kGraph = R"(graph @g {
  %x = input() : f32[2,3]
  %unused = relu(%x) : f32[2,3]
  %a = add(%x, %x) : f32[2,3]
  %b = add(%x, %x) : f32[2,3]
  %y = mul(%a, %b) : f32[2,3]
  return %y
})";

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Test-only passes, registered once.
int g_countdown = 0;
void registerTestPasses() {
  static bool done = [] {
    // Reports a change g_countdown times (renaming the first input each time), then none.
    registerPass({"test-countdown", "changes the graph while a counter lasts",
                  [](Graph& g, PassContext&) {
                    if (g_countdown == 0) return false;
                    --g_countdown;
                    Value* v = g.nodes().front()->result();
                    g.renameValue(v, v->name() + "x");
                    return true;
                  }});
    registerPass({"test-always", "claims a change every time", [](Graph&, PassContext&) { return true; }});
    // Rewires the first binary node's second operand to a value of another type.
    registerPass({"test-break", "breaks the graph and says so", [](Graph& g, PassContext&) {
                    Node* bin = nullptr;
                    Value* other = nullptr;
                    for (const auto& n : g.nodes()) {
                      if (n->operands().size() == 2 && !bin) bin = n.get();
                      if (n->result()->type().shape == Shape{7}) other = n->result();
                    }
                    bin->setOperand(1, other);
                    return true;
                  }});
    registerPass({"test-break-quietly", "breaks the graph and reports no change",
                  [](Graph& g, PassContext& ctx) {
                    findPass("test-break")->run(g, ctx);
                    return false;
                  }});
    registerPass({"test-throw", "throws an IRError", [](Graph&, PassContext&) -> bool {
                    throw IRError("no rule for frobnicate %x");
                  }});
    return true;
  }();
  (void)done;
}

class PassManagerTest : public ::testing::Test {
 protected:
  void SetUp() override { registerTestPasses(); }
};

}  // namespace

TEST_F(PassManagerTest, ParsesPipelinesAndPrintsThemBack) {
  EXPECT_EQ(parsePipeline("").steps.size(), 0u);
  EXPECT_EQ(parsePipeline("  ").steps.size(), 0u);
  Pipeline p = parsePipeline(" canonicalize , fixpoint( cse,dce ) ,constant-fold");
  ASSERT_EQ(p.steps.size(), 3u);
  EXPECT_EQ(p.steps[0].pass, "canonicalize");
  EXPECT_TRUE(p.steps[1].isFixpoint());
  ASSERT_EQ(p.steps[1].body.size(), 2u);
  EXPECT_EQ(p.steps[1].body[1].pass, "dce");
  EXPECT_EQ(p.str(), "canonicalize,fixpoint(cse,dce),constant-fold");
  EXPECT_EQ(parsePipeline("fixpoint(cse,fixpoint(dce))").str(), "fixpoint(cse,fixpoint(dce))");
  EXPECT_TRUE(p.contains("dce"));
  EXPECT_FALSE(p.contains("fixpoint"));
}

// An alias stands for its whole pipeline where it appears, fixpoint groups included.
TEST_F(PassManagerTest, AliasesSpliceTheirPipeline) {
  const PipelineAliases aliases{{"default", parsePipeline("cse,fixpoint(canonicalize,dce)")},
                                {"none", Pipeline{}}};
  EXPECT_EQ(parsePipeline("constant-fold,default,dce", aliases).str(),
            "constant-fold,cse,fixpoint(canonicalize,dce),dce");
  EXPECT_EQ(parsePipeline("fixpoint(default)", aliases).str(), "fixpoint(cse,fixpoint(canonicalize,dce))");
  EXPECT_EQ(parsePipeline("none", aliases).steps.size(), 0u);
  EXPECT_THROW(parsePipeline("default"), PassError);  // no alias: an unknown pass
}

TEST_F(PassManagerTest, PipelineErrorsNameTheProblemAndTheKnownPasses) {
  auto message = [](std::string_view text) {
    try {
      parsePipeline(text);
    } catch (const PassError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string unknown = message("cse,frobnicate");
  EXPECT_NE(unknown.find("column 5: unknown pass 'frobnicate'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("canonicalize, constant-fold, cse, dce"), std::string::npos) << unknown;
  EXPECT_NE(message("fixpoint(cse").find("expected ')' to close fixpoint("), std::string::npos);
  EXPECT_NE(message("cse,,dce").find("column 5: expected a pass name, found ','"), std::string::npos);
  EXPECT_NE(message("cse,").find("expected a pass name at the end"), std::string::npos);
  EXPECT_NE(message("fixpoint()").find("fixpoint() needs at least one pass"), std::string::npos);
  EXPECT_NE(message("cse)").find("unexpected ')'"), std::string::npos);
  // "fixpoint" without parentheses is a pass name, and there is no such pass.
  EXPECT_NE(message("fixpoint").find("unknown pass 'fixpoint'"), std::string::npos);
}

TEST_F(PassManagerTest, RunsPassesInOrderAndReportsChange) {
  auto g = parse(kGraph);
  PassManager pm(parsePipeline("canonicalize,cse,dce"));
  EXPECT_TRUE(pm.run(*g));
  ASSERT_EQ(pm.history().size(), 3u);
  EXPECT_EQ(pm.history()[0].pass, "canonicalize");
  EXPECT_FALSE(pm.history()[0].changed);
  EXPECT_TRUE(pm.history()[1].changed);
  EXPECT_TRUE(pm.history()[2].changed);
  EXPECT_EQ(printGraph(*g), R"(graph @g {
  %x = input() : f32[2,3]
  %a = add(%x, %x) : f32[2,3]
  %y = mul(%a, %a) : f32[2,3]
  return %y
}
)");
  PassManager again(parsePipeline("canonicalize,cse,dce"));
  EXPECT_FALSE(again.run(*g));
}

TEST_F(PassManagerTest, FixpointRepeatsUntilARoundChangesNothing) {
  auto g = parse(kGraph);
  g_countdown = 3;
  PassManager pm(parsePipeline("fixpoint(test-countdown,dce)"));
  EXPECT_TRUE(pm.run(*g));
  // Rounds 1-3 change (countdown; dce only in round 1), round 4 changes nothing.
  ASSERT_EQ(pm.history().size(), 8u);
  EXPECT_EQ(pm.history()[6].pass, "test-countdown");
  EXPECT_EQ(pm.history()[6].iteration, 4);
  EXPECT_FALSE(pm.history()[6].changed);
  EXPECT_TRUE(pm.history()[1].changed);   // dce, round 1
  EXPECT_FALSE(pm.history()[3].changed);  // dce, round 2
  EXPECT_EQ(g->nodes().front()->result()->name(), "xxxx");

  g_countdown = 0;
  PassManager none(parsePipeline("fixpoint(test-countdown)"));
  EXPECT_FALSE(none.run(*g));
  EXPECT_EQ(none.history().size(), 1u);
}

TEST_F(PassManagerTest, FixpointThatNeverSettlesIsAnError) {
  auto g = parse(kGraph);
  PassManagerOptions o;
  o.max_fixpoint_iterations = 5;
  PassManager pm(parsePipeline("fixpoint(dce,test-always)"), o);
  try {
    pm.run(*g);
    FAIL() << "expected an error";
  } catch (const PassError& e) {
    EXPECT_STREQ(e.what(), "fixpoint(dce,test-always) did not reach a fixed point after 5 rounds");
  }
  EXPECT_EQ(pm.history().size(), 10u);
}

TEST_F(PassManagerTest, VerificationFailureNamesThePassAndTheValue) {
  auto g = parse(R"(graph @g {
  %x = input() : f32[2,3]
  %v = input() : f32[7]
  %y = add(%x, %x) : f32[2,3]
  return %y, %v
})");
  PassManager pm(parsePipeline("dce,test-break,cse"));
  try {
    pm.run(*g);
    FAIL() << "expected an error";
  } catch (const PassError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("verification failed after test-break: add %y (f32[2,3], f32[7]): ", 0), 0u)
        << msg;
  }
  // The pipeline stopped at the broken pass: cse never ran.
  ASSERT_EQ(pm.history().size(), 2u);
  EXPECT_EQ(pm.history().back().pass, "test-break");
}

TEST_F(PassManagerTest, VerifiesOnlyAfterPassesThatChangedTheGraph) {
  auto g = parse(R"(graph @g {
  %x = input() : f32[2,3]
  %v = input() : f32[7]
  %y = add(%x, %x) : f32[2,3]
  return %y, %v
})");
  // The quiet breakage goes unnoticed by the pass manager, by design, until a later pass
  // changes something and the graph is checked again.
  PassManager quiet(parsePipeline("test-break-quietly"));
  EXPECT_FALSE(quiet.run(*g));
  auto h = parse(kGraph);
  PassManager noVerify(parsePipeline("cse"), PassManagerOptions{.verify_each = false});
  EXPECT_TRUE(noVerify.run(*h));
}

TEST_F(PassManagerTest, RejectsAnInvalidInputGraph) {
  Graph g;
  Builder b(g);
  Value* x = b.input("x", {DType::f32, {2}});
  Value* v = b.input("v", {DType::f32, {3}});
  Value* y = b.neg(x, "y");
  g.setOutputs({y});
  g.nodes().back()->setOperand(0, v);
  PassManager pm(parsePipeline("dce"));
  try {
    pm.run(g);
    FAIL() << "expected an error";
  } catch (const PassError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("verification failed on the input graph: neg %y", 0), 0u)
        << e.what();
  }
}

TEST_F(PassManagerTest, AThrowingPassIsReportedByName) {
  auto g = parse(kGraph);
  PassManager pm(parsePipeline("cse,test-throw"));
  try {
    pm.run(*g);
    FAIL() << "expected an error";
  } catch (const PassError& e) {
    EXPECT_STREQ(e.what(), "pass test-throw failed: no rule for frobnicate %x");
  }
}

TEST_F(PassManagerTest, StopAfterEndsThePipelineAtThatPass) {
  auto g = parse(kGraph);
  PassManager pm(parsePipeline("canonicalize,cse,dce"), PassManagerOptions{.stop_after = "cse"});
  EXPECT_TRUE(pm.run(*g));
  EXPECT_TRUE(pm.stopped());
  ASSERT_EQ(pm.history().size(), 2u);
  EXPECT_NE(g->findValue("unused"), nullptr);  // dce did not run
  EXPECT_EQ(g->findValue("b"), nullptr);       // cse did

  // Inside a fixpoint group it stops at the first run, mid-round.
  g_countdown = 5;
  PassManager fp(parsePipeline("fixpoint(test-countdown,dce),cse"),
                 PassManagerOptions{.stop_after = "test-countdown"});
  fp.run(*g);
  EXPECT_EQ(fp.history().size(), 1u);
  EXPECT_EQ(g_countdown, 4);
}

TEST_F(PassManagerTest, OptionsMustNamePassesInThePipeline) {
  try {
    PassManager pm(parsePipeline("cse,dce"), PassManagerOptions{.stop_after = "canonicalize"});
    FAIL() << "expected an error";
  } catch (const PassError& e) {
    EXPECT_STREQ(e.what(), "stop-after: pass 'canonicalize' is not in the pipeline 'cse,dce'");
  }
  EXPECT_THROW(PassManager(parsePipeline("cse"), PassManagerOptions{.print_after = {"dce"}}),
               PassError);
}

TEST_F(PassManagerTest, DumpDirWritesOneNumberedFilePerPassRun) {
  auto dir = std::filesystem::path(::testing::TempDir()) / "tgc-dump-test" / "nested";
  std::filesystem::remove_all(dir.parent_path());
  auto g = parse(kGraph);
  std::string input = printGraph(*g);
  PassManager pm(parsePipeline("canonicalize,cse,dce"), PassManagerOptions{.dump_dir = dir.string()});
  pm.run(*g);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"00-input.tir", "01-canonicalize.tir", "02-cse.tir",
                                             "03-dce.tir"}));
  EXPECT_EQ(slurp(dir / "00-input.tir"), input);
  EXPECT_EQ(slurp(dir / "01-canonicalize.tir"), input);
  EXPECT_NE(slurp(dir / "02-cse.tir"), input);
  EXPECT_EQ(slurp(dir / "03-dce.tir"), printGraph(*g));
  // Each dump is valid IR text that reads back.
  EXPECT_EQ(printGraph(*parse(slurp(dir / "02-cse.tir"))), slurp(dir / "02-cse.tir"));
  std::filesystem::remove_all(dir.parent_path());
}

TEST_F(PassManagerTest, PrintChangedPrintsOnlyAfterPassesThatChanged) {
  auto g = parse(kGraph);
  std::ostringstream log;
  PassManager pm(parsePipeline("canonicalize,cse,dce"),
                 PassManagerOptions{.print_changed = true, .log = &log});
  pm.run(*g);
  std::string s = log.str();
  EXPECT_EQ(s.find("IR after canonicalize"), std::string::npos) << s;
  size_t cse = s.find("// ----- IR after cse (changed) -----\ngraph @g {\n");
  size_t dce = s.find("// ----- IR after dce (changed) -----\ngraph @g {\n");
  EXPECT_NE(cse, std::string::npos) << s;
  EXPECT_NE(dce, std::string::npos) << s;
  EXPECT_LT(cse, dce);
  // Between the two headers: the graph after cse, with %unused still there.
  EXPECT_NE(s.substr(cse, dce - cse).find("%unused"), std::string::npos);
  EXPECT_EQ(s.substr(dce).find("%unused"), std::string::npos);
}

TEST_F(PassManagerTest, PrintAfterSelectsPassesAndPrintAfterAllShowsEveryRun) {
  auto g = parse(kGraph);
  std::ostringstream log;
  PassManager pm(parsePipeline("canonicalize,cse,dce"),
                 PassManagerOptions{.print_after = {"canonicalize", "dce"}, .log = &log});
  pm.run(*g);
  std::string s = log.str();
  EXPECT_NE(s.find("// ----- IR after canonicalize (unchanged) -----"), std::string::npos) << s;
  EXPECT_EQ(s.find("IR after cse"), std::string::npos) << s;
  EXPECT_NE(s.find("// ----- IR after dce (changed) -----"), std::string::npos) << s;

  // With print-changed as well, a selected pass prints only when it changed something.
  auto g2 = parse(kGraph);
  std::ostringstream log2;
  PassManager pm2(parsePipeline("canonicalize,cse,dce"),
                  PassManagerOptions{.print_after = {"canonicalize", "dce"},
                                     .print_changed = true, .log = &log2});
  pm2.run(*g2);
  EXPECT_EQ(log2.str().find("IR after canonicalize"), std::string::npos) << log2.str();
  EXPECT_NE(log2.str().find("IR after dce (changed)"), std::string::npos) << log2.str();

  auto g3 = parse(kGraph);
  std::ostringstream log3;
  g_countdown = 1;
  PassManager pm3(parsePipeline("dce,fixpoint(test-countdown)"),
                  PassManagerOptions{.print_after_all = true, .log = &log3});
  pm3.run(*g3);
  std::string s3 = log3.str();
  EXPECT_NE(s3.find("IR after dce (changed) -----"), std::string::npos) << s3;
  EXPECT_NE(s3.find("IR after test-countdown (changed, round 1) -----"), std::string::npos) << s3;
  EXPECT_NE(s3.find("IR after test-countdown (unchanged, round 2) -----"), std::string::npos) << s3;
}

TEST_F(PassManagerTest, TimePassesPrintsATableWithEveryPassAndATotal) {
  auto g = parse(kGraph);
  std::ostringstream log;
  PassManager pm(parsePipeline("fixpoint(cse,dce)"),
                 PassManagerOptions{.time_passes = true, .log = &log});
  pm.run(*g);
  std::string s = log.str();
  EXPECT_EQ(s.rfind("// ----- pass timing (wall clock) -----\n", 0), 0u) << s;
  EXPECT_NE(s.find("runs"), std::string::npos) << s;
  // cse and dce each ran twice (the second round changed nothing); verify ran twice.
  EXPECT_NE(s.find("      2  "), std::string::npos) << s;
  for (const char* name : {"  cse\n", "  dce\n", "  (verify)\n", "100.0%  total\n"})
    EXPECT_NE(s.find(name), std::string::npos) << name << " missing from\n" << s;
}

TEST_F(PassManagerTest, RegistryListsBuiltinsWithDescriptions) {
  for (const char* name : {"canonicalize", "constant-fold", "cse", "dce"}) {
    const PassInfo* p = findPass(name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_FALSE(p->description.empty());
    EXPECT_EQ(p->description.find('\n'), std::string::npos);
  }
  EXPECT_EQ(findPass("nope"), nullptr);
  auto all = allPasses();
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end(),
                             [](auto* a, auto* b) { return a->name < b->name; }));
}
