// Helpers for the CUDA runtime tests: tests that need a GPU skip visibly, naming why there
// is none ("no CUDA device: cannot load ... libcuda.so.1 ..."), so a run without a GPU
// shows exactly what was not proved.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "codegen/cuda/nvrtc.h"
#include "runtime/cuda/driver.h"

#define TGC_REQUIRE_CUDA_DEVICE()                                                \
  do {                                                                           \
    if (std::string why = ::tgc::runtime::cuda::noDeviceReason(); !why.empty()) \
      GTEST_SKIP() << why;                                                       \
  } while (0)

#define TGC_REQUIRE_NVRTC()                                                               \
  do {                                                                                    \
    if (std::string why = ::tgc::codegen::cuda::nvrtcUnavailableReason(); !why.empty()) \
      GTEST_SKIP() << "no NVRTC: " << why;                                                \
  } while (0)

namespace tgc::testing {

// ptxas from $TGC_PTXAS, the toolkit CMake found, $CUDA_HOME or /usr/local/cuda; "" if none.
inline std::string findPtxas() {
  std::vector<std::string> candidates;
  if (const char* p = std::getenv("TGC_PTXAS"); p && *p) candidates.emplace_back(p);
#ifdef TGC_CUDA_BIN_DIR
  candidates.emplace_back(std::string(TGC_CUDA_BIN_DIR) + "/ptxas");
#endif
  if (const char* h = std::getenv("CUDA_HOME"); h && *h)
    candidates.push_back(std::string(h) + "/bin/ptxas");
  candidates.emplace_back("/usr/local/cuda/bin/ptxas");
  for (const auto& c : candidates)
    if (access(c.c_str(), X_OK) == 0) return c;
  return "";
}

// Assembles `ptx` with `ptxas -arch=sm_90`; the exit status and ptxas's output.
struct PtxasResult {
  int status = -1;
  std::string log;
  size_t cubinBytes = 0;
};
inline PtxasResult runPtxas(const std::string& ptxas, const std::string& ptx,
                            const std::string& tag) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() /
                       ("tgc-ptxas-" + tag + "-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "in.ptx") << ptx;
  const std::string cmd = ptxas + " -arch=sm_90 -o " + (dir / "out.cubin").string() + " " +
                          (dir / "in.ptx").string() + " > " + (dir / "log").string() + " 2>&1";
  PtxasResult r;
  r.status = std::system(cmd.c_str());
  std::ifstream logFile(dir / "log");
  r.log.assign(std::istreambuf_iterator<char>(logFile), {});
  if (fs::exists(dir / "out.cubin")) r.cubinBytes = fs::file_size(dir / "out.cubin");
  fs::remove_all(dir);
  return r;
}

}  // namespace tgc::testing
