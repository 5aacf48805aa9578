// The front end's driver: load the file and its imports, check names, resolve the config
// (defaults, preset, --set), bind dims, run top-level lets, lower the selected graph.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "frontend/bind.h"
#include "frontend/check.h"
#include "frontend/eval.h"
#include "frontend/frontend.h"
#include "frontend/parser.h"
#include "ir/diagnostic.h"

namespace tgc {

std::string configValueToString(const ConfigValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
        else if constexpr (std::is_same_v<T, int64_t>) return std::to_string(x);
        else if constexpr (std::is_same_v<T, double>) return fmt::format("{}", x);
        else if constexpr (std::is_same_v<T, std::string>) return x;
        else return std::string(dtypeName(x));
      },
      v);
}

std::vector<std::string> defaultLibraryPaths() {
  std::vector<std::string> r;
  if (const char* env = std::getenv("TGC_LIB_PATH")) {
    std::string s = env;
    size_t b = 0;
    while (b <= s.size()) {
      size_t e = s.find(':', b);
      if (e == std::string::npos) e = s.size();
      if (e > b) r.push_back(s.substr(b, e - b));
      b = e + 1;
    }
  }
#ifdef TGC_MODELS_LIB_DIR
  r.push_back(TGC_MODELS_LIB_DIR);
#endif
  return r;
}

namespace {

using namespace fe;
namespace fs = std::filesystem;

constexpr size_t kMaxImportDepth = 32;
constexpr size_t kMaxFiles = 256;

std::optional<std::string> readDisk(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Compiler {
 public:
  explicit Compiler(const ModelOptions& o) : opts_(o), ev_(diags_) {
    read_ = opts_.read_file ? opts_.read_file : readDisk;
    ev_.setInference(opts_.inference);
    lib_paths_ = opts_.lib_paths;
    for (auto& p : defaultLibraryPaths()) lib_paths_.push_back(std::move(p));
  }

  CompiledModel run(const std::string& mainPath, std::optional<std::string> mainText) {
    main_path_ = mainPath;
    if (!mainText) mainText = read_(mainPath);
    if (!mainText) throw ParseError(fmt::format("{}: error: cannot read the model file", mainPath));
    std::vector<std::string> stack;
    load(mainPath, std::move(*mainText), stack);
    stopIfErrors();

    std::vector<const FileAst*> files;
    for (const auto& f : files_) files.push_back(f.get());
    std::set<std::string> globalNames = defineDecls();
    checkNames(files, globalNames, ev_.builtinNames(), diags_);
    stopIfErrors();

    CompiledModel out;
    std::set<std::string> dimNames;
    for (const auto& f : files_)
      for (const auto& d : f->dims) dimNames.insert(d.name);
    ev_.setPendingDims(dimNames);
    resolveConfig(out);
    ev_.setPendingDims({});
    std::vector<std::pair<std::string, int64_t>> dims = bindDims();
    stopIfErrors();
    try {
      for (const auto& f : files_)
        for (const auto& s : f->lets) ev_.execTopLet(*s);
    } catch (const EvalFatal&) {
    }
    stopIfErrors();

    const GraphDecl* g = selectGraph(out);
    // Bindings in source order, the main file's first (as graph_names).
    std::vector<const FileAst*> bindOrder{files_.back().get()};
    for (size_t i = 0; i + 1 < files_.size(); ++i) bindOrder.push_back(files_[i].get());
    out.bindings = resolveBindings(bindOrder, out.graph_names, diags_);
    stopIfErrors();
    auto lowered = ev_.lowerGraph(*g, dims);
    stopIfErrors();
    if (!lowered) throw ParseError(fmt::format("{}: error: graph '{}' could not be lowered", mainPath, g->name));
    out.graph = std::move(lowered->graph);
    for (const auto& p : lowered->params) out.params.push_back(ParamInit{p.name, p.init, p.arg, p.type});
    out.output_names = std::move(lowered->output_names);
    out.loss_output = lowered->loss_output;
    out.training = g->training;
    auto sources = std::make_shared<SourceMap>();
    for (size_t i = 0; i < diags_.numFiles(); ++i)
      sources->addFile(diags_.file(static_cast<int>(i)).path, diags_.file(static_cast<int>(i)).text);
    for (auto& [n, origin] : lowered->origins) sources->setOrigin(n, std::move(origin));
    out.sources = std::move(sources);
    out.warnings = std::move(lowered->warnings);
    checkBindings(bindOrder, BindTarget{g, out.graph.get(), dimNames, &out.config}, diags_);
    stopIfErrors();
    return out;
  }

 private:
  void stopIfErrors() {
    if (diags_.errorCount() > 0) throw ParseError(diags_.render());
  }
  void plainError(const std::string& msg) { diags_.plainError(main_path_, msg); }

  // ---- files and imports ----
  static std::string keyOf(const std::string& path) {
    std::error_code ec;
    fs::path p = fs::weakly_canonical(fs::path(path), ec);
    if (ec) p = fs::path(path).lexically_normal();
    return p.string();
  }

  void load(const std::string& path, std::string text, std::vector<std::string>& stack) {
    std::string key = keyOf(path);
    stack.push_back(key);
    int id = diags_.addFile(path, std::move(text));
    auto ast = std::make_unique<FileAst>(parseFile(diags_.file(id).text, id, diags_));
    loaded_.insert(key);
    for (const ImportDecl& imp : ast->imports) {
      if (diags_.full()) break;
      std::vector<std::string> tried;
      std::optional<std::string> found, contents;
      std::vector<fs::path> dirs;
      fs::path target(imp.path);
      if (target.is_absolute()) dirs.push_back("");
      else {
        dirs.push_back(fs::path(path).parent_path());
        for (const auto& l : lib_paths_) dirs.push_back(l);
      }
      for (const auto& d : dirs) {
        if (std::find(tried.begin(), tried.end(), d.empty() ? target.string() : d.string()) != tried.end())
          continue;
        std::string cand = d.empty() ? target.string() : (d / target).lexically_normal().string();
        tried.push_back(d.empty() ? cand : d.string());
        if ((contents = read_(cand))) {
          found = cand;
          break;
        }
      }
      if (!found) {
        std::string where;
        for (const auto& t : tried) where += (where.empty() ? "" : ", ") + (t.empty() ? std::string(".") : t);
        diags_.error(imp.loc, fmt::format("cannot find imported file '{}' (looked in: {})", imp.path, where));
        continue;
      }
      std::string k = keyOf(*found);
      auto onStack = std::find(stack.begin(), stack.end(), k);
      if (onStack != stack.end()) {
        std::string cycle;
        for (auto it = onStack; it != stack.end(); ++it) cycle += fs::path(*it).filename().string() + " -> ";
        diags_.error(imp.loc, fmt::format("import cycle: {}{}", cycle, fs::path(k).filename().string()));
        continue;
      }
      if (loaded_.count(k)) continue;  // already loaded through another import
      if (stack.size() >= kMaxImportDepth || files_.size() + stack.size() >= kMaxFiles) {
        diags_.error(imp.loc, fmt::format("imports nest too deeply (more than {} files)", kMaxImportDepth));
        continue;
      }
      load(*found, std::move(*contents), stack);
    }
    stack.pop_back();
    files_.push_back(std::move(ast));  // dependencies first
  }

  // ---- globals ----
  std::set<std::string> defineDecls() {
    std::set<std::string> names;
    for (const auto& f : files_) {
      for (const auto& m : f->modules) {
        Val v;
        v.k = VK::Module;
        v.mod = m.get();
        ev_.defineGlobal(m->name, v, m->loc, "module");
        names.insert(m->name);
      }
      for (const auto& fn : f->fns) {
        Val v;
        v.k = VK::Fn;
        v.fn = fn.get();
        ev_.defineGlobal(fn->name, v, fn->loc, "function");
        names.insert(fn->name);
      }
      for (const auto& e : f->config) names.insert(e.name);
      for (const auto& d : f->dims) names.insert(d.name);
      for (const auto& s : f->lets) names.insert(s->names.begin(), s->names.end());
      for (const auto& g : f->graphs) {
        if (graphs_.count(g->name)) {
          diags_.error(g->loc, fmt::format("graph '{}' is defined twice", g->name));
          diags_.note(graphs_[g->name]->loc, "previous definition is here");
        }
        graphs_[g->name] = g.get();
      }
    }
    return names;
  }

  // ---- config ----
  enum class Kind { Int, Float, Bool, Str, DType };
  static const char* kindName(Kind k) {
    switch (k) {
      case Kind::Int: return "an int";
      case Kind::Float: return "a float";
      case Kind::Bool: return "a bool";
      case Kind::Str: return "a str";
      case Kind::DType: return "a dtype";
    }
    return "?";
  }
  static std::optional<Kind> kindOf(const Val& v) {
    switch (v.k) {
      case VK::Int: return Kind::Int;
      case VK::Float: return Kind::Float;
      case VK::Bool: return Kind::Bool;
      case VK::Str: return Kind::Str;
      case VK::DType: return Kind::DType;
      default: return std::nullopt;
    }
  }
  // A value for an entry of kind k (an int is a fine float), or nullopt.
  static std::optional<Val> coerce(const Val& v, Kind k) {
    auto vk = kindOf(v);
    if (!vk) return std::nullopt;
    if (*vk == k) return v;
    if (k == Kind::Float && *vk == Kind::Int) return Val::number(static_cast<double>(v.i));
    return std::nullopt;
  }
  static std::optional<Val> parseSetting(const std::string& s, Kind k) {
    errno = 0;
    char* end = nullptr;
    switch (k) {
      case Kind::Int: {
        long long v = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || *end || errno == ERANGE) return std::nullopt;
        return Val::integer(v);
      }
      case Kind::Float: {
        double v = std::strtod(s.c_str(), &end);
        if (s.empty() || *end || errno == ERANGE) return std::nullopt;
        return Val::number(v);
      }
      case Kind::Bool:
        if (s == "true" || s == "1") return Val::boolean(true);
        if (s == "false" || s == "0") return Val::boolean(false);
        return std::nullopt;
      case Kind::Str: return Val::str(s);
      case Kind::DType:
        if (auto d = parseDType(s)) return Val::dtype(*d);
        return std::nullopt;
    }
    return std::nullopt;
  }
  static ConfigValue toConfigValue(const Val& v) {
    switch (v.k) {
      case VK::Int: return v.i;
      case VK::Float: return v.f;
      case VK::Bool: return v.b;
      case VK::DType: return v.dt;
      default: return v.s;
    }
  }

  void resolveConfig(CompiledModel& out) {
    std::map<std::string, const ConfigEntry*> entries;
    std::vector<std::string> entryNames;
    for (const auto& f : files_)
      for (const auto& e : f->config) {
        entries.emplace(e.name, &e);
        entryNames.push_back(e.name);
      }
    std::map<std::string, const PresetDecl*> presets;
    std::vector<std::string> presetNames;
    for (const auto& f : files_)
      for (const auto& p : f->presets) {
        if (presets.count(p.name)) {
          diags_.error(p.loc, fmt::format("preset '{}' is defined twice", p.name));
          diags_.note(presets[p.name]->loc, "previous definition is here");
          continue;
        }
        presets[p.name] = &p;
        presetNames.push_back(p.name);
        std::set<std::string> seen;
        for (const auto& e : p.entries) {
          if (!entries.count(e.name))
            diags_.error(e.loc, fmt::format("preset '{}' sets '{}', which is not a config entry{}",
                                            p.name, e.name, didYouMean(e.name, entryNames)));
          else if (!seen.insert(e.name).second)
            diags_.error(e.loc, fmt::format("preset '{}' sets '{}' twice", p.name, e.name));
        }
      }
    const PresetDecl* preset = nullptr;
    if (!opts_.preset.empty()) {
      auto it = presets.find(opts_.preset);
      if (it == presets.end()) {
        std::string list;
        for (const auto& n : presetNames) list += (list.empty() ? "" : ", ") + n;
        plainError(fmt::format("unknown preset '{}'{} (presets: {})", opts_.preset,
                               didYouMean(opts_.preset, presetNames), list.empty() ? "none" : list));
      } else {
        preset = it->second;
      }
    }
    std::map<std::string, std::string> sets;
    for (const auto& [k, v] : opts_.sets) {
      if (!entries.count(k))
        plainError(fmt::format("--set {}: there is no config entry '{}'{}", k, k, didYouMean(k, entryNames)));
      sets[k] = v;
    }
    for (const auto& f : files_) {
      for (const auto& e : f->config) {
        try {
          std::optional<Kind> kind;
          if (e.type) {
            Val t = ev_.evalConst(*e.type);
            if (t.k == VK::Builtin && t.s == "int") kind = Kind::Int;
            else if (t.k == VK::Builtin && t.s == "float") kind = Kind::Float;
            else if (t.k == VK::Builtin && t.s == "str") kind = Kind::Str;
            else if (t.k == VK::DType && t.dt == DType::boolean) kind = Kind::Bool;
            else ev_.fail(e.type->loc, "a config entry's type is int, float, bool or str");
          }
          Val def = ev_.evalConst(*e.value);
          if (!kind) kind = kindOf(def);
          if (!kind)
            ev_.fail(e.value->loc, fmt::format("a config value must be an int, float, bool, str or "
                                               "dtype, got {}", describeVal(def)));
          auto defOk = coerce(def, *kind);
          if (!defOk)
            ev_.fail(e.value->loc, fmt::format("config entry '{}' is {} but its default is {}",
                                               e.name, kindName(*kind), describeVal(def)));
          Val v = *defOk;
          if (auto s = sets.find(e.name); s != sets.end()) {
            auto parsed = parseSetting(s->second, *kind);
            if (!parsed) {
              plainError(fmt::format("--set {}={}: expected {}", e.name, s->second, kindName(*kind)));
              throw EvalAbort{};
            }
            v = *parsed;
          } else if (preset) {
            for (const auto& pe : preset->entries) {
              if (pe.name != e.name) continue;
              Val pv = ev_.evalConst(*pe.value);
              auto ok = coerce(pv, *kind);
              if (!ok)
                ev_.fail(pe.value->loc, fmt::format("config entry '{}' is {}, but preset '{}' gives "
                                                    "{}", e.name, kindName(*kind), preset->name,
                                                    describeVal(pv)));
              v = *ok;
            }
          }
          if (ev_.defineGlobal(e.name, v, e.loc, "config entry"))
            out.config.emplace_back(e.name, toConfigValue(v));
        } catch (const EvalAbort&) {
          ev_.defineGlobal(e.name, Val::error(), e.loc, "config entry");
        } catch (const EvalFatal&) {
          return;
        }
      }
    }
  }

  std::vector<std::pair<std::string, int64_t>> bindDims() {
    std::map<std::string, int64_t> given;
    std::vector<std::string> declared;
    for (const auto& f : files_)
      for (const auto& d : f->dims) declared.push_back(d.name);
    for (const auto& [k, v] : opts_.dims) {
      if (std::find(declared.begin(), declared.end(), k) == declared.end())
        plainError(fmt::format("--dim {}: the model declares no dim '{}'{}", k, k, didYouMean(k, declared)));
      else if (v < 1)
        plainError(fmt::format("--dim {}={}: a dim must be at least 1", k, v));
      given[k] = v;
    }
    std::vector<std::pair<std::string, int64_t>> bound;
    for (const auto& f : files_) {
      for (const auto& d : f->dims) {
        try {
          std::optional<int64_t> size;
          if (auto it = given.find(d.name); it != given.end()) {
            size = it->second;
          } else if (d.def) {
            Val v = ev_.evalConst(*d.def);
            if (v.k != VK::Int || v.i < 1)
              ev_.fail(d.def->loc, fmt::format("the size of dim '{}' must be a positive int, got {}", d.name,
                                               v.k == VK::Int ? std::to_string(v.i) : describeVal(v)));
            size = v.i;
          }
          if (!size) {
            if (!ev_.isBuiltin(d.name) && !ev_.globals().count(d.name)) ev_.declareUnboundDim(d.name);
            else ev_.defineGlobal(d.name, Val::none(), d.loc, "dim");
            continue;
          }
          if (ev_.defineGlobal(d.name, Val::integer(*size), d.loc, "dim")) {
            ev_.declareDim(d.name);
            bound.emplace_back(d.name, *size);
          }
        } catch (const EvalAbort&) {
          ev_.defineGlobal(d.name, Val::error(), d.loc, "dim");
        } catch (const EvalFatal&) {
          break;
        }
      }
    }
    return bound;
  }

  const GraphDecl* selectGraph(CompiledModel& out) {
    // The main file's graphs come first.
    std::vector<const GraphDecl*> all;
    for (const auto& g : files_.back()->graphs) all.push_back(g.get());
    for (size_t i = 0; i + 1 < files_.size(); ++i)
      for (const auto& g : files_[i]->graphs) all.push_back(g.get());
    for (const auto* g : all) out.graph_names.push_back(g->name);
    if (all.empty()) {
      plainError("the model has no graphs: declare one with 'graph name(inputs) { ... }'");
      return nullptr;
    }
    std::string want = opts_.graph;
    if (want.empty()) want = graphs_.count("train") ? "train" : all[0]->name;
    auto it = graphs_.find(want);
    if (it == graphs_.end()) {
      std::string list;
      for (const auto& n : out.graph_names) list += (list.empty() ? "" : ", ") + n;
      plainError(fmt::format("no graph named '{}'{} (graphs: {})", want,
                             didYouMean(want, out.graph_names), list));
      return nullptr;
    }
    return it->second;
  }

  const ModelOptions& opts_;
  std::function<std::optional<std::string>(const std::string&)> read_;
  std::vector<std::string> lib_paths_;
  Diags diags_;
  Evaluator ev_;
  std::string main_path_;
  std::vector<std::unique_ptr<FileAst>> files_;
  std::set<std::string> loaded_;
  std::map<std::string, const GraphDecl*> graphs_;
};

}  // namespace

CompiledModel compileModelFile(const std::string& path, const ModelOptions& opts) {
  return Compiler(opts).run(path, std::nullopt);
}

CompiledModel compileModelSource(const std::string& text, const std::string& filename,
                                 const ModelOptions& opts) {
  return Compiler(opts).run(filename, text);
}

}  // namespace tgc
