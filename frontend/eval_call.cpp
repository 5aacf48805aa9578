// The evaluator's calls: binding arguments to parameters, type annotations, calling functions
// and methods, and instantiating modules. Builtins are in builtins.cpp.
#include "frontend/eval.h"

#include <fmt/format.h>

#include <algorithm>

#include "frontend/eval_internal.h"

namespace tgc::fe {

Val Evaluator::call(const Val& callee, std::vector<ArgVal> args, Loc loc) {
  switch (callee.k) {
    case VK::Fn:
      if (callee.b)
        fail(loc, fmt::format("method '{}' belongs to a module instance that no longer exists",
                              callee.fn->name));
      return callFunction(*callee.fn, callee.inst, std::move(args), loc);
    case VK::Module: return instantiate(*callee.mod, std::move(args), loc);
    case VK::Inst: {
      auto it = callee.inst->methods.find("forward");
      if (it == callee.inst->methods.end())
        fail(loc, fmt::format("module '{}' has no 'forward' method, so its instances cannot be "
                              "called", callee.inst->decl->name));
      return callFunction(*it->second, callee.inst, std::move(args), loc);
    }
    case VK::Builtin: return callBuiltin(callee, std::move(args), loc);
    default: break;
  }
  fail(loc, fmt::format("{} cannot be called", describeVal(callee)));
}

namespace {
// Pops a frame and restores counters however the callee exits.
struct FrameScope {
  std::vector<std::unique_ptr<Evaluator::Frame>>& frames;
  int& callDepth;
  int* noTensors;
  ~FrameScope() {
    frames.pop_back();
    --callDepth;
    if (noTensors) --*noTensors;
  }
};
}  // namespace

void Evaluator::bindArgs(Frame& f, const std::string& what, const std::vector<ParamDecl>& params,
                         std::vector<ArgVal> args, Loc loc, bool intoMembers) {
  std::vector<std::optional<Val>> slots(params.size());
  std::vector<Loc> argLocs(params.size(), loc);
  size_t pos = 0;
  for (auto& a : args) {
    size_t idx;
    if (a.name.empty()) {
      if (pos >= params.size())
        fail(a.loc, fmt::format("{} takes {} argument{}, got {}", what, params.size(),
                                params.size() == 1 ? "" : "s", args.size()));
      idx = pos++;
    } else {
      auto it = std::find_if(params.begin(), params.end(),
                             [&](const ParamDecl& p) { return p.name == a.name; });
      if (it == params.end()) {
        std::vector<std::string> names;
        for (const auto& p : params) names.push_back(p.name);
        fail(a.loc, fmt::format("{} has no parameter '{}'{}", what, a.name, didYouMean(a.name, names)));
      }
      idx = static_cast<size_t>(it - params.begin());
      if (slots[idx]) fail(a.loc, fmt::format("argument '{}' is given twice", a.name));
    }
    slots[idx] = std::move(a.v);
    argLocs[idx] = a.loc;
  }
  // Bind in order so that defaults and annotations can use earlier parameters.
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamDecl& p = params[i];
    Val v;
    if (slots[i]) {
      v = std::move(*slots[i]);
    } else if (p.def) {
      v = eval(*p.def);
    } else {
      fail(loc, fmt::format("missing argument '{}' in call to {}", p.name, what));
    }
    if (p.type) v = checkAnnotation(v, eval(*p.type), argLocs[i], fmt::format("argument '{}' of {}", p.name, what));
    if (intoMembers) {
      f.self->members[p.name] = toMemberForm(v);
      f.self->member_locs[p.name] = p.loc;
    } else {
      f.locals[p.name] = std::move(v);
    }
  }
}

Val Evaluator::checkAnnotation(const Val& v, const Val& type, Loc loc, const std::string& what) {
  auto bad = [&](const std::string& want) {
    fail(loc, fmt::format("{} must be {}, got {}", what, want, describeVal(v)));
  };
  if (type.k == VK::Builtin && (type.s == "int" || type.s == "float" || type.s == "str")) {
    if (type.s == "int") {
      if (v.k != VK::Int) bad("an int");
      return v;
    }
    if (type.s == "float") {
      if (!v.isNumber()) bad("a float");
      return Val::number(v.num());
    }
    if (v.k != VK::Str) bad("a str");
    return v;
  }
  if (type.k == VK::DType) {
    if (type.dt == DType::boolean && v.k == VK::Bool) return v;
    if (v.k == VK::Tensor && v.t->type().dtype == type.dt) return v;
    if (type.dt == DType::boolean) bad("a bool or a bool tensor");
    bad(fmt::format("a {} tensor", dtypeName(type.dt)));
  }
  if (type.k == VK::Type) {
    if (v.k == VK::Tensor && v.t->type() == type.tensorType()) return v;
    bad(type.tensorType().str());
  }
  fail(loc, fmt::format("the annotation of {} must be a type (int, float, bool, str, a dtype or a "
                        "tensor type such as f32[B, S]), got {}", what, describeVal(type)));
}

Val Evaluator::callFunction(const FnDecl& fn, const std::shared_ptr<Instance>& self,
                            std::vector<ArgVal> args, Loc loc) {
  if (call_depth_ >= kMaxCallDepth)
    fail(loc, fmt::format("calls nest more than {} deep: is '{}' recursive without end?",
                          kMaxCallDepth, fn.name));
  auto fr = std::make_unique<Frame>();
  fr->kind = self ? FrameKind::Method : FrameKind::Function;
  fr->self = self;
  fr->fn_name = self ? self->decl->name + "." + fn.name : fn.name;
  fr->call_site = loc;
  if (self) {
    std::string p = self->path();
    if (p.empty()) p = irName(self->decl->name);
    fr->prefix = fn.name == "forward" ? p : p + "." + fn.name;
  } else {
    fr->prefix = irName(fn.name);
  }
  ++call_depth_;
  frames_.push_back(std::move(fr));
  FrameScope scope{frames_, call_depth_, nullptr};
  Frame& f = frame();
  bindArgs(f, fmt::format("'{}'", f.fn_name), fn.params, std::move(args), loc, false);
  execBlock(fn.body);
  if (f.failed) throw EvalAbort{};
  return f.ret;
}

Val Evaluator::instantiate(const ModuleDecl& m, std::vector<ArgVal> args, Loc loc) {
  if (call_depth_ >= kMaxCallDepth)
    fail(loc, fmt::format("module instantiations nest more than {} deep: does '{}' contain "
                          "itself?", kMaxCallDepth, m.name));
  auto inst = std::make_shared<Instance>();
  inst->decl = &m;
  auto fr = std::make_unique<Frame>();
  fr->kind = FrameKind::ModuleBody;
  fr->self = inst;
  fr->fn_name = m.name;
  fr->call_site = loc;
  ++call_depth_;
  ++no_tensors_;
  frames_.push_back(std::move(fr));
  FrameScope scope{frames_, call_depth_, &no_tensors_};
  Frame& f = frame();
  bindArgs(f, fmt::format("module '{}'", m.name), m.params, std::move(args), loc, true);
  execBlock(m.body);
  if (f.failed) throw EvalAbort{};
  Val v;
  v.k = VK::Inst;
  v.inst = inst;
  return v;
}

}  // namespace tgc::fe
