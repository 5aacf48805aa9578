// Helpers for pass tests: graphs from IR text, running one pass with its change report
// checked, and comparing what two graphs compute on the same random inputs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "ir/interpreter.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pass.h"

namespace tgc::pass_test {

inline std::unique_ptr<Graph> parse(std::string_view text) { return parseGraph(text, "<test>"); }

// Runs the registered pass `name` on g. Fails the test when the pass's report disagrees
// with what happened to the printed IR, or when the result does not verify.
inline bool runPass(const std::string& name, Graph& g, PassContext ctx = {}) {
  const PassInfo* p = findPass(name);
  EXPECT_NE(p, nullptr) << "no pass named " << name;
  if (!p) return false;
  std::string before = printGraph(g);
  bool changed = p->run(g, ctx);
  std::string after = printGraph(g);
  EXPECT_EQ(changed, before != after) << name << " reported changed=" << changed
                                      << "\nbefore:\n" << before << "after:\n" << after;
  auto errs = verifyGraph(g);
  EXPECT_TRUE(errs.empty()) << name << " left an invalid graph: " << errs.front() << "\n" << after;
  return changed;
}

// The printed graph after running pass `name` on `text`.
inline std::string runOn(const std::string& name, std::string_view text, PassContext ctx = {}) {
  auto g = parse(text);
  runPass(name, *g, ctx);
  return printGraph(*g);
}

// Deterministic random inputs for every input of g: floats in [-2, 2), integers in [0, 4),
// bools either way.
inline std::map<std::string, Tensor> randomInputs(const Graph& g, unsigned seed = 1) {
  std::mt19937 rng(seed);
  std::map<std::string, Tensor> m;
  for (const Node* n : g.inputs()) {
    Tensor t(n->result()->type());
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (isFloat(t.dtype())) t.setF(i, std::uniform_real_distribution<double>(-2, 2)(rng));
      else if (t.dtype() == DType::boolean) t.setF(i, rng() % 2);
      else t.setI(i, static_cast<int64_t>(rng() % 4));
    }
    m.emplace(n->result()->name(), std::move(t));
  }
  return m;
}

// Both graphs give bit-identical outputs (NaN equal to NaN) on the same random inputs.
inline void expectSameOutputs(const Graph& a, const Graph& b) {
  Interpreter interp;
  auto inputs = randomInputs(a);
  auto ra = interp.run(a, inputs);
  auto rb = interp.run(b, inputs);
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) {
    ASSERT_EQ(ra[i].type(), rb[i].type()) << "output " << i;
    for (int64_t j = 0; j < ra[i].numel(); ++j) {
      double x = ra[i].getF(j), y = rb[i].getF(j);
      bool same = (std::isnan(x) && std::isnan(y)) || std::memcmp(&x, &y, sizeof x) == 0;
      EXPECT_TRUE(same) << "output " << i << " element " << j << ": " << x << " vs " << y;
    }
  }
}

// Runs pass `name` on a copy of the graph in `text`, expects the result to compute the
// same outputs, and returns the printed result.
inline std::string runAndCompare(const std::string& name, std::string_view text,
                                 PassContext ctx = {}) {
  auto before = parse(text);
  auto after = before->clone();
  runPass(name, *after, ctx);
  expectSameOutputs(*before, *after);
  return printGraph(*after);
}

}  // namespace tgc::pass_test
