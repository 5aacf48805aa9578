// Fuzz target: the JSON reader. Any input must either read or give a ParseError; a graph
// that reads must give the same JSON again, and print to text that parses back to it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ir/json.h"
#include "ir/parser.h"
#include "ir/printer.h"

namespace {

[[noreturn]] void mismatch(const char* what, const std::string& a, const std::string& b) {
  std::fprintf(stderr, "fuzz_ir_json: %s\n--- first:\n%s\n--- second:\n%s\n", what, a.c_str(),
               b.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<tgc::Graph> g;
  try {
    g = tgc::graphFromJsonText(text, "fuzz.json");
  } catch (const tgc::ParseError&) {
    return 0;  // rejected cleanly
  }
  nlohmann::json j = tgc::graphToJson(*g);
  std::string dumped = j.dump();
  std::string again;
  try {
    again = tgc::graphToJson(*tgc::graphFromJsonText(dumped, "dumped.json")).dump();
  } catch (const tgc::ParseError& e) {
    mismatch("dumped JSON does not read back", dumped, e.what());
  }
  if (again != dumped) mismatch("json -> graph -> json differs", dumped, again);
  std::string printed = tgc::printGraph(*g);
  std::string viaText;
  try {
    viaText = tgc::graphToJson(*tgc::parseGraph(printed, "printed.tir")).dump();
  } catch (const tgc::ParseError& e) {
    mismatch("printed text of a JSON graph does not parse", printed, e.what());
  }
  if (viaText != dumped) mismatch("json -> text -> json differs", dumped, viaText);
  return 0;
}
