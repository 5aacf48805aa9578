// Fuzz target: the IR text parser. Any input must either parse or give a ParseError; a graph
// that parses must print, re-parse and print to the same text, and survive the JSON form.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ir/graphviz.h"
#include "ir/json.h"
#include "ir/parser.h"
#include "ir/printer.h"

namespace {

[[noreturn]] void mismatch(const char* what, const std::string& a, const std::string& b) {
  std::fprintf(stderr, "fuzz_ir_text: %s\n--- first:\n%s\n--- second:\n%s\n", what, a.c_str(),
               b.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<tgc::Graph> g;
  try {
    g = tgc::parseGraph(text, "fuzz.tir");
  } catch (const tgc::ParseError&) {
    return 0;  // rejected cleanly
  }
  std::string printed = tgc::printGraph(*g);
  std::string again;
  try {
    again = tgc::printGraph(*tgc::parseGraph(printed, "printed.tir"));
  } catch (const tgc::ParseError& e) {
    mismatch("printed text does not parse", printed, e.what());
  }
  if (again != printed) mismatch("print -> parse -> print differs", printed, again);
  // The JSON form of any graph the parser accepts must read back to the same graph.
  std::string viaJson;
  try {
    viaJson = tgc::printGraph(*tgc::graphFromJsonText(tgc::graphToJson(*g).dump(), "fuzz.json"));
  } catch (const tgc::ParseError& e) {
    mismatch("JSON of a parsed graph does not read back", printed, e.what());
  }
  if (viaJson != printed) mismatch("text -> JSON -> text differs", printed, viaJson);
  if (tgc::graphToDot(*g).empty()) std::abort();
  return 0;
}
