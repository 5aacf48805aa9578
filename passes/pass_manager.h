// Pipelines and the pass manager: runs passes by name, verifies the graph after every pass
// that changed it, and offers the instrumentation behind `tgc opt`'s flags.
#pragma once

#include <iosfwd>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "passes/pass.h"

namespace tgc {

// A bad pipeline or option, a pass that threw, or a graph that failed verification.
struct PassError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One element of a pipeline: a pass name, or fixpoint(...) over a nested list that runs
// until one whole round changes nothing.
struct PipelineStep {
  std::string pass;                // empty for a fixpoint group
  std::vector<PipelineStep> body;  // the group's steps
  bool isFixpoint() const { return pass.empty(); }
};

struct Pipeline {
  std::vector<PipelineStep> steps;
  // Canonical text: "canonicalize,fixpoint(cse,dce)".
  std::string str() const;
  // Whether a pass of this name appears anywhere, groups included.
  bool contains(std::string_view name) const;
};

// Names that stand for a whole pipeline ("default"), spliced in where they appear.
using PipelineAliases = std::map<std::string, Pipeline, std::less<>>;

// Grammar: list := item (',' item)* ; item := NAME | 'fixpoint' '(' list ')'.
// Spaces are allowed around items; an empty text is an empty pipeline. Unknown names give
// a PassError listing the known passes.
Pipeline parsePipeline(std::string_view text, const PipelineAliases& aliases = {});

struct PassManagerOptions {
  bool print_after_all = false;
  std::vector<std::string> print_after{};  // pass names
  // Print only after passes that changed the graph; alone, it selects every pass.
  bool print_changed = false;
  // One file per pass run: 00-input.tir, 01-canonicalize.tir, ... (created if missing).
  std::string dump_dir{};
  std::string stop_after{};  // stop the pipeline after this pass first runs
  bool time_passes = false;
  bool verify_each = true;  // verify the input and the graph after every changing pass
  int max_fixpoint_iterations = 32;
  std::ostream* log = nullptr;  // printing and timing go here; stderr when null
};

// One pass execution, in pipeline order.
struct PassRun {
  std::string pass;
  bool changed = false;
  int iteration = 0;  // 1-based round inside a fixpoint group, 0 outside one
  double seconds = 0;
};

class PassManager {
 public:
  // Throws PassError when print_after or stop_after name a pass the pipeline lacks.
  explicit PassManager(Pipeline pipeline, PassManagerOptions opts = {});

  // Runs the pipeline; returns whether any pass changed the graph. Throws PassError with
  // "verification failed after <pass>: <message>" when a changed graph is malformed.
  bool run(Graph& g, PassContext& ctx);
  bool run(Graph& g) {
    PassContext ctx;
    return run(g, ctx);
  }

  const std::vector<PassRun>& history() const { return history_; }
  // Whether the last run ended early at stop_after.
  bool stopped() const { return stopped_; }

 private:
  bool runSteps(const std::vector<PipelineStep>& steps, Graph& g, PassContext& ctx, int iteration);
  bool runFixpoint(const PipelineStep& group, Graph& g, PassContext& ctx);
  bool runOne(const std::string& name, Graph& g, PassContext& ctx, int iteration);
  void verify(const Graph& g, const std::string& after);
  void dump(const Graph& g, const std::string& label);
  void printTimings();
  std::ostream& log();

  Pipeline pipeline_;
  PassManagerOptions opts_;
  std::vector<PassRun> history_;
  bool stopped_ = false;
  int dump_index_ = 0;
  std::map<std::string, std::pair<int, double>> timings_;  // name -> runs, seconds
};

}  // namespace tgc
