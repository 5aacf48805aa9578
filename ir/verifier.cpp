#include "ir/verifier.h"

#include <fmt/format.h>

#include <unordered_set>

namespace tgc {

std::vector<std::string> verifyGraph(const Graph& g) {
  std::vector<std::string> errs;
  std::unordered_set<const Value*> defined;
  std::unordered_set<std::string> names;
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    std::vector<TensorType> opTypes;
    bool operandsOk = true;
    for (size_t i = 0; i < n.operands().size(); ++i) {
      const Value* v = n.operand(i);
      if (!v || !defined.count(v)) {
        errs.push_back(fmt::format("{} %{}: operand {} (%{}) is not defined before its use",
                                   n.info().name, n.numResults() ? n.result()->name() : "?", i,
                                   v ? v->name() : "null"));
        operandsOk = false;
        continue;
      }
      opTypes.push_back(v->type());
    }
    std::vector<TensorType> stored;
    for (size_t i = 0; i < n.numResults(); ++i) {
      const Value* r = n.result(i);
      stored.push_back(r->type());
      if (!names.insert(r->name()).second)
        errs.push_back(fmt::format("value name %{} is defined twice", r->name()));
      if (g.findValue(r->name()) != r)
        errs.push_back(fmt::format("value %{} is missing from the name table", r->name()));
      defined.insert(r);
    }
    if (!operandsOk) continue;
    AttrMap attrs = n.attrs();
    try {
      auto types = inferResultTypes(n.op(), opTypes, attrs, stored);
      if (types != stored) {
        std::string s, t;
        for (auto& x : stored) s += (s.empty() ? "" : ", ") + x.str();
        for (auto& x : types) t += (t.empty() ? "" : ", ") + x.str();
        errs.push_back(fmt::format("{}: result type is {} but the op gives {}", describeNode(n), s, t));
      }
      // inferResultTypes only drops defaults, so compare counts: a value holding NaN
      // (a constant) never compares equal to itself.
      if (attrs.size() != n.attrs().size())
        errs.push_back(fmt::format("{}: attributes equal to their defaults must be omitted",
                                   describeNode(n)));
    } catch (const ShapeError& e) {
      errs.push_back(fmt::format("{}: {}", describeNode(n), e.what()));
    }
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Value* o = g.outputs()[i];
    if (!o || !defined.count(o))
      errs.push_back(fmt::format("output {} (%{}) is not defined in the graph", i,
                                 o ? o->name() : "null"));
  }
  return errs;
}

void verifyOrThrow(const Graph& g) {
  auto errs = verifyGraph(g);
  if (errs.empty()) return;
  std::string msg;
  for (const auto& e : errs) msg += (msg.empty() ? "" : "\n") + e;
  throw IRError(msg);
}

}  // namespace tgc
