#include "passes/pass_manager.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "ir/printer.h"
#include "ir/verifier.h"

namespace tgc {

// ---- pipeline text -------------------------------------------------------------------------

namespace {

class PipelineParser {
 public:
  PipelineParser(std::string_view text, const PipelineAliases& aliases)
      : text_(text), aliases_(aliases) {}

  Pipeline parse() {
    Pipeline p;
    skipSpace();
    if (pos_ == text_.size()) return p;
    p.steps = parseList();
    if (pos_ != text_.size()) fail(fmt::format("unexpected '{}'", text_[pos_]));
    return p;
  }

 private:
  std::vector<PipelineStep> parseList() {
    std::vector<PipelineStep> steps;
    for (;;) {
      parseItem(steps);
      skipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      return steps;
    }
  }

  // Appends the item: one step, or every step of an alias.
  void parseItem(std::vector<PipelineStep>& steps) {
    skipSpace();
    size_t start = pos_;
    while (pos_ < text_.size() && isNameChar(text_[pos_])) ++pos_;
    std::string name(text_.substr(start, pos_ - start));
    if (name.empty()) {
      if (pos_ == text_.size()) fail("expected a pass name at the end");
      fail(fmt::format("expected a pass name, found '{}'", text_[pos_]));
    }
    skipSpace();
    if (name == "fixpoint" && pos_ < text_.size() && text_[pos_] == '(') {
      ++pos_;
      PipelineStep group;
      skipSpace();
      if (pos_ < text_.size() && text_[pos_] == ')') fail("fixpoint() needs at least one pass");
      group.body = parseList();
      skipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ')') failAt(pos_, "expected ')' to close fixpoint(");
      ++pos_;
      steps.push_back(std::move(group));
      return;
    }
    if (auto alias = aliases_.find(name); alias != aliases_.end()) {
      steps.insert(steps.end(), alias->second.steps.begin(), alias->second.steps.end());
      return;
    }
    if (!findPass(name))
      failAt(start, fmt::format("unknown pass '{}' (known passes: {})", name, knownPassNames()));
    PipelineStep step;
    step.pass = std::move(name);
    steps.push_back(std::move(step));
  }

  static bool isNameChar(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  }
  void skipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  [[noreturn]] void fail(const std::string& msg) { failAt(pos_, msg); }
  [[noreturn]] void failAt(size_t at, const std::string& msg) {
    throw PassError(fmt::format("pipeline '{}': column {}: {}", text_, at + 1, msg));
  }

  std::string_view text_;
  const PipelineAliases& aliases_;
  size_t pos_ = 0;
};

void appendSteps(std::string& s, const std::vector<PipelineStep>& steps) {
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i) s += ",";
    if (steps[i].isFixpoint()) {
      s += "fixpoint(";
      appendSteps(s, steps[i].body);
      s += ")";
    } else {
      s += steps[i].pass;
    }
  }
}

bool containsPass(const std::vector<PipelineStep>& steps, std::string_view name) {
  return std::any_of(steps.begin(), steps.end(), [&](const PipelineStep& s) {
    return s.isFixpoint() ? containsPass(s.body, name) : s.pass == name;
  });
}

std::string joinErrors(const std::vector<std::string>& errs) {
  std::string s;
  for (const auto& e : errs) s += (s.empty() ? "" : "\n  ") + e;
  return s;
}

}  // namespace

Pipeline parsePipeline(std::string_view text, const PipelineAliases& aliases) {
  return PipelineParser(text, aliases).parse();
}

std::string Pipeline::str() const {
  std::string s;
  appendSteps(s, steps);
  return s;
}

bool Pipeline::contains(std::string_view name) const { return containsPass(steps, name); }

// ---- the pass manager ----------------------------------------------------------------------

PassManager::PassManager(Pipeline pipeline, PassManagerOptions opts)
    : pipeline_(std::move(pipeline)), opts_(std::move(opts)) {
  auto requireInPipeline = [&](const std::string& name, std::string_view option) {
    if (!pipeline_.contains(name))
      throw PassError(fmt::format("{}: pass '{}' is not in the pipeline '{}'", option, name,
                                  pipeline_.str()));
  };
  for (const auto& n : opts_.print_after) requireInPipeline(n, "print-after");
  if (!opts_.stop_after.empty()) requireInPipeline(opts_.stop_after, "stop-after");
  if (opts_.max_fixpoint_iterations < 1)
    throw PassError("max_fixpoint_iterations must be at least 1");
}

std::ostream& PassManager::log() { return opts_.log ? *opts_.log : std::cerr; }

bool PassManager::run(Graph& g, PassContext& ctx) {
  history_.clear();
  timings_.clear();
  stopped_ = false;
  dump_index_ = 0;
  if (!opts_.dump_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opts_.dump_dir, ec);
    if (ec)
      throw PassError(fmt::format("dump-dir: cannot create '{}': {}", opts_.dump_dir, ec.message()));
  }
  // The timing table is printed even when a pass fails: the report is most useful then.
  struct TimingReport {
    PassManager& pm;
    ~TimingReport() {
      if (pm.opts_.time_passes) pm.printTimings();
    }
  } report{*this};
  if (opts_.verify_each) {
    auto errs = verifyGraph(g);
    if (!errs.empty())
      throw PassError(fmt::format("verification failed on the input graph: {}", joinErrors(errs)));
  }
  dump(g, "input");
  return runSteps(pipeline_.steps, g, ctx, 0);
}

bool PassManager::runSteps(const std::vector<PipelineStep>& steps, Graph& g, PassContext& ctx,
                           int iteration) {
  bool changed = false;
  for (const auto& step : steps) {
    if (step.isFixpoint()) changed |= runFixpoint(step, g, ctx);
    else changed |= runOne(step.pass, g, ctx, iteration);
    if (stopped_) break;
  }
  return changed;
}

bool PassManager::runFixpoint(const PipelineStep& group, Graph& g, PassContext& ctx) {
  bool changed = false;
  for (int round = 1; round <= opts_.max_fixpoint_iterations; ++round) {
    bool roundChanged = runSteps(group.body, g, ctx, round);
    changed |= roundChanged;
    if (!roundChanged || stopped_) return changed;
  }
  std::string text;
  appendSteps(text, {group});
  throw PassError(fmt::format("{} did not reach a fixed point after {} rounds", text,
                              opts_.max_fixpoint_iterations));
}

bool PassManager::runOne(const std::string& name, Graph& g, PassContext& ctx, int iteration) {
  const PassInfo* info = findPass(name);
  if (!info)
    throw PassError(fmt::format("unknown pass '{}' (known passes: {})", name, knownPassNames()));
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  bool changed = false;
  try {
    changed = info->run(g, ctx);
  } catch (const PassError&) {
    throw;
  } catch (const std::exception& e) {
    throw PassError(fmt::format("pass {} failed: {}", name, e.what()));
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  auto& [runs, total] = timings_[name];
  ++runs;
  total += secs;
  history_.push_back(PassRun{name, changed, iteration, secs});

  if (changed && opts_.verify_each) {
    auto t1 = Clock::now();
    verify(g, name);
    auto& [vruns, vtotal] = timings_["(verify)"];
    ++vruns;
    vtotal += std::chrono::duration<double>(Clock::now() - t1).count();
  }

  bool selected = opts_.print_after_all ||
                  std::find(opts_.print_after.begin(), opts_.print_after.end(), name) !=
                      opts_.print_after.end() ||
                  (opts_.print_changed && opts_.print_after.empty());
  if (selected && (changed || !opts_.print_changed)) {
    std::string state = changed ? "changed" : "unchanged";
    if (iteration > 0) state += fmt::format(", round {}", iteration);
    log() << fmt::format("// ----- IR after {} ({}) -----\n{}", name, state, printGraph(g));
    log().flush();
  }
  dump(g, name);
  if (name == opts_.stop_after) stopped_ = true;
  return changed;
}

void PassManager::verify(const Graph& g, const std::string& after) {
  auto errs = verifyGraph(g);
  if (!errs.empty())
    throw PassError(fmt::format("verification failed after {}: {}", after, joinErrors(errs)));
}

void PassManager::dump(const Graph& g, const std::string& label) {
  if (opts_.dump_dir.empty()) return;
  auto path = std::filesystem::path(opts_.dump_dir) / fmt::format("{:02}-{}.tir", dump_index_++, label);
  std::ofstream out(path);
  out << printGraph(g);
  out.close();
  if (!out) throw PassError(fmt::format("dump-dir: cannot write '{}'", path.string()));
}

void PassManager::printTimings() {
  std::vector<std::pair<std::string, std::pair<int, double>>> rows(timings_.begin(), timings_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  double total = 0;
  for (const auto& r : rows) total += r.second.second;
  std::string s = "// ----- pass timing (wall clock) -----\n";
  s += fmt::format("//  {:>10}  {:>5}  {:>6}  {}\n", "time (ms)", "runs", "share", "pass");
  for (const auto& [name, rt] : rows)
    s += fmt::format("//  {:>10.3f}  {:>5}  {:>5.1f}%  {}\n", rt.second * 1e3, rt.first,
                     total > 0 ? 100.0 * rt.second / total : 0.0, name);
  s += fmt::format("//  {:>10.3f}  {:>5}  {:>5.1f}%  {}\n", total * 1e3, "", 100.0, "total");
  log() << s;
  log().flush();
}

}  // namespace tgc
