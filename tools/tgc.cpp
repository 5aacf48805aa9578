// tgc: the Transformer graph compiler's one command-line program.
#include <fmt/format.h>

#include <exception>

#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"tgc: compile, train and inspect Transformer models described in the tgc model "
               "language", "tgc"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tgc 0.1.0");
  tgc::cli::registerCompile(app);
  tgc::cli::registerOpt(app);
  tgc::cli::registerRun(app);
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
