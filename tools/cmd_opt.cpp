// `tgc opt`: runs a pass pipeline over a Graph IR file and prints the result. This is how
// lit tests drive single passes, and how a user watches what each pass does.
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "ir/diagnostic.h"
#include "ir/graphviz.h"
#include "ir/json.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/pass_manager.h"
#include "tools/commands.h"
#include "tools/pass_args.h"

namespace tgc::cli {
namespace {

struct OptOptions {
  std::string input;
  std::string output;
  std::string passes;
  std::string emit = "ir";
  bool list_passes = false;
  int64_t fold_limit = PassContext{}.fold_limit;
  PassManagerOptions pm;
  bool no_verify = false;
};

constexpr const char* kFooter = R"(
Pipelines:
  A comma-separated list of pass names, run in order. fixpoint(a,b,...) runs its group
  again and again until one whole round changes nothing (an error after 32 rounds).
  Groups nest; quote a pipeline with parentheses for the shell.

Instrumentation (IR is printed to stderr, each dump under a header such as
"// ----- IR after cse (changed) -----"):
  --print-after-all        print after every pass run, changed or not
  --print-after=NAME       print after NAME runs (repeat the flag or separate names by ',')
  --print-changed          print only after runs that changed the graph; with
                           --print-after, only those of the named passes
  --dump-dir=DIR           write 00-input.tir, 01-<pass>.tir, ... one file per pass run
  --stop-after=NAME        end the pipeline after NAME first runs and print that graph
  --time-passes            print a table of wall time per pass (and verification)

The graph is verified before the pipeline and after every pass that changed it; a failure
reads "verification failed after <pass>: <problem>". Use --list-passes for the passes.

Examples:
  tgc opt model.tir --passes=canonicalize,cse,dce
  tgc opt model.tir --passes='constant-fold,fixpoint(canonicalize,cse,dce)' --print-changed
  tgc opt model.tir --passes=cse,dce --dump-dir=dumps --time-passes -o out.tir
  tgc opt - --passes=dce --emit=dot < model.tir > model.dot

Exit status: 0 on success; 1 with a message on stderr for unreadable input, a bad
pipeline, a failing pass or an output that cannot be written.
)";

std::string readAll(std::istream& in) {
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::unique_ptr<Graph> readGraph(const std::string& path) {
  bool json = path.size() > 5 && path.ends_with(".json");
  if (path == "-") return parseGraph(readAll(std::cin), "<stdin>");
  if (!json) return parseGraphFile(path);
  std::ifstream in(path);
  if (!in) throw ParseError(fmt::format("{}: error: cannot open file", path));
  return graphFromJsonText(readAll(in), path);
}

std::string render(const Graph& g, const std::string& emit) {
  if (emit == "json") return graphToJson(g).dump(2) + "\n";
  if (emit == "dot") return graphToDot(g);
  return printGraph(g);
}

void listPasses() {
  size_t width = 0;
  for (const PassInfo* p : allPasses()) width = std::max(width, p->name.size());
  for (const PassInfo* p : allPasses())
    fmt::print("{:<{}}  {}\n", p->name, width, p->description);
}

void runOpt(const OptOptions& o) {
  if (o.list_passes) {
    listPasses();
    return;
  }
  if (o.input.empty()) throw PassError("no input file (give a path, or '-' for stdin)");
  if (o.fold_limit < 0) throw PassError("--fold-limit must be at least 0");
  // Check the pipeline and options before reading what may be a large file.
  PassManagerOptions pmo = o.pm;
  pmo.verify_each = !o.no_verify;
  PassManager pm(parsePipeline(o.passes), pmo);
  auto g = readGraph(o.input);
  PassContext ctx;
  ctx.fold_limit = o.fold_limit;
  pm.run(*g, ctx);
  std::string text = render(*g, o.emit);
  if (o.output.empty() || o.output == "-") {
    std::cout << text;
    std::cout.flush();
    return;
  }
  std::ofstream out(o.output);
  out << text;
  out.close();
  if (!out) throw PassError(fmt::format("cannot write '{}'", o.output));
}

}  // namespace

void registerOpt(CLI::App& app) {
  auto o = std::make_shared<OptOptions>();
  CLI::App* cmd = app.add_subcommand(
      "opt", "Run a pass pipeline over a Graph IR file and print the resulting graph");
  cmd->footer(kFooter);
  cmd->add_option("file", o->input,
                  "Graph IR text file ('-' reads stdin; a name ending in .json reads the JSON form)")
      ->type_name("FILE");
  cmd->add_option("-p,--passes", o->passes,
                  "Pipeline to run, e.g. canonicalize,cse,dce or fixpoint(canonicalize,cse,dce)")
      ->type_name("PIPELINE");
  cmd->add_option("-o,--output", o->output, "Write the result to this file instead of stdout")
      ->type_name("FILE");
  cmd->add_option("--emit", o->emit, "Output form: ir (text), json or dot (Graphviz)")
      ->check(CLI::IsMember({"ir", "json", "dot"}))
      ->type_name("FORM");
  cmd->add_flag("--list-passes", o->list_passes, "List the registered passes and exit");
  addPassManagerArgs(cmd, o->pm);
  cmd->add_option("--fold-limit", o->fold_limit,
                  "Largest non-splat constant constant-fold may create, in elements")
      ->capture_default_str()
      ->type_name("N");
  cmd->add_flag("--no-verify", o->no_verify,
                "Skip verifying the graph before the pipeline and after changing passes");
  cmd->callback([o] {
    try {
      runOpt(*o);
    } catch (const ParseError& e) {
      // Already "file:line:col: error: ..." with the source line and a caret.
      std::string msg = e.what();
      std::cerr << msg << (msg.ends_with("\n") ? "" : "\n");
      throw CLI::RuntimeError(1);
    } catch (const std::exception& e) {
      std::cerr << "tgc opt: error: " << e.what() << "\n";
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace tgc::cli
