// The bad-input catalogue: every kind of broken input given to the `tgc` program ends with a
// clear message on stderr and exit status 1, never a crash or a usage code.
#include <gtest/gtest.h>

#include <random>

#include "runtime/safetensors.h"
#include "tests/tools/tool_test_util.h"

namespace tgc {
namespace {

using testing::failsCleanly;
using testing::runTgc;
using testing::TempDir;

// Each substring must appear in stderr.
void expectStderr(const testing::ProcessResult& r, const std::vector<std::string>& needles) {
  for (const std::string& n : needles)
    EXPECT_NE(r.err.find(n), std::string::npos) << "missing: " << n << "\nstderr:\n" << r.err;
}

struct IrCase {
  const char* name;
  const char* text;
  std::vector<std::string> expected;  // in stderr, after "<file>"
};

// Malformed Graph IR text: the diagnostic points at the line and column, shows the line and a
// caret. Both commands that read IR (run, opt) must report it the same way.
const IrCase kIrCases[] = {
    {"syntax",
     "graph @g {\n  %x = input( : f32[2]\n  return %x\n}\n",
     {":2:15: error: expected an operand", "  %x = input( : f32[2]\n", "\n              ^"}},
    {"wrong_arity",
     "graph @g {\n  %x = input() : f32[2]\n  %y = add(%x) : f32[2]\n  return %y\n}\n",
     {":3:8: error: 'add' takes 2 operands, got 1", "       ^"}},
    {"unknown_op",
     "graph @g {\n  %x = input() : f32[2]\n  %y = frobnicate(%x) : f32[2]\n  return %y\n}\n",
     {":3:8: error: unknown op 'frobnicate'"}},
    {"shape_mismatch",
     "graph @g {\n  %x = input() : f32[2]\n  %y = input() : f32[3]\n"
     "  %z = add(%x, %y) : f32[3]\n  return %z\n}\n",
     {":4:8: error:", "f32[2]", "f32[3]", "do not broadcast"}},
    {"declared_type_lies",
     "graph @g {\n  %x = input() : f32[2]\n  %y = relu(%x) : f32[3]\n  return %y\n}\n",
     {":3:", "declared result type f32[3]", "f32[2]"}},
    {"undefined_value",
     "graph @g {\n  %x = input() : f32[2]\n  %y = relu(%nope) : f32[2]\n  return %y\n}\n",
     {":3:13: error: unknown value %nope"}},
    {"bad_attribute",
     "graph @g {\n  %x = input() : f32[2,3]\n  %y = softmax(%x) {axis=5} : f32[2,3]\n"
     "  return %y\n}\n",
     {":3:", "axis 5 is out of range"}},
    {"empty_file", "", {":1:1: error:"}},
    {"unterminated", "graph @g {\n  %x = input() : f32[2]\n  return %x\n", {"error:"}},
    {"binary_garbage",
     "\x7f"
     "ELF\x02\x01\x01\0\0\xff\xfe\n\x01",
     {":1:1: error:"}},
};

// gtest shows parameters in test names; the case name is the readable part.
void PrintTo(const IrCase& c, std::ostream* os) { *os << c.name; }

class BadIrTest : public ::testing::TestWithParam<IrCase> {};

TEST_P(BadIrTest, RunAndOptReportItAndExitOne) {
  const IrCase& c = GetParam();
  TempDir dir;
  const std::string path = dir.write(std::string(c.name) + ".tir", c.text);
  for (const char* cmd : {"run", "opt"}) {
    std::vector<std::string> args{cmd, path};
    if (std::string(cmd) == "run") args.insert(args.end(), {"--random-inputs", "1"});
    auto r = runTgc(args);
    EXPECT_TRUE(failsCleanly(r)) << testing::commandLine(args);
    EXPECT_EQ(r.err.rfind(path, 0), 0u) << "stderr should start with the file name:\n" << r.err;
    expectStderr(r, c.expected);
  }
}

std::string caseName(const ::testing::TestParamInfo<IrCase>& c) { return c.param.name; }
INSTANTIATE_TEST_SUITE_P(Catalogue, BadIrTest, ::testing::ValuesIn(kIrCases), caseName);

TEST(BadInputTest, NonexistentGraphFile) {
  TempDir dir;
  for (const char* cmd : {"run", "opt"}) {
    auto r = runTgc({cmd, dir.file("nope.tir")});
    EXPECT_TRUE(failsCleanly(r)) << cmd;
    expectStderr(r, {dir.file("nope.tir"), "No such file or directory"});
  }
}

TEST(BadInputTest, MalformedJsonGraph) {
  TempDir dir;
  const std::string path = dir.write("g.json", "{\"name\": ");
  auto r = runTgc({"run", path});
  EXPECT_TRUE(failsCleanly(r));
  expectStderr(r, {path, "error:"});
}

constexpr const char* kGraph = R"(graph @g {
  %x = input() : f32[2,3]
  %w = input() : f32[3,2]
  %y = matmul(%x, %w) : f32[2,2]
  return %y
}
)";

TensorFile goodInputs() {
  TensorFile in;
  in.tensors.emplace("x", Tensor({DType::f32, {2, 3}}, {1, 2, 3, 4, 5, 6}));
  in.tensors.emplace("w", Tensor({DType::f32, {3, 2}}, {1, 0, 0, 1, 1, 1}));
  return in;
}

// Runs kGraph on an inputs file with the given bytes.
testing::ProcessResult runOnInputBytes(const TempDir& dir, std::string_view bytes) {
  const std::string graph = dir.write("g.tir", kGraph);
  const std::string in = dir.write("in.safetensors", bytes);
  return runTgc({"run", graph, "--inputs", in, "--outputs", dir.file("out.safetensors")});
}

TEST(BadInputTest, TruncatedSafetensors) {
  TempDir dir;
  const std::string good = encodeSafetensors(goodInputs());
  for (size_t cut : {size_t{0}, size_t{5}, size_t{20}, good.size() - 1}) {
    auto r = runOnInputBytes(dir, good.substr(0, cut));
    EXPECT_TRUE(failsCleanly(r)) << "cut at " << cut;
    expectStderr(r, {dir.file("in.safetensors") + ": error: invalid safetensors file: "});
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.safetensors")));
}

TEST(BadInputTest, SafetensorsHeaderLiesAboutSizes) {
  TempDir dir;
  // The header claims a gigabyte; the file holds 24 bytes.
  std::string header =
      R"({"x": {"dtype": "F32", "shape": [250000000], "data_offsets": [0, 1000000000]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  bytes += header + std::string(24, '\0');
  auto r = runOnInputBytes(dir, bytes);
  EXPECT_TRUE(failsCleanly(r));
  expectStderr(r, {"tensor 'x': data_offsets [0,1000000000] run past the end of the data "
                   "section (24 bytes)"});

  // The length prefix claims more header than there is file.
  std::string liar = encodeSafetensors(goodInputs());
  liar[0] = static_cast<char>(0xF0);
  liar[1] = static_cast<char>(0x0F);
  r = runOnInputBytes(dir, liar);
  EXPECT_TRUE(failsCleanly(r));
  expectStderr(r, {"header length 4080 runs past the end of the file"});
}

TEST(BadInputTest, NotASafetensorsFile) {
  TempDir dir;
  auto r = runOnInputBytes(dir, "this is a text file, not tensors\n");
  EXPECT_TRUE(failsCleanly(r));
  expectStderr(r, {"invalid safetensors file: header length", "larger than the limit"});

  const std::string graph = dir.write("g.tir", kGraph);
  r = runTgc({"run", graph, "--inputs", dir.file("missing.safetensors")});
  EXPECT_TRUE(failsCleanly(r));
  expectStderr(r, {dir.file("missing.safetensors") + ": error: cannot open: No such file"});

  r = runTgc({"run", graph, "--inputs", dir.path()});
  EXPECT_TRUE(failsCleanly(r));
  expectStderr(r, {dir.path() + ": error: cannot read: not a regular file"});
}

TEST(BadInputTest, MissingInputsAreListed) {
  TempDir dir;
  const std::string graph = dir.write("g.tir", kGraph);
  auto r = runTgc({"run", graph});
  EXPECT_TRUE(failsCleanly(r));
  expectStderr(r, {"tgc run: error: graph @g has 2 inputs not given (no --inputs file): "
                   "%x (f32[2,3]), %w (f32[3,2]); give them in --inputs or use --random-inputs"});

  TensorFile only_x;
  only_x.tensors.emplace("x", goodInputs().tensors.at("x"));
  writeSafetensors(dir.file("x.safetensors"), only_x);
  r = runTgc({"run", graph, "--inputs", dir.file("x.safetensors")});
  EXPECT_TRUE(failsCleanly(r));
  expectStderr(
      r, {"graph @g has 1 input not given (" + dir.file("x.safetensors") + "): %w (f32[3,2])"});
}

TEST(BadInputTest, MistypedInputsNameBothTypes) {
  TempDir dir;
  TensorFile in = goodInputs();
  in.tensors.at("x") = Tensor({DType::f64, {2, 3}});
  in.tensors.at("w") = Tensor({DType::f32, {2, 3}});
  const std::string path = dir.file("in.safetensors");
  auto r = runOnInputBytes(dir, encodeSafetensors(in));
  EXPECT_TRUE(failsCleanly(r));
  expectStderr(r, {"input %x: the graph declares f32[2,3] but " + path + " holds f64[2,3]",
                   "input %w: the graph declares f32[3,2] but " + path + " holds f32[2,3]"});
  // --f64 accepts another float dtype, but never another shape.
  const std::string graph = dir.file("g.tir");
  r = runTgc({"run", graph, "--inputs", path, "--f64"});
  EXPECT_TRUE(failsCleanly(r));
  EXPECT_EQ(r.err.find("input %x"), std::string::npos) << r.err;
  expectStderr(r, {"input %w: the graph declares f32[3,2]"});
}

TEST(BadInputTest, FailingOpsAtRunTime) {
  TempDir dir;
  const std::string gather = dir.write("gather.tir", R"(graph @g {
  %t = input() : f32[4,2]
  %i = input() : i64[3]
  %y = gather(%t, %i) : f32[3,2]
  return %y
}
)");
  auto r = runTgc({"run", gather, "--random-inputs", "1", "--int-range", "4,9"});
  EXPECT_TRUE(failsCleanly(r));
  expectStderr(r, {"tgc run: error: gather %y", "out of range"});

  const std::string div = dir.write("div.tir", R"(graph @g {
  %a = input() : i32[2]
  %b = input() : i32[2]
  %c = div(%a, %b) : i32[2]
  return %c
}
)");
  r = runTgc({"run", div, "--random-inputs", "1", "--int-range", "0,1"});
  EXPECT_TRUE(failsCleanly(r));
  expectStderr(r, {"div %c", "division by zero"});
}

TEST(BadInputTest, BadRunOptions) {
  TempDir dir;
  const std::string graph = dir.write("g.tir", kGraph);
  for (const char* range : {"5,5", "9,2", "a,b", "3", "1,2,3", ""}) {
    auto r = runTgc({"run", graph, "--random-inputs", "1", "--int-range", range});
    EXPECT_TRUE(failsCleanly(r)) << range;
    expectStderr(r, {"--int-range: expected LO,HI with integers LO < HI"});
  }
  const std::string ints = dir.write("i32.tir", R"(graph @g {
  %a = input() : i32[2]
  return %a
}
)");
  auto r = runTgc({"run", ints, "--random-inputs", "1", "--int-range", "0,4294967296"});
  EXPECT_TRUE(failsCleanly(r));
  expectStderr(r, {"--int-range [0, 4294967296) does not fit input %a of type i32[2]"});
}

TEST(BadInputTest, UnwritableOutput) {
  TempDir dir;
  const std::string graph = dir.write("g.tir", kGraph);
  writeSafetensors(dir.file("in.safetensors"), goodInputs());
  auto r = runTgc({"run", graph, "--inputs", dir.file("in.safetensors"), "--outputs",
                   dir.file("no/such/dir/out.safetensors")});
  EXPECT_TRUE(failsCleanly(r));
  expectStderr(r, {dir.file("no/such/dir/out.safetensors") + ": error: cannot create",
                   "No such file or directory"});
}

// Random edits of a valid graph and of a valid inputs file: whatever the damage, tgc either
// runs or refuses with exit 1; it never dies of a signal.
TEST(BadInputTest, MutatedInputsNeverCrash) {
  TempDir dir;
  const std::string good_graph = R"(graph @m {
  %x = input() : f32[2,3]
  %w = input() {role="param"} : f32[3,2]
  %y = matmul(%x, %w) : f32[2,2]
  %s = softmax(%y) {axis=1} : f32[2,2]
  %c = constant() {value=[0.5, 1.5]} : f32[2]
  %z = mul(%s, %c) : f32[2,2]
  return %z, %y
}
)";
  const std::string good_inputs = encodeSafetensors(goodInputs());
  const std::string alphabet = "%@{}()[]=:,.\"-0123456789abcfgimnprstuxyz \n";
  std::mt19937_64 rng(2024);
  int ran = 0, refused = 0;
  for (int iter = 0; iter < 120; ++iter) {
    std::string g = good_graph, in = good_inputs;
    bool mutate_graph = iter % 3 != 2;
    std::string& s = mutate_graph ? g : in;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
      size_t pos = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s.erase(pos, 1 + rng() % 4);
          break;
        case 1:
          s.insert(pos, 1, alphabet[rng() % alphabet.size()]);
          break;
        default:
          s[pos] =
              mutate_graph ? alphabet[rng() % alphabet.size()] : static_cast<char>(rng() & 0xFF);
      }
    }
    const std::string gp = dir.write("m.tir", g), ip = dir.write("m.safetensors", in);
    auto r = runTgc({"run", gp, "--inputs", ip, "--random-inputs", "3"});
    ASSERT_EQ(r.signal, 0) << "crashed on:\n" << g << "\nstderr:\n" << r.err;
    ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.exit_code << "\n" << g << r.err;
    if (r.exit_code == 1) {
      ++refused;
      EXPECT_NE(r.err.find("error:"), std::string::npos) << r.err;
    } else {
      ++ran;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(ran, 0);
}

// `tgc compile` on broken model files (skipped until the command is registered).
bool haveCommand(const std::string& cmd) { return testing::runTgc({cmd, "--help"}).exit_code == 0; }

TEST(BadInputTest, CompileRefusesBrokenModelFiles) {
  if (!haveCommand("compile")) GTEST_SKIP() << "tgc has no compile command in this build";
  TempDir dir;
  auto r = runTgc({"compile", dir.file("nope.tg")});
  EXPECT_TRUE(failsCleanly(r));
  expectStderr(r, {dir.file("nope.tg") + ": error:"});

  const std::string garbage = dir.write("garbage.tg", std::string("\x11\xfe\x00model {\n", 11));
  r = runTgc({"compile", garbage});
  EXPECT_TRUE(failsCleanly(r));
  expectStderr(r, {garbage + ":1:"});
}

// Random edits of the real Transformer spec: compile either succeeds or refuses with exit 1.
TEST(BadInputTest, CompileOfMutatedModelNeverCrashes) {
  if (!haveCommand("compile")) GTEST_SKIP() << "tgc has no compile command in this build";
  const std::string models = std::string(TGC_SOURCE_DIR) + "/models";
  const std::string good = testing::readWholeFile(models + "/transformer.tg");
  ASSERT_FALSE(good.empty());
  TempDir dir;
  const std::string alphabet = "{}()[]=:,.<>+-*/@%0123456789abcdefgilmnoprstxyz \n";
  std::mt19937_64 rng(77);
  int refused = 0;
  for (int iter = 0; iter < 60; ++iter) {
    std::string m = good;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
      size_t pos = rng() % m.size();
      if (rng() % 2)
        m.erase(pos, 1 + rng() % 6);
      else
        m.insert(pos, 1, alphabet[rng() % alphabet.size()]);
    }
    const std::string path = dir.write("t.tg", m);
    auto r = runTgc(
        {"compile", path, "--preset", "tiny", "--lib", models + "/lib", "-o", dir.file("out.tir")});
    ASSERT_EQ(r.signal, 0) << "crashed; stderr:\n" << r.err;
    ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.exit_code << "\n" << r.err;
    if (r.exit_code == 1) {
      ++refused;
      EXPECT_NE(r.err.find("error:"), std::string::npos) << r.err;
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(BadInputTest, UsageErrorsAreReportedNotCrashes) {
  // Command-line mistakes exit with CLI11's usage codes (>= 100) and a hint, never a signal.
  for (std::vector<std::string> args :
       std::vector<std::vector<std::string>>{{"run"},
                                             {"run", "g.tir", "--bogus"},
                                             {"run", "g.tir", "--random-inputs", "abc"},
                                             {"run", "g.tir", "--dist", "cauchy"},
                                             {"frobnicate"},
                                             {}}) {
    auto r = testing::runTgc(args);
    EXPECT_EQ(r.signal, 0) << testing::commandLine(args);
    EXPECT_GE(r.exit_code, 100) << testing::commandLine(args) << "\n" << r.err;
    EXPECT_FALSE(r.err.empty()) << testing::commandLine(args);
  }
}

}  // namespace
}  // namespace tgc
