#include "tools/model_warnings.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "passes/lint.h"

namespace tgc::cli {

void addWarningArgs(CLI::App* cmd, WarningArgs& a) {
  cmd->add_flag("--Werror", a.werror, "Treat the model's warnings as errors (notes stay notes)");
  std::string names;
  for (const auto& n : lintWarningNames()) names += (names.empty() ? "" : ", ") + n;
  cmd->add_option("--no-warn", a.off, "Turn one warning off by name (repeatable): " + names)
      ->check([](const std::string& v) {
        const auto& known = lintWarningNames();
        if (std::find(known.begin(), known.end(), v) != known.end()) return std::string();
        std::string all;
        for (const auto& n : known) all += (all.empty() ? "" : ", ") + n;
        return fmt::format("unknown warning '{}' (warnings: {})", v, all);
      });
}

namespace {

// The lint's findings as front-end warnings, placed by the nodes' origins.
std::vector<ModelWarning> lintWarnings(const CompiledModel& m) {
  std::vector<ModelWarning> out;
  if (!m.graph || !m.sources) return out;
  for (const LintFinding& f : lintGraph(*m.graph)) {
    ModelWarning w;
    w.name = f.name;
    w.message = f.message;
    w.fix = f.fix;
    if (const NodeOrigin* o = m.sources->origin(f.node)) {
      w.at = o->at;
      w.calls = o->calls;
    }
    if (f.related)
      if (const NodeOrigin* o = m.sources->origin(f.related))
        w.message += fmt::format(" ({}: {})", f.relatedNote, m.sources->where(o->at));
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace

std::vector<ModelWarning> modelWarnings(const CompiledModel& m, const WarningArgs& a) {
  std::vector<ModelWarning> all = m.warnings;
  for (auto& w : lintWarnings(m)) all.push_back(std::move(w));
  std::erase_if(all, [&](const ModelWarning& w) {
    return std::find(a.off.begin(), a.off.end(), w.name) != a.off.end();
  });
  return all;
}

void reportWarnings(const CompiledModel& m, const WarningArgs& a) {
  if (!m.sources) return;
  int warnings = 0;
  for (const ModelWarning& w : modelWarnings(m, a)) {
    fmt::print(stderr, "{}\n", renderWarning(*m.sources, w));
    warnings += !w.note;
  }
  if (a.werror && warnings > 0)
    throw std::runtime_error(fmt::format("{} warning{} treated as error{} (--Werror)", warnings,
                                         warnings == 1 ? "" : "s", warnings == 1 ? "" : "s"));
}

}  // namespace tgc::cli
