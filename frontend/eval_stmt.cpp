// The evaluator's statements: let and assignment (binding and naming what they bind), return,
// if, for, outputs and the 'param' declarations of module bodies.
#include "frontend/eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "frontend/eval_internal.h"

namespace tgc::fe {

void Evaluator::execBlock(const std::vector<StmtPtr>& body) {
  for (const auto& s : body) {
    try {
      execStmt(*s);
    } catch (const EvalAbort&) {
      frame().failed = true;
      poison(*s);
    }
    if (frame().returned) return;
  }
}

void Evaluator::poison(const Stmt& s) {
  if (s.kind != StmtKind::Let && s.kind != StmtKind::Assign) return;
  Frame& f = frame();
  for (const auto& n : s.names) {
    if (f.kind == FrameKind::ModuleBody) f.self->members[n] = Val::error();
    else if (f.kind == FrameKind::TopLevel) globals_[n] = Val::error();
    else f.locals[n] = Val::error();
  }
}

void Evaluator::nameInstances(const Val& v, const std::shared_ptr<Instance>& owner,
                              const std::string& local) {
  if (v.k == VK::Inst && !v.inst->named) {
    v.inst->named = true;
    v.inst->local = local;
    if (owner) {
      v.inst->owner = owner;
      v.inst->has_owner = true;
    }
  } else if (v.k == VK::List) {
    for (size_t i = 0; i < v.list->size(); ++i)
      nameInstances((*v.list)[i], owner, fmt::format("{}.{}", local, i));
  }
}

void Evaluator::nameValue(const Val& v, const std::string& name, size_t nodesBefore) {
  if (v.k != VK::Tensor || !g_ || let_named_.count(v.t)) return;
  Node* def = v.t->def();
  if (def->op() == OpKind::Input) return;
  const auto& nodes = g_->nodes();
  for (size_t i = nodesBefore; i < nodes.size(); ++i) {
    if (nodes[i].get() == def) {
      g_->renameValue(v.t, irName(name));
      let_named_.insert(v.t);
      return;
    }
  }
}

void Evaluator::bind(const std::string& name, Val v, Loc loc, bool isLet) {
  Frame& f = frame();
  switch (f.kind) {
    case FrameKind::ModuleBody: {
      if (f.self->methods.count(name))
        fail(loc, fmt::format("'{}' is already a method of module '{}'", name, f.self->decl->name));
      auto it = f.self->members.find(name);
      if (it != f.self->members.end() && it->second.k == VK::ParamRef)
        fail(loc, fmt::format("'{}' is already a parameter of module '{}'", name, f.self->decl->name));
      if (!isLet && it == f.self->members.end())
        fail(loc, fmt::format("cannot assign to '{}': it is not defined (use 'let {} = ...')", name, name));
      nameInstances(v, f.self, name);
      f.self->members[name] = toMemberForm(v);
      f.self->member_locs[name] = loc;
      return;
    }
    case FrameKind::TopLevel:
      nameInstances(v, nullptr, name);
      if (isLet) {
        defineGlobal(name, std::move(v), loc, "'let'");
        return;
      }
      fail(loc, fmt::format("cannot assign to global '{}'", name));
    default: break;
  }
  if (!isLet && !f.locals.count(name)) {
    if (f.self && (f.self->members.count(name) || f.self->methods.count(name)))
      fail(loc, fmt::format("cannot assign to '{}', a member of module '{}', inside a method", name,
                            f.self->decl->name));
    if (globals_.count(name)) fail(loc, fmt::format("cannot assign to global '{}'", name));
    fail(loc, fmt::format("cannot assign to '{}': it is not defined (use 'let {} = ...'){}", name,
                          name, didYouMean(name, visibleNames())));
  }
  nameInstances(v, nullptr, irName(name));
  f.locals[name] = std::move(v);
}

void Evaluator::execStmt(const Stmt& s) {
  DepthGuard guard(*this, s.loc);
  tick(s.loc);
  if (d_.full()) throw EvalFatal{};
  Frame& f = frame();
  switch (s.kind) {
    case StmtKind::Let:
    case StmtKind::Assign: {
      size_t before = g_ ? g_->size() : 0;
      Val v = eval(*s.value);
      if (v.k == VK::None)
        fail(s.value->loc, "this expression gives no value (the function has no 'return')");
      if (s.names.size() == 1) {
        nameValue(v, s.names[0], before);
        bind(s.names[0], std::move(v), s.name_locs[0], s.kind == StmtKind::Let);
        return;
      }
      if (v.k != VK::List || v.list->size() != s.names.size())
        fail(s.value->loc, fmt::format("cannot unpack {} into {} names", v.k == VK::List
                                           ? fmt::format("a list of {}", v.list->size())
                                           : describeVal(v), s.names.size()));
      for (size_t i = 0; i < s.names.size(); ++i) {
        nameValue((*v.list)[i], s.names[i], before);
        bind(s.names[i], (*v.list)[i], s.name_locs[i], true);
      }
      return;
    }
    case StmtKind::Return:
      if (f.kind != FrameKind::Function && f.kind != FrameKind::Method)
        fail(s.loc, "'return' is only allowed in a function or method");
      f.ret = s.value ? eval(*s.value) : Val::none();
      f.returned = true;
      return;
    case StmtKind::If: {
      Val c = eval(*s.cond);
      if (c.k == VK::Tensor)
        fail(s.cond->loc, "'if' needs a compile-time condition, but this is a tensor; use "
                          "where(cond, a, b) to choose elementwise");
      if (c.k != VK::Bool)
        fail(s.cond->loc, fmt::format("'if' condition must be a bool, got {}", describeVal(c)));
      execBlock(c.b ? s.body : s.else_body);
      return;
    }
    case StmtKind::For: {
      Val lo = eval(*s.value);
      if (s.hi) {
        // Ranges are counted, not materialized; the step budget bounds long loops.
        Val hi = eval(*s.hi);
        if (lo.k != VK::Int || hi.k != VK::Int)
          fail(s.value->loc, fmt::format("a range a..b needs two integers, got {} and {}",
                                         describeVal(lo), describeVal(hi)));
        for (int64_t i = lo.i; i < hi.i; ++i) {
          tick(s.loc);
          frame().locals[s.names[0]] = Val::integer(i);
          execBlock(s.body);
          if (frame().returned) return;
        }
        return;
      }
      std::vector<Val> seq = iterate(lo, nullptr, s.value->loc);
      for (Val& x : seq) {
        tick(s.loc);
        frame().locals[s.names[0]] = std::move(x);
        execBlock(s.body);
        if (frame().returned) return;
      }
      return;
    }
    case StmtKind::Param:
      if (f.kind != FrameKind::ModuleBody)
        fail(s.loc, "'param' declarations belong in a module body");
      declareParam(s);
      return;
    case StmtKind::Fn:
      if (f.kind != FrameKind::ModuleBody)
        fail(s.loc, "functions are defined at the top level of a file or as methods in a module "
                    "body");
      if (f.self->members.count(s.fn->name) || f.self->methods.count(s.fn->name))
        fail(s.fn->loc, fmt::format("'{}' is already defined in module '{}'", s.fn->name,
                                    f.self->decl->name));
      f.self->methods[s.fn->name] = s.fn.get();
      return;
    case StmtKind::Output: {
      if (f.kind != FrameKind::Graph) fail(s.loc, "'output' is only allowed in a graph body");
      const std::string& name = s.names[0];
      for (const auto& o : outputs_)
        if (o.name == name) fail(s.name_locs[0], fmt::format("output '{}' is defined twice", name));
      Val v = eval(*s.value);
      if (v.k != VK::Tensor)
        fail(s.value->loc, fmt::format("an output must be a tensor, got {}", describeVal(v)));
      if (name == "loss" && !(isFloat(v.t->type().dtype) && v.t->type().rank() == 0))
        fail(s.value->loc, fmt::format("the loss must be a float scalar, got {}", v.t->type().str()));
      if (v.t->def()->op() != OpKind::Input) {
        g_->renameValue(v.t, name);
        let_named_.insert(v.t);
      }
      outputs_.push_back(OutputDecl{name, v.t, s.loc});
      return;
    }
    case StmtKind::ExprStmt: {
      eval(*s.value);
      return;
    }
  }
}

void Evaluator::declareParam(const Stmt& s) {
  Frame& f = frame();
  const std::string& name = s.names[0];
  if (f.self->members.count(name) || f.self->methods.count(name))
    fail(s.name_locs[0], fmt::format("'{}' is already defined in module '{}'", name, f.self->decl->name));
  Val t = eval(*s.type);
  if (t.k != VK::Type)
    fail(s.type->loc, fmt::format("a parameter's type must be a tensor type such as "
                                  "f32[d_in, d_out], got {}", describeVal(t)));
  ParamSlot slot;
  slot.name = name;
  slot.type = t.tensorType();
  slot.loc = s.loc;
  if (!isFloat(slot.type.dtype))
    fail(s.type->loc, fmt::format("parameters are trainable, so their type must be a float type, "
                                  "got {}", slot.type.str()));
  static const std::vector<std::string> kinds = {"xavier_uniform", "xavier_normal", "normal",
                                                 "uniform", "zeros", "ones", "constant"};
  if (!s.value) {
    slot.init = slot.type.rank() >= 2 ? "xavier_uniform" : "zeros";
    slot.arg = slot.init == "xavier_uniform" ? 1.0 : 0.0;
  } else {
    const Expr& e = *s.value;
    const Expr* callee = e.kind == ExprKind::Call ? e.kids[0].get() : &e;
    if (callee->kind != ExprKind::Name)
      fail(e.loc, "a parameter initializer is one of xavier_uniform, xavier_normal, normal(std), "
                  "uniform(bound), zeros, ones or constant(value)");
    slot.init = callee->text;
    if (std::find(kinds.begin(), kinds.end(), slot.init) == kinds.end())
      fail(callee->loc, fmt::format("unknown initializer '{}'{} (known: xavier_uniform, "
                                    "xavier_normal, normal, uniform, zeros, ones, constant)",
                                    slot.init, didYouMean(slot.init, kinds)));
    bool takesArg = slot.init != "zeros" && slot.init != "ones";
    // Defaults: gain 1 for Xavier, std 1 for normal, 1/sqrt(fan_in) for uniform (as PyTorch's
    // Linear); constant needs its value.
    int64_t fanIn = slot.type.rank() >= 2 ? slot.type.shape[slot.type.shape.size() - 2]
                    : slot.type.rank() == 1 ? slot.type.shape[0] : 1;
    slot.arg = slot.init == "uniform" ? 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(fanIn, 1)))
                                      : slot.init.rfind("xavier", 0) == 0 || slot.init == "normal" ? 1.0 : 0.0;
    if (e.kind == ExprKind::Call) {
      if (!takesArg && !e.args.empty())
        fail(e.args[0].loc, fmt::format("'{}' takes no argument", slot.init));
      if (e.args.size() > 1) fail(e.args[1].loc, fmt::format("'{}' takes one argument", slot.init));
      if (!e.args.empty()) {
        Val a = eval(*e.args[0].value);
        if (!a.isNumber() || !std::isfinite(a.num()))
          fail(e.args[0].loc, fmt::format("the argument of '{}' must be a finite number, got {}",
                                          slot.init, a.isNumber() ? fmt::format("{}", a.num()) : describeVal(a)));
        slot.arg = a.num();
      } else if (slot.init == "constant") {
        fail(e.loc, "'constant' needs its value: constant(0.5)");
      }
    } else if (slot.init == "constant") {
      fail(e.loc, "'constant' needs its value: constant(0.5)");
    }
    if ((slot.init == "normal" || slot.init == "uniform") && slot.arg < 0)
      fail(e.loc, fmt::format("the argument of '{}' must not be negative", slot.init));
  }
  Val ref;
  ref.k = VK::ParamRef;
  ref.i = static_cast<int64_t>(f.self->params.size());
  f.self->params.push_back(std::move(slot));
  f.self->members[name] = ref;
  f.self->member_locs[name] = s.loc;
}

}  // namespace tgc::fe
