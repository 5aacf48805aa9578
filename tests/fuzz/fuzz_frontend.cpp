// Fuzz target: the model language front end. Any input must compile or give a ParseError
// (never crash, hang or throw anything else); every graph it compiles must verify, print,
// parse back to the same text, and initialize its (small) parameters.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "frontend/frontend.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_frontend: %s\n%s\n", what, detail.c_str());
  std::abort();
}

void check(const tgc::CompiledModel& m) {
  auto problems = tgc::verifyGraph(*m.graph);
  if (!problems.empty()) fail("compiled graph does not verify", problems[0]);
  std::string printed = tgc::printGraph(*m.graph);
  std::string again;
  try {
    again = tgc::printGraph(*tgc::parseGraph(printed, "printed.tir"));
  } catch (const tgc::ParseError& e) {
    fail("printed graph does not parse", std::string(e.what()) + "\n" + printed);
  }
  if (again != printed) fail("print -> parse -> print differs", printed + "\n---\n" + again);
  size_t params = 0;
  for (const auto& n : m.graph->nodes())
    if (n->op() == tgc::OpKind::Input && n->attrString("role") == "param") ++params;
  if (params != m.params.size()) fail("parameter table does not match the graph", printed);
  for (const auto& p : m.params)
    if (p.type.numel() <= 4096) (void)tgc::initParam(p, 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  tgc::ModelOptions opts;
  // No disk access: imports see one small in-memory library.
  opts.read_file = [](const std::string& path) -> std::optional<std::string> {
    if (path == "lib.tg" || path.ends_with("/lib.tg"))
      return std::string("fn twice(x) { return x + x }\nmodule Scale(d: int) {\n"
                         "  param g: f32[d] = ones\n  fn forward(x) { return x * g }\n}\n");
    return std::nullopt;
  };
  std::vector<std::string> graphs;
  try {
    tgc::CompiledModel m = tgc::compileModelSource(text, "fuzz.tg", opts);
    check(m);
    graphs = m.graph_names;
  } catch (const tgc::ParseError&) {
    return 0;  // rejected cleanly
  }
  // The other graphs of a program that compiles.
  for (size_t i = 1; i < graphs.size() && i < 4; ++i) {
    opts.graph = graphs[i];
    try {
      check(tgc::compileModelSource(text, "fuzz.tg", opts));
    } catch (const tgc::ParseError&) {
    }
  }
  return 0;
}
