// Fused attention on the GPU (runtime/cuda/cuda_attention.h). Without a GPU: the kernels
// compile through NVRTC to PTX for compute_90 and ptxas assembles them for sm_90 with no
// warning and no spill (their register counts are printed). With a GPU: fused_attention and
// fused_attention_grad against the reference interpreter at T = 1, 7, 64, 257, 1024, with
// causal and broadcast masks, fully masked rows, dropout on and off, f32 and f64.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdio>
#include <regex>

#include "codegen/cuda/nvrtc.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "runtime/cuda/cuda_attention.h"
#include "runtime/cuda/cuda_executable.h"
#include "tests/runtime/cuda_test_util.h"
#include "tests/runtime/exec_test_util.h"

using namespace tgc;
using namespace tgc::runtime::cuda;

namespace {

// ptxas -v's output for `ptx` (assembled for sm_90) and its exit status.
std::pair<int, std::string> ptxasVerbose(const std::string& ptxas, const std::string& ptx) {
  const std::string dir = ::testing::TempDir();
  const std::string in = dir + "tgc_attention.ptx", log = dir + "tgc_attention.log";
  if (FILE* f = std::fopen(in.c_str(), "w")) {
    std::fwrite(ptx.data(), 1, ptx.size(), f);
    std::fclose(f);
  }
  const int status = std::system(
      (ptxas + " -arch=sm_90 -v --warn-on-spills -o /dev/null " + in + " > " + log + " 2>&1")
          .c_str());
  std::string out;
  if (FILE* f = std::fopen(log.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    std::fclose(f);
  }
  return {status, out};
}

TEST(CudaAttentionSource, CompilesToPtxAndPassesPtxasWithoutSpills) {
  TGC_REQUIRE_NVRTC();
  const std::string ptxas = tgc::testing::findPtxas();
  if (ptxas.empty()) GTEST_SKIP() << "ptxas not found (set TGC_PTXAS or CUDA_HOME)";
  codegen::cuda::NvrtcOptions no;
  no.useCache = false;
  const auto ptx = codegen::cuda::compilePtx(attentionSource(), "tgc_attention", "compute_90", no);
  EXPECT_EQ(ptx.log.find("warning"), std::string::npos) << ptx.log;
  for (const std::string& name : attentionKernelNames())
    EXPECT_NE(ptx.image.find(".entry " + name + "("), std::string::npos) << name;
  const auto [status, log] = ptxasVerbose(ptxas, ptx.image);
  ASSERT_EQ(status, 0) << log;
  EXPECT_EQ(log.find("warning"), std::string::npos) << log;
  // Per kernel: "Compiling entry function 'NAME'", then its spills and registers.
  const std::regex entry(
      R"(Compiling entry function '(\w+)'[\s\S]*?(\d+) bytes spill stores, (\d+) bytes spill loads[\s\S]*?Used (\d+) registers)");
  int seen = 0;
  for (std::sregex_iterator it(log.begin(), log.end(), entry), end; it != end; ++it) {
    const auto& m = *it;
    ++seen;
    EXPECT_EQ(m[2].str(), "0") << m[1] << " spills";
    EXPECT_EQ(m[3].str(), "0") << m[1] << " spills";
    std::printf("  %s: %s registers, no spills\n", m[1].str().c_str(), m[4].str().c_str());
  }
  EXPECT_EQ(seen, 4) << log;
}

// One configuration of the device tests.
struct Case {
  int64_t batch, heads, t, d, dv;
  bool causal, mask, dropout;
};

// fused_attention and its gradient on q [B,H,T,D], k, v [B,H,T,DV] (mask bool[B,1,T,T]).
std::string attentionGraph(const Case& c, const std::string& dt) {
  const std::string qs = fmt::format("{}[{},{},{},{}]", dt, c.batch, c.heads, c.t, c.d);
  const std::string vs = fmt::format("{}[{},{},{},{}]", dt, c.batch, c.heads, c.t, c.dv);
  const std::string ls = fmt::format("{}[{},{},{}]", dt, c.batch, c.heads, c.t);
  std::string extra, attrs = "scale=0.3";
  if (c.causal) attrs += ", causal=true";
  if (c.mask) {
    extra += ", %m";
    attrs += ", has_mask=true";
  }
  if (c.dropout) {
    extra += ", %seed, %offset";
    attrs += ", p_drop=0.2";
  }
  std::string g = "graph @attn {\n";
  g += fmt::format("  %q = input() : {}\n  %k = input() : {}\n  %v = input() : {}\n", qs, qs, vs);
  g += fmt::format("  %dout = input() : {}\n", vs);
  if (c.mask) g += fmt::format("  %m = input() : bool[{},1,{},{}]\n", c.batch, c.t, c.t);
  if (c.dropout) g += "  %seed = input() : i64[]\n  %offset = input() : i64[]\n";
  g += fmt::format("  %o, %lse = fused_attention(%q, %k, %v{}) {{{}}} : {}, {}\n", extra, attrs,
                   vs, ls);
  g += fmt::format(
      "  %dq, %dk, %dv = fused_attention_grad(%q, %k, %v, %o, %lse, %dout{}) {{{}}} : {}, {}, "
      "{}\n",
      extra, attrs, qs, qs, vs);
  g += "  return %o, %lse, %dq, %dk, %dv\n}\n";
  return g;
}

void checkAgainstInterpreter(const Case& c, const std::string& dt) {
  SCOPED_TRACE(fmt::format("{} B={} H={} T={} D={} DV={} causal={} mask={} dropout={}", dt,
                           c.batch, c.heads, c.t, c.d, c.dv, c.causal, c.mask, c.dropout));
  auto g = parseGraph(attentionGraph(c, dt), "attn.tir");
  auto in = tgc::testing::randomInputs(*g, 5);
  if (c.mask) {  // random, with query 0 of batch item 0 fully masked (lse -inf, zeros)
    Tensor& m = in.at("m");
    for (int64_t e = 0; e < m.numel(); ++e) m.setI(e, (e * 7919 % 13) < 10 ? 1 : 0);
    for (int64_t j = 0; j < c.t; ++j) m.setI(j, 0);
  }
  if (c.dropout) {
    in.at("seed").setI(0, 0x1234567890abcdefLL);
    in.at("offset").setI(0, 977);
  }
  auto want = Interpreter().run(*g, in);
  auto got = CudaExecutable::compile(*g)->run(in);
  ASSERT_EQ(got.size(), want.size());
  const double tol = dt == "f32" ? 2e-4 : 1e-10;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(tgc::testing::allClose(got[i], want[i], tol, tol)) << g->outputs()[i]->name();
}

TEST(CudaAttentionOnDevice, ForwardAndBackwardMatchTheInterpreter) {
  TGC_REQUIRE_CUDA_DEVICE();
  TGC_REQUIRE_NVRTC();
  const Case cases[] = {
      {2, 2, 1, 16, 16, false, false, false},  {2, 2, 7, 40, 24, false, true, false},
      {2, 2, 7, 40, 24, true, false, true},    {1, 3, 64, 64, 64, true, true, false},
      {1, 3, 64, 64, 64, false, false, true},  {2, 1, 257, 128, 128, false, true, true},
      {2, 1, 257, 33, 65, true, false, false}, {1, 2, 1024, 64, 64, true, false, false},
      {1, 1, 1024, 64, 64, false, true, true},
  };
  for (const std::string dt : {"f32", "f64"})
    for (const Case& c : cases) checkAgainstInterpreter(c, dt);
}

TEST(CudaAttention, HeadDimAbove128IsRefusedNamingTheNode) {
  auto g = parseGraph(R"(graph @attn {
  %q = input() : f32[2,4,129]
  %k = input() : f32[2,4,129]
  %v = input() : f32[2,4,8]
  %o, %lse = fused_attention(%q, %k, %v) {scale=0.35} : f32[2,4,8], f32[2,4]
  return %o
}
)",
                      "attn.tir");
  const Node* n = g->outputs()[0]->def();
  try {
    attentionKernelFor(*n);
    FAIL() << "head dim 129 accepted";
  } catch (const IRError& e) {
    EXPECT_NE(std::string(e.what()).find("head dims up to 128"), std::string::npos) << e.what();
  }
}

}  // namespace
