// Helpers for tests that run the built `tgc` program.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/tools/subprocess.h"

namespace tgc::testing {

// The tgc binary: $TGC_EXE (set by ctest), else the one in this build tree.
inline std::string tgcExe() {
  const char* env = std::getenv("TGC_EXE");
  return env && *env ? env : std::string(TGC_BINARY_DIR) + "/tools/tgc";
}

inline ProcessResult runTgc(const std::vector<std::string>& args) {
  std::vector<std::string> argv{tgcExe()};
  argv.insert(argv.end(), args.begin(), args.end());
  return runProcess(argv);
}

// "tgc run a b c" for failure messages.
inline std::string commandLine(const std::vector<std::string>& args) {
  std::string s = "tgc";
  for (const std::string& a : args) s += " " + a;
  return s;
}

// A failure the way the catalogue requires it: exit status 1 (not a signal, not a usage
// code), and a message on stderr.
inline ::testing::AssertionResult failsCleanly(const ProcessResult& r) {
  if (r.signal != 0)
    return ::testing::AssertionFailure() << "killed by signal " << r.signal << "\nstderr:\n"
                                         << r.err;
  if (r.exit_code != 1)
    return ::testing::AssertionFailure() << "exit status " << r.exit_code << ", expected 1"
                                         << "\nstderr:\n"
                                         << r.err;
  if (r.err.find("error:") == std::string::npos)
    return ::testing::AssertionFailure() << "no 'error:' on stderr:\n" << r.err;
  return ::testing::AssertionSuccess();
}

}  // namespace tgc::testing
