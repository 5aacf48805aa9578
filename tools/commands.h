// Each tgc subcommand lives in its own file and registers itself on the app here.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <string_view>

#include "runtime/executable.h"

namespace tgc::cli {

// Adds the subcommand with its options; the callback runs the command and returns the
// process exit code through CLI::RuntimeError when it fails.
void registerOpt(CLI::App& app);      // cmd_opt.cpp: run passes on a text IR file
void registerRun(CLI::App& app);      // cmd_run.cpp: run a graph with the interpreter
void registerCompile(CLI::App& app);  // cmd_compile.cpp: model spec -> Graph IR
void registerGradcheck(CLI::App& app);  // cmd_gradcheck.cpp: gradients vs finite differences
void registerTrain(CLI::App& app);      // cmd_train.cpp: train on built-in data or a corpus
void registerTranslate(CLI::App& app);  // cmd_translate.cpp: translate with a checkpoint
void registerEval(CLI::App& app);       // cmd_eval.cpp: exact match and BLEU of a checkpoint
void registerPredict(CLI::App& app);    // cmd_predict.cpp: a classifier's labels for texts
void registerGenerate(CLI::App& app);   // cmd_generate.cpp: continue prompts with a language model
void registerExport(CLI::App& app);     // cmd_export.cpp: a checkpoint in CTranslate2's format

// Runs a subcommand's body (train, translate, eval, generate, predict) and returns what it
// returns. An exception it throws is printed on stderr as "tgc <command>: error: <what>", or
// as it is when it names its own place ("file:line: error: ..."), and ends the command with
// exit status 1 (CLI::RuntimeError).
template <class Body>
auto runCommand(std::string_view command, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    std::cerr << (msg.find(": error: ") != std::string::npos
                      ? std::string()
                      : "tgc " + std::string(command) + ": error: ")
              << msg << (msg.ends_with("\n") ? "" : "\n");
    throw CLI::RuntimeError(1);
  }
}

// The kernel execution options of a command with --threads (N > 0 sets TGC_NUM_THREADS, which
// ExecOptions::fromEnv and the thread pool read) and --no-cache.
inline runtime::ExecOptions commandExecOptions(int threads, bool noCache) {
  if (threads > 0) setenv("TGC_NUM_THREADS", std::to_string(threads).c_str(), 1);
  runtime::ExecOptions exec = runtime::ExecOptions::fromEnv();
  if (noCache) exec.useCache = false;
  return exec;
}

}  // namespace tgc::cli
