// tgc: the Transformer graph compiler's one command-line program.
#include <fmt/format.h>

#include <exception>

#include "tools/commands.h"

namespace {

constexpr const char* kFooter = R"(
Run 'tgc <command> --help' for a command's options, input formats and examples.

Files:
  .tg            a model in the tgc model language (models/transformer.tg)
  .tir           Graph IR text, as printed by `tgc compile` and `tgc opt`
  .json          Graph IR as JSON (--emit json)
  .safetensors   named tensors: graph inputs and outputs, parameters, checkpoints

Examples:
  tgc compile models/transformer.tg --preset tiny -o model.tir
  tgc opt model.tir --passes=canonicalize,cse,dce --print-changed
  tgc run graph.tir --random-inputs 1 --print

Exit status: 0 on success; 1 when a command fails, with the reason on stderr (errors in an
input file as file:line:col: error: ...); 100 or more for a command-line usage error.
)";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tgc: compile, train and inspect Transformer models described in the tgc model "
               "language", "tgc"};
  app.require_subcommand(1);
  app.footer(kFooter);
  app.set_version_flag("--version", "tgc 0.1.0");
  tgc::cli::registerCompile(app);
  tgc::cli::registerOpt(app);
  tgc::cli::registerRun(app);
  tgc::cli::registerGradcheck(app);
  tgc::cli::registerTrain(app);
  tgc::cli::registerTranslate(app);
  tgc::cli::registerEval(app);
  tgc::cli::registerGenerate(app);
  tgc::cli::registerPredict(app);
  tgc::cli::registerExport(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    // Library errors carry their own location ("file:line:col: error: ...").
    fmt::print(stderr, "tgc: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
