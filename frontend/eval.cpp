// The evaluator's values, its global namespace (setup, errors, limits) and its entry points:
// top-level code and the lowering of one graph. Expressions, calls, statements and tensors
// are in eval_expr.cpp, eval_call.cpp, eval_stmt.cpp and eval_tensor.cpp.
#include "frontend/eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <unordered_set>

#include "ir/verifier.h"

namespace tgc::fe {

std::string describeVal(const Val& v) {
  switch (v.k) {
    case VK::None: return "nothing (a call that returns no value)";
    case VK::Int: return "an int";
    case VK::Float: return "a float";
    case VK::Bool: return "a bool";
    case VK::Str: return "a str";
    case VK::DType: return "a dtype";
    case VK::Type: return fmt::format("the tensor type {}", v.tensorType().str());
    case VK::TypeName: return "a type name";
    case VK::Tensor: return fmt::format("a tensor {}", v.t->type().str());
    case VK::List: return "a list";
    case VK::Fn: return fmt::format("the function '{}'", v.fn->name);
    case VK::Module: return fmt::format("the module '{}'", v.mod->name);
    case VK::Inst: return fmt::format("an instance of module '{}'", v.inst->decl->name);
    case VK::Builtin: return "a builtin function";
    case VK::ParamRef: return "a parameter";
    case VK::Error: return "an error";
  }
  return "a value";
}

std::string Instance::path() const {
  if (!named) return "";
  if (!has_owner) return local;
  auto o = owner.lock();
  if (!o) return "";
  std::string p = o->path();
  return p.empty() ? "" : p + "." + local;
}

// ---- setup ----------------------------------------------------------------------------------

Evaluator::Evaluator(Diags& d) : d_(d) {
  for (const OpInfo& info : allOps()) {
    if (info.kind == OpKind::Input) continue;  // inputs are graph parameters
    Val v;
    v.k = VK::Builtin;
    v.builtin = BuiltinId::Op;
    v.i = static_cast<int64_t>(info.kind);
    builtins_[std::string(info.name)] = v;
  }
  const std::pair<const char*, BuiltinId> fns[] = {
      {"dropout", BuiltinId::Dropout}, {"sinusoidal_table", BuiltinId::SinusoidalTable},
      {"zeros", BuiltinId::Zeros},     {"ones", BuiltinId::Ones},
      {"full", BuiltinId::Full},       {"len", BuiltinId::Len},
      {"min", BuiltinId::Min},         {"max", BuiltinId::Max},
      {"int", BuiltinId::ToInt},       {"float", BuiltinId::ToFloat},
      {"str", BuiltinId::ToStr},       {"floor", BuiltinId::Floor},
      {"ceil", BuiltinId::Ceil},       {"assert", BuiltinId::Assert},
      {"error", BuiltinId::Fail},
  };
  for (auto& [n, id] : fns) {
    Val v;
    v.k = VK::Builtin;
    v.builtin = id;
    builtins_[n] = v;
  }
  // int, float and str are also conversion functions; as annotations they name the kind.
  for (DType dt : kAllDTypes) builtins_[std::string(dtypeName(dt))] = Val::dtype(dt);
  builtins_["inf"] = Val::number(std::numeric_limits<double>::infinity());
  builtins_["nan"] = Val::number(std::numeric_limits<double>::quiet_NaN());
  builtins_["pi"] = Val::number(3.14159265358979323846);
  // The top-level frame (config, dims, top-level lets).
  auto top = std::make_unique<Frame>();
  top->kind = FrameKind::TopLevel;
  frames_.push_back(std::move(top));
}

std::vector<std::string> Evaluator::builtinNames() const {
  std::vector<std::string> r;
  for (const auto& [k, v] : builtins_) r.push_back(k);
  r.push_back("training");
  std::sort(r.begin(), r.end());
  return r;
}

bool Evaluator::defineGlobal(const std::string& name, Val v, Loc loc, const char* what) {
  if (builtins_.count(name) || name == "training") {
    d_.error(loc, fmt::format("{} '{}' has the name of a builtin; choose another name", what, name));
    return false;
  }
  auto it = global_locs_.find(name);
  if (it != global_locs_.end()) {
    d_.error(loc, fmt::format("'{}' is already defined", name));
    d_.note(it->second, "previous definition is here");
    return false;
  }
  globals_[name] = std::move(v);
  global_locs_[name] = loc;
  return true;
}

void Evaluator::fail(Loc loc, const std::string& msg) {
  d_.error(loc, msg);
  // Show where the failing function or module was called from (innermost first).
  int shown = 0;
  for (size_t i = frames_.size(); i-- > 1 && shown < 4;) {
    const Frame& f = *frames_[i];
    if (f.kind == FrameKind::Function || f.kind == FrameKind::Method) {
      d_.note(f.call_site, fmt::format("in call to '{}'", f.fn_name));
      ++shown;
    } else if (f.kind == FrameKind::ModuleBody) {
      d_.note(f.call_site, fmt::format("in instantiation of module '{}'", f.fn_name));
      ++shown;
    }
  }
  if (d_.full()) throw EvalFatal{};
  throw EvalAbort{};
}

void Evaluator::tick(Loc loc) {
  if (++steps_ > kMaxEvalSteps) {
    d_.error(loc, fmt::format("evaluation limit exceeded ({} steps): is a loop or a recursion "
                              "too long?", kMaxEvalSteps));
    throw EvalFatal{};
  }
}

Evaluator::DepthGuard::DepthGuard(Evaluator& ev, Loc loc) : e(ev) {
  // Checked before counting: when the constructor throws, the destructor does not run.
  if (e.depth_ >= kMaxEvalDepth)
    e.fail(loc, fmt::format("evaluation is nested too deeply (more than {} levels): is a "
                            "function or module recursive?", kMaxEvalDepth));
  ++e.depth_;
}

std::vector<std::string> Evaluator::visibleNames() const {
  std::vector<std::string> r;
  const Frame& f = *frames_.back();
  for (const auto& [k, v] : f.locals) r.push_back(k);
  if (f.self) {
    for (const auto& [k, v] : f.self->members) r.push_back(k);
    for (const auto& [k, v] : f.self->methods) r.push_back(k);
  }
  for (const auto& [k, v] : globals_) r.push_back(k);
  for (const auto& k : unbound_dims_) r.push_back(k);
  for (const auto& k : builtinNames()) r.push_back(k);
  return r;
}

// ---- top level ------------------------------------------------------------------------------

Val Evaluator::evalConst(const Expr& e) {
  ++no_tensors_;
  struct Restore {
    int& n;
    ~Restore() { --n; }
  } restore{no_tensors_};
  return eval(e);
}

void Evaluator::execTopLet(const Stmt& s) {
  ++no_tensors_;
  struct Restore {
    int& n;
    ~Restore() { --n; }
  } restore{no_tensors_};
  try {
    execStmt(s);
  } catch (const EvalAbort&) {
    for (const auto& n : s.names)
      if (!globals_.count(n)) defineGlobal(n, Val::error(), s.loc, "'let'");
  }
}

// Rebuilds the graph with its inputs first: data inputs in declaration order, then the
// parameters in first-use order; patches the dropout counter stride.
static std::unique_ptr<Graph> finishGraph(const Graph& g, const std::vector<Value*>& params,
                                          const Node* placeholder, int64_t dropoutElements,
                                          std::unordered_map<const Node*, const Node*>& copied) {
  auto out = std::make_unique<Graph>(g.name());
  out->setDims(g.dims());
  std::unordered_map<const Value*, Value*> map;
  auto copy = [&](const Node& n) {
    std::vector<Value*> ops;
    for (Value* o : n.operands()) ops.push_back(map.at(o));
    std::vector<std::string> names;
    std::vector<TensorType> types;
    for (size_t i = 0; i < n.numResults(); ++i) {
      names.push_back(n.result(i)->name());
      types.push_back(n.result(i)->type());
    }
    AttrMap attrs = n.attrs();
    if (&n == placeholder) attrs["value"] = std::vector<double>{static_cast<double>(dropoutElements)};
    Node* c = out->add(n.op(), ops, attrs, names, types);
    copied[&n] = c;
    for (size_t i = 0; i < n.numResults(); ++i) map[n.result(i)] = c->result(i);
  };
  std::set<const Node*> isParam;
  for (Value* p : params) isParam.insert(p->def());
  for (const auto& n : g.nodes())
    if (n->op() == OpKind::Input && !isParam.count(n.get())) copy(*n);
  for (Value* p : params) copy(*p->def());
  for (const auto& n : g.nodes())
    if (n->op() != OpKind::Input) copy(*n);
  std::vector<Value*> outs;
  for (Value* o : g.outputs()) outs.push_back(map.at(o));
  out->setOutputs(std::move(outs));
  return out;
}

namespace {
// The value of a splat constant, or nullopt.
std::optional<double> splat(const Value* v) {
  const Node* n = v->def();
  if (n->op() != OpKind::Constant || v->type().numel() == 0) return std::nullopt;
  const auto& values = n->attrFloats("value");
  if (values.size() != 1) return std::nullopt;
  return values[0];
}
}  // namespace

// A value the graph computes that no output needs and nothing else reads, not even at
// compile time (x.shape): the statement that made it has no effect, which is a bug as often
// as not (a where whose result is dropped leaves the scores unmasked). Only the last value of
// such a chain is named.
void Evaluator::warnUnusedValues() {
  std::unordered_set<const Node*> live;
  std::vector<const Node*> work;
  for (const Value* o : g_->outputs()) work.push_back(o->def());
  while (!work.empty()) {
    const Node* n = work.back();
    work.pop_back();
    if (!live.insert(n).second) continue;
    for (const Value* o : n->operands()) work.push_back(o->def());
  }
  const auto users = g_->computeUsers();
  for (const auto& node : g_->nodes()) {
    const Node* n = node.get();
    if (live.count(n) || n->op() == OpKind::Input || n->op() == OpKind::Constant ||
        read_at_compile_time_.count(n))
      continue;
    bool read = false;
    for (size_t i = 0; i < n->numResults(); ++i) read = read || users.count(n->result(i));
    auto origin = origins_.find(n);
    if (read || origin == origins_.end()) continue;
    ModelWarning w;
    w.name = "unused-value";
    w.at = origin->second.at;
    w.calls = origin->second.calls;
    const std::string name = n->result()->name();
    w.message = fmt::format("'{}' ({}) is computed but never used", name, opName(n->op()));
    w.fix = "use the result (assign it: x = ...) or delete the statement";
    if (n->op() == OpKind::Where && n->operand(0)->type().dtype == DType::boolean) {
      for (size_t side : {1u, 2u}) {
        auto fill = splat(n->operand(side));
        if (fill && *fill <= -1e4) {
          w.message += ": the mask does not apply, the values it would mask go on as they were";
          w.fix = "assign the masked value back, e.g. s = where(mask, s, -inf), and use it";
          break;
        }
      }
    }
    warnings_.push_back(std::move(w));
  }
}

std::optional<LoweredGraph> Evaluator::lowerGraph(
    const GraphDecl& gd, const std::vector<std::pair<std::string, int64_t>>& dims) {
  size_t errorsBefore = d_.errorCount();
  auto graph = std::make_unique<Graph>(gd.name);
  std::set<std::string> usedBefore = dims_used_;  // by config, dims and top-level lets
  g_ = graph.get();
  training_ = gd.training;
  seed_ = step_ = nullptr;
  param_uses_.clear();
  param_order_.clear();
  param_slots_.clear();
  let_named_.clear();
  outputs_.clear();
  dropout_step_offset_ = nullptr;
  dropout_placeholder_ = nullptr;
  dropout_elements_ = 0;
  origins_.clear();
  read_at_compile_time_.clear();
  warnings_.clear();
  struct Reset {
    Evaluator& e;
    ~Reset() {
      e.g_ = nullptr;
      e.training_ = false;
    }
  } reset{*this};

  auto fr = std::make_unique<Frame>();
  fr->kind = FrameKind::Graph;
  fr->fn_name = gd.name;
  frames_.push_back(std::move(fr));
  struct Pop {
    std::vector<std::unique_ptr<Frame>>& f;
    ~Pop() { f.pop_back(); }
  } pop{frames_};

  try {
    for (const ParamDecl& p : gd.params) {
      try {
        if (p.def) fail(p.def->loc, "graph inputs cannot have default values");
        if (!p.type)
          fail(p.loc, fmt::format("graph input '{}' needs a tensor type, e.g. {}: f32[B, S, 512]",
                                  p.name, p.name));
        ++no_tensors_;
        Val t;
        try {
          t = eval(*p.type);
        } catch (...) {
          --no_tensors_;
          throw;
        }
        --no_tensors_;
        if (t.k != VK::Type)
          fail(p.type->loc, fmt::format("graph input '{}' needs a tensor type such as f32[B, S], got "
                                        "{}", p.name, describeVal(t)));
        if (gd.training && (p.name == "seed" || p.name == "step") &&
            t.tensorType() != TensorType{DType::i64, {}})
          fail(p.type->loc, fmt::format("'{}' of a training graph must be i64[]", p.name));
        Value* v = addNode(p.loc, OpKind::Input, {}, {}, p.name, t.tensorType()).t;
        frame().locals[p.name] = Val::tensor(v);
      } catch (const EvalAbort&) {
        frame().failed = true;
        frame().locals[p.name] = Val::error();
      }
    }
    if (gd.training) {
      // The dropout masks are keyed by (seed, step); both are inputs of every training graph.
      for (const char* n : {"seed", "step"}) {
        auto it = frame().locals.find(n);
        Value* v = it != frame().locals.end() && it->second.k == VK::Tensor ? it->second.t : nullptr;
        if (!v && it == frame().locals.end()) {
          v = addNode(gd.loc, OpKind::Input, {}, {}, n, TensorType{DType::i64, {}}).t;
          frame().locals[n] = Val::tensor(v);
        }
        (std::string(n) == "seed" ? seed_ : step_) = v;
      }
    }
    if (!frame().failed) execBlock(gd.body);
  } catch (const EvalFatal&) {
    return std::nullopt;
  }
  if (d_.errorCount() > errorsBefore || frame().failed) return std::nullopt;
  if (outputs_.empty()) {
    d_.error(gd.loc, fmt::format("graph '{}' has no outputs: add 'output name = value'", gd.name));
    return std::nullopt;
  }
  std::vector<std::pair<std::string, int64_t>> used;
  for (const auto& d : dims)
    if (dims_used_.count(d.first)) used.push_back(d);
  g_->setDims(std::move(used));
  dims_used_ = std::move(usedBefore);
  LoweredGraph r;
  for (size_t i = 0; i < outputs_.size(); ++i) {
    g_->addOutput(outputs_[i].value);
    r.output_names.push_back(outputs_[i].name);
    if (outputs_[i].name == "loss") r.loss_output = static_cast<int>(i);
  }
  if (gd.training && r.loss_output < 0) {
    d_.error(gd.loc, fmt::format("training graph '{}' needs an output named 'loss'", gd.name));
    return std::nullopt;
  }
  warnUnusedValues();
  r.warnings = std::move(warnings_);
  try {
    std::unordered_map<const Node*, const Node*> copied;
    r.graph = finishGraph(*g_, param_order_, dropout_placeholder_, dropout_elements_, copied);
    for (auto& [from, origin] : origins_) r.origins.emplace(copied.at(from), std::move(origin));
  } catch (const IRError& e) {
    d_.error(gd.loc, fmt::format("internal error: cannot finish graph '{}': {}", gd.name, e.what()));
    return std::nullopt;
  }
  r.params = param_slots_;
  auto problems = verifyGraph(*r.graph);
  if (!problems.empty()) {
    d_.error(gd.loc, fmt::format("internal error: the lowered graph does not verify: {}", problems[0]));
    return std::nullopt;
  }
  return r;
}

}  // namespace tgc::fe
