// Each tgc subcommand lives in its own file and registers itself on the app here.
#pragma once

#include <CLI/CLI.hpp>

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

}  // namespace tgc::cli
