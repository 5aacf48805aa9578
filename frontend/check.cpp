#include "frontend/check.h"

#include <fmt/format.h>

namespace tgc::fe {
namespace {

class NameChecker {
 public:
  NameChecker(const std::set<std::string>& globals, const std::vector<std::string>& builtins,
              Diags& d)
      : globals_(globals), builtins_(builtins.begin(), builtins.end()), d_(d) {}

  void fn(const FnDecl& f, const std::set<std::string>* members) {
    Ctx saved = ctx_;
    ctx_ = Ctx::Function;
    std::set<std::string> scope;
    for (const auto& p : f.params) scope.insert(p.name);
    collect(f.body, scope, false);
    if (members) scopes_.push_back(*members);
    scopes_.push_back(scope);
    params(f.params);
    stmts(f.body);
    scopes_.pop_back();
    if (members) scopes_.pop_back();
    ctx_ = saved;
  }

  void module(const ModuleDecl& m) {
    std::set<std::string> members;
    for (const auto& p : m.params) members.insert(p.name);
    collect(m.body, members, true);
    scopes_.push_back(members);
    params(m.params);
    methods_.clear();
    ctx_ = Ctx::ModuleBody;
    stmts(m.body);
    ctx_ = Ctx::Top;
    std::vector<const FnDecl*> methods;
    methods.swap(methods_);
    for (const FnDecl* method : methods) fn(*method, &members);
    scopes_.pop_back();
  }

  void graph(const GraphDecl& g) {
    std::set<std::string> scope;
    for (const auto& p : g.params) {
      if (p.type) expr(*p.type);  // types see only globals
      scope.insert(p.name);
    }
    if (g.training) scope.insert({"seed", "step"});
    collect(g.body, scope, false);
    scopes_.push_back(scope);
    ctx_ = Ctx::Graph;
    stmts(g.body);
    ctx_ = Ctx::Top;
    scopes_.pop_back();
  }

  void topExpr(const Expr& e) { expr(e); }
  void topStmt(const Stmt& s) { stmt(s); }

 private:
  // Names a body declares anywhere (function-level scoping), not inside nested functions.
  void collect(const std::vector<StmtPtr>& body, std::set<std::string>& out, bool moduleBody) {
    for (const auto& s : body) {
      switch (s->kind) {
        case StmtKind::Let: case StmtKind::Param:
          out.insert(s->names.begin(), s->names.end());
          break;
        case StmtKind::For:
          out.insert(s->names[0]);
          collect(s->body, out, moduleBody);
          break;
        case StmtKind::If:
          collect(s->body, out, moduleBody);
          collect(s->else_body, out, moduleBody);
          break;
        case StmtKind::Fn:
          if (moduleBody) out.insert(s->fn->name);
          break;
        default: break;
      }
    }
  }

  bool known(const std::string& n) const {
    for (const auto& s : scopes_)
      if (s.count(n)) return true;
    return globals_.count(n) || builtins_.count(n);
  }
  std::vector<std::string> candidates() const {
    std::vector<std::string> r(globals_.begin(), globals_.end());
    r.insert(r.end(), builtins_.begin(), builtins_.end());
    for (const auto& s : scopes_) r.insert(r.end(), s.begin(), s.end());
    return r;
  }

  void params(const std::vector<ParamDecl>& ps) {
    for (const auto& p : ps) {
      if (p.type) expr(*p.type);
      if (p.def) expr(*p.def);
    }
  }

  void stmts(const std::vector<StmtPtr>& body) {
    for (const auto& s : body) stmt(*s);
  }

  // Statements that only make sense in one kind of body.
  void placement(const Stmt& s) {
    switch (s.kind) {
      case StmtKind::Param:
        if (ctx_ != Ctx::ModuleBody) d_.error(s.loc, "'param' declarations belong in a module body");
        break;
      case StmtKind::Output:
        if (ctx_ != Ctx::Graph) d_.error(s.loc, "'output' is only allowed in a graph body");
        break;
      case StmtKind::Return:
        if (ctx_ != Ctx::Function) d_.error(s.loc, "'return' is only allowed in a function or method");
        break;
      case StmtKind::Fn:
        if (ctx_ != Ctx::ModuleBody)
          d_.error(s.loc, "functions are defined at the top level of a file or as methods in a "
                          "module body");
        break;
      default: break;
    }
  }

  void stmt(const Stmt& s) {
    if (d_.full()) return;
    placement(s);
    switch (s.kind) {
      case StmtKind::Let: case StmtKind::Return: case StmtKind::Output: case StmtKind::ExprStmt:
        if (s.value) expr(*s.value);
        break;
      case StmtKind::Assign:
        expr(*s.value);
        if (!known(s.names[0]))
          d_.error(s.name_locs[0], fmt::format("cannot assign to '{}': it is not defined (use "
                                               "'let {} = ...'){}", s.names[0], s.names[0],
                                               didYouMean(s.names[0], candidates())));
        break;
      case StmtKind::If:
        expr(*s.cond);
        stmts(s.body);
        stmts(s.else_body);
        break;
      case StmtKind::For:
        expr(*s.value);
        if (s.hi) expr(*s.hi);
        stmts(s.body);
        break;
      case StmtKind::Param:
        expr(*s.type);
        // The initializer's name (normal, zeros, ...) is not a variable; its argument is.
        if (s.value && s.value->kind == ExprKind::Call)
          for (const auto& a : s.value->args) expr(*a.value);
        break;
      case StmtKind::Fn:
        methods_.push_back(s.fn.get());
        break;
    }
  }

  void expr(const Expr& e) {
    switch (e.kind) {
      case ExprKind::Name:
        if (!known(e.text))
          d_.error(e.loc, fmt::format("unknown name '{}'{}", e.text, didYouMean(e.text, candidates())));
        return;
      case ExprKind::Comprehension:
        for (size_t i = 1; i < e.kids.size(); ++i) expr(*e.kids[i]);
        scopes_.push_back({e.text});
        expr(*e.kids[0]);
        scopes_.pop_back();
        return;
      case ExprKind::Member:
        expr(*e.kids[0]);  // members are checked when evaluated
        return;
      default:
        for (const auto& k : e.kids) expr(*k);
        for (const auto& a : e.args) expr(*a.value);
    }
  }

  enum class Ctx { Top, Function, ModuleBody, Graph };
  Ctx ctx_ = Ctx::Top;
  const std::set<std::string>& globals_;
  std::set<std::string> builtins_;
  Diags& d_;
  std::vector<std::set<std::string>> scopes_;
  std::vector<const FnDecl*> methods_;
};

}  // namespace

void checkNames(const std::vector<const FileAst*>& files, const std::set<std::string>& globals,
                const std::vector<std::string>& builtins, Diags& diags) {
  NameChecker c(globals, builtins, diags);
  for (const FileAst* f : files) {
    for (const auto& e : f->config) {
      if (e.type) c.topExpr(*e.type);
      c.topExpr(*e.value);
    }
    for (const auto& p : f->presets)
      for (const auto& e : p.entries) c.topExpr(*e.value);
    for (const auto& dd : f->dims)
      if (dd.def) c.topExpr(*dd.def);
    for (const auto& s : f->lets) c.topStmt(*s);
    for (const auto& fn : f->fns) c.fn(*fn, nullptr);
    for (const auto& m : f->modules) c.module(*m);
    for (const auto& g : f->graphs) c.graph(*g);
  }
}

}  // namespace tgc::fe
