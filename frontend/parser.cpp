#include "frontend/parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "frontend/lexer.h"

namespace tgc::fe {

const char* opSpelling(Op op) {
  switch (op) {
    case Op::Add: return "+";
    case Op::Sub: return "-";
    case Op::Mul: return "*";
    case Op::Div: return "/";
    case Op::Mod: return "%";
    case Op::Pow: return "**";
    case Op::MatMul: return "@";
    case Op::Eq: return "==";
    case Op::Ne: return "!=";
    case Op::Lt: return "<";
    case Op::Le: return "<=";
    case Op::Gt: return ">";
    case Op::Ge: return ">=";
    case Op::And: return "and";
    case Op::Or: return "or";
    case Op::Not: return "not";
    case Op::Neg: return "-";
    case Op::Plus: return "+";
  }
  return "?";
}

namespace {

// Thrown to abandon the current statement or item; the message is already reported.
struct SyntaxError {};

class Parser {
 public:
  Parser(std::vector<Token> toks, Diags& d) : t_(std::move(toks)), d_(d) {}

  FileAst file(int fileId) {
    FileAst f;
    f.file = fileId;
    for (;;) {
      skipTerminators();
      if (at(Tok::Eof) || d_.full()) break;
      size_t start = p_;
      try {
        item(f);
      } catch (const SyntaxError&) {
        syncTopLevel(start);
      }
    }
    return f;
  }

 private:
  // ---- token helpers ----
  const Token& peek(size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  bool at(Tok k) const { return peek().kind == k; }
  const Token& take() {
    const Token& t = peek();
    if (p_ < t_.size() - 1) ++p_;
    return t;
  }
  bool accept(Tok k) {
    if (!at(k)) return false;
    take();
    return true;
  }

  std::string describe(const Token& t) const {
    switch (t.kind) {
      case Tok::Ident: return fmt::format("identifier '{}'", t.text);
      case Tok::Int: case Tok::Float: return fmt::format("number {}", t.text);
      case Tok::String: return "a string";
      default: return tokName(t.kind);
    }
  }

  [[noreturn]] void fail(Loc loc, const std::string& msg) {
    d_.error(loc, msg);
    throw SyntaxError{};
  }
  // A lexer error token is reported with its own message.
  [[noreturn]] void unexpected(const std::string& wanted) {
    const Token& t = peek();
    if (t.kind == Tok::Error) fail(t.loc, t.text);
    fail(t.loc, fmt::format("expected {}, got {}", wanted, describe(t)));
  }
  const Token& expect(Tok k, const std::string& wanted = "") {
    if (!at(k)) unexpected(wanted.empty() ? tokName(k) : wanted);
    return take();
  }
  std::string ident(const std::string& what) { return expect(Tok::Ident, what).text; }

  void skipTerminators() {
    while (at(Tok::Newline) || at(Tok::Semi)) take();
  }
  // After a statement: a newline, ';', or the '}' / end of file that closes it.
  void endStatement() {
    if (at(Tok::Newline) || at(Tok::Semi)) {
      take();
      return;
    }
    if (at(Tok::RBrace) || at(Tok::Eof)) return;
    unexpected("end of statement");
  }

  // A keyword that can only begin a statement, first on its line: a good place to resume.
  bool atLineStartingStatement() const {
    if (p_ == 0) return false;
    switch (peek().kind) {
      case Tok::KwLet: case Tok::KwReturn: case Tok::KwFn: case Tok::KwModule: case Tok::KwGraph:
      case Tok::KwParam: case Tok::KwOutput: case Tok::KwConfig: case Tok::KwPreset:
      case Tok::KwDim: case Tok::KwImport:
        return peek().loc.line > t_[p_ - 1].loc.line;
      default:
        return false;
    }
  }

  // `bind` is a keyword only where an item starts: `bind TASK ...`.
  bool atBind() const {
    return at(Tok::Ident) && peek().text == "bind" && peek(1).kind == Tok::Ident;
  }

  // Skips to the start of the next top-level item (`start`: where the failed one began).
  void syncTopLevel(size_t start) {
    int depth = 0;
    while (!at(Tok::Eof)) {
      if (p_ != start && depth == 0 && peek().loc.col == 1 && (atLineStartingStatement() || atBind()))
        return;
      Tok k = take().kind;
      if (k == Tok::LBrace) ++depth;
      if (k == Tok::RBrace && depth > 0 && --depth == 0 && (at(Tok::Newline) || at(Tok::Eof)))
        return;
      if (depth == 0 && (k == Tok::Newline || k == Tok::Semi)) return;
    }
  }
  // Skips to the end of the current statement inside a block; stops before the '}' that
  // closes the block.
  // `start` is where the failed statement began: resuming there again would loop.
  void syncStatement(size_t start) {
    int depth = 0;
    while (!at(Tok::Eof)) {
      if (at(Tok::RBrace) && depth == 0) return;
      if (p_ != start && depth == 0 && atLineStartingStatement()) return;
      Tok k = take().kind;
      if (k == Tok::LBrace) ++depth;
      if (k == Tok::RBrace) --depth;
      if (depth == 0 && (k == Tok::Newline || k == Tok::Semi)) return;
    }
  }

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& pp) : p(pp) {
      if (++p.depth_ > kMaxNesting) {
        --p.depth_;
        p.fail(p.peek().loc, fmt::format("nesting is too deep (more than {} levels)", kMaxNesting));
      }
    }
    ~DepthGuard() { --p.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
  };

  // ---- items ----
  void item(FileAst& f) {
    const Token& t = peek();
    switch (t.kind) {
      case Tok::KwImport: {
        Loc l = take().loc;
        std::string path = expect(Tok::String, "a file name string").text;
        f.imports.push_back(ImportDecl{path, l});
        endStatement();
        return;
      }
      case Tok::KwConfig: configBlock(f); return;
      case Tok::KwPreset: preset(f); return;
      case Tok::KwDim: {
        take();
        do {
          DimDecl dd;
          dd.loc = peek().loc;
          dd.name = ident("a dim name");
          if (accept(Tok::Assign)) dd.def = expr();
          f.dims.push_back(std::move(dd));
        } while (accept(Tok::Comma));
        endStatement();
        return;
      }
      case Tok::KwLet: {
        f.lets.push_back(letStmt());
        endStatement();
        return;
      }
      case Tok::KwFn: f.fns.push_back(fnDecl()); endStatement(); return;
      case Tok::KwModule: {
        auto m = std::make_shared<ModuleDecl>();
        m->loc = take().loc;
        m->name = ident("a module name");
        m->params = paramList();
        m->body = block();
        f.modules.push_back(std::move(m));
        endStatement();
        return;
      }
      case Tok::KwGraph: {
        auto g = std::make_shared<GraphDecl>();
        g->loc = take().loc;
        g->name = ident("a graph name");
        g->params = paramList();
        if (at(Tok::Ident) && peek().text == "training") {
          take();
          g->training = true;
        }
        g->body = block();
        f.graphs.push_back(std::move(g));
        endStatement();
        return;
      }
      default:
        if (at(Tok::Ident) && t.text == "bind") {
          bindDecl(f);
          return;
        }
        unexpected("a top-level item (import, config, preset, dim, let, fn, module, graph or bind)");
    }
  }

  // bind TASK to GRAPH { entries }
  void bindDecl(FileAst& f) {
    BindDecl b;
    b.loc = take().loc;
    b.task_loc = peek().loc;
    b.task = ident("a task name after 'bind' (translation, lm, classification or tensors)");
    if (!(at(Tok::Ident) && peek().text == "to"))
      unexpected(fmt::format("'to' and the graph that task '{}' feeds (bind {} to train {{ ... }})",
                             b.task, b.task));
    take();
    b.graph_loc = peek().loc;
    b.graph = ident("the name of the graph the task feeds");
    expect(Tok::LBrace, "'{' and the binding's entries");
    for (;;) {
      skipTerminators();
      if (accept(Tok::RBrace)) break;
      if (at(Tok::Eof)) unexpected("'}' closing the binding");
      size_t start = p_;
      try {
        b.entries.push_back(bindEntry());
        if (!accept(Tok::Comma)) endStatement();
      } catch (const SyntaxError&) {
        syncStatement(start);
      }
    }
    f.binds.push_back(std::move(b));
    endStatement();
  }

  BindEntry bindEntry() {
    BindEntry e;
    e.loc = peek().loc;
    if (at(Tok::KwConfig)) e.kind = BindKind::Config;
    else if (at(Tok::KwDim)) e.kind = BindKind::Dim;
    else if (at(Tok::Ident) && peek().text == "input") e.kind = BindKind::Input;
    else
      unexpected("a binding entry: 'input NAME = FIELD', 'config NAME = VALUE' or "
                 "'dim NAME = TASKDIM'");
    take();
    const char* target = e.kind == BindKind::Input    ? "the name of a graph input"
                         : e.kind == BindKind::Config ? "the name of a config entry"
                                                      : "the name of a dim";
    const char* source = e.kind == BindKind::Input    ? "the task field that feeds it"
                         : e.kind == BindKind::Config ? "the task value that sets it"
                                                      : "the task dim that sets it";
    e.name_loc = peek().loc;
    e.name = ident(target);
    expect(Tok::Assign, fmt::format("'=' and {}", source));
    e.from_loc = peek().loc;
    e.from = ident(source);
    if (at(Tok::Dot)) {
      Loc dot = take().loc;
      if (e.kind == BindKind::Input)
        fail(dot, fmt::format("an input is fed a whole field: write 'input {} = {}'; FIELD.shape[i] "
                              "is for config and dim entries", e.name, e.from));
      if (!(at(Tok::Ident) && peek().text == "shape"))
        unexpected(fmt::format("'shape[i]' after '{}.' (the size of axis i of field '{}')", e.from,
                               e.from));
      take();
      expect(Tok::LBracket, fmt::format("'[' and an axis number ({}.shape[1])", e.from));
      if (at(Tok::Minus))
        fail(peek().loc, fmt::format("an axis here counts from 0: write {}.shape[1], not a negative "
                                     "axis", e.from));
      if (!at(Tok::Int)) unexpected(fmt::format("an axis number ({}.shape[1])", e.from));
      const Token& ax = take();
      if (ax.ival > 64) fail(ax.loc, fmt::format("axis {} is out of range (tensors have at most 64 axes)", ax.ival));
      e.axis = static_cast<int>(ax.ival);
      expect(Tok::RBracket, "']'");
    }
    return e;
  }

  void configBlock(FileAst& f) {
    take();
    expect(Tok::LBrace);
    for (;;) {
      skipTerminators();
      if (accept(Tok::RBrace)) break;
      if (at(Tok::Eof)) unexpected("'}' closing the config block");
      size_t start = p_;
      try {
        ConfigEntry e;
        e.loc = peek().loc;
        e.name = ident("a config entry name");
        if (accept(Tok::Colon)) e.type = expr();
        expect(Tok::Assign, "'=' and a default value");
        e.value = expr();
        f.config.push_back(std::move(e));
        if (!accept(Tok::Comma)) endStatement();
      } catch (const SyntaxError&) {
        syncStatement(start);
      }
    }
    endStatement();
  }

  void preset(FileAst& f) {
    PresetDecl p;
    p.loc = take().loc;
    p.name = ident("a preset name");
    expect(Tok::LBrace);
    for (;;) {
      skipTerminators();
      if (accept(Tok::RBrace)) break;
      if (at(Tok::Eof)) unexpected("'}' closing the preset");
      size_t start = p_;
      try {
        PresetEntry e;
        e.loc = peek().loc;
        e.name = ident("a config entry name");
        expect(Tok::Assign);
        e.value = expr();
        p.entries.push_back(std::move(e));
        if (!accept(Tok::Comma)) endStatement();
      } catch (const SyntaxError&) {
        syncStatement(start);
      }
    }
    f.presets.push_back(std::move(p));
    endStatement();
  }

  std::vector<ParamDecl> paramList() {
    expect(Tok::LParen);
    std::vector<ParamDecl> ps;
    std::set<std::string> seen;
    while (!at(Tok::RParen)) {
      ParamDecl p;
      p.loc = peek().loc;
      p.name = ident("a parameter name");
      if (!seen.insert(p.name).second) fail(p.loc, fmt::format("duplicate parameter '{}'", p.name));
      if (accept(Tok::Colon)) p.type = expr();
      if (accept(Tok::Assign)) p.def = expr();
      else if (!ps.empty() && ps.back().def)
        fail(p.loc, fmt::format("parameter '{}' needs a default value because the one before it "
                                "has one", p.name));
      ps.push_back(std::move(p));
      if (!accept(Tok::Comma)) break;
    }
    expect(Tok::RParen, "',' or ')'");
    return ps;
  }

  std::shared_ptr<FnDecl> fnDecl() {
    auto fn = std::make_shared<FnDecl>();
    fn->loc = take().loc;
    fn->name = ident("a function name");
    fn->params = paramList();
    fn->body = block();
    return fn;
  }

  // ---- statements ----
  std::vector<StmtPtr> block() {
    DepthGuard g(*this);
    expect(Tok::LBrace);
    std::vector<StmtPtr> body;
    for (;;) {
      skipTerminators();
      if (accept(Tok::RBrace)) break;
      if (at(Tok::Eof)) unexpected("'}'");
      if (d_.full()) throw SyntaxError{};
      size_t start = p_;
      try {
        body.push_back(stmt());
        endStatement();
      } catch (const SyntaxError&) {
        syncStatement(start);
      }
    }
    return body;
  }

  StmtPtr mk(StmtKind k, Loc l) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->loc = l;
    return s;
  }

  StmtPtr letStmt() {
    auto s = mk(StmtKind::Let, take().loc);
    do {
      s->name_locs.push_back(peek().loc);
      s->names.push_back(ident("a name to bind"));
    } while (accept(Tok::Comma));
    expect(Tok::Assign, "'='");
    s->value = expr();
    return s;
  }

  StmtPtr stmt() {
    DepthGuard g(*this);
    Loc l = peek().loc;
    switch (peek().kind) {
      case Tok::KwLet: return letStmt();
      case Tok::KwReturn: {
        auto s = mk(StmtKind::Return, take().loc);
        if (at(Tok::Newline) || at(Tok::Semi) || at(Tok::RBrace) || at(Tok::Eof)) return s;
        s->value = exprList();
        return s;
      }
      case Tok::KwIf: return ifStmt();
      case Tok::KwFor: {
        auto s = mk(StmtKind::For, take().loc);
        s->name_locs.push_back(peek().loc);
        s->names.push_back(ident("a loop variable"));
        expect(Tok::KwIn, "'in'");
        s->value = expr();
        if (accept(Tok::DotDot)) s->hi = expr();
        s->body = block();
        return s;
      }
      case Tok::KwParam: {
        auto s = mk(StmtKind::Param, take().loc);
        s->name_locs.push_back(peek().loc);
        s->names.push_back(ident("a parameter name"));
        expect(Tok::Colon, "':' and the parameter's type");
        s->type = expr();
        if (accept(Tok::Assign)) s->value = expr();
        return s;
      }
      case Tok::KwFn: {
        auto s = mk(StmtKind::Fn, l);
        s->fn = fnDecl();
        return s;
      }
      case Tok::KwOutput: {
        auto s = mk(StmtKind::Output, take().loc);
        s->name_locs.push_back(peek().loc);
        s->names.push_back(ident("an output name"));
        expect(Tok::Assign, "'='");
        s->value = expr();
        return s;
      }
      case Tok::KwModule: case Tok::KwGraph: case Tok::KwConfig: case Tok::KwPreset:
      case Tok::KwDim: case Tok::KwImport:
        fail(l, fmt::format("{} is only allowed at the top level of a file", tokName(peek().kind)));
      case Tok::Ident:
        if (atBind() && peek(2).kind == Tok::Ident && peek(2).text == "to")
          fail(l, "'bind' is only allowed at the top level of a file");
        break;
      default: break;
    }
    ExprPtr e = expr();
    if (at(Tok::Assign)) {
      if (e->kind != ExprKind::Name)
        fail(peek().loc, "only a plain name can be assigned to");
      take();
      auto s = mk(StmtKind::Assign, l);
      s->names.push_back(e->text);
      s->name_locs.push_back(e->loc);
      s->value = expr();
      return s;
    }
    auto s = mk(StmtKind::ExprStmt, l);
    s->value = std::move(e);
    return s;
  }

  StmtPtr ifStmt() {
    DepthGuard g(*this);
    auto s = mk(StmtKind::If, take().loc);
    s->cond = expr();
    s->body = block();
    // `else` may start the next line.
    size_t save = p_;
    while (at(Tok::Newline)) take();
    if (!accept(Tok::KwElse)) {
      p_ = save;
      return s;
    }
    if (at(Tok::KwIf)) s->else_body.push_back(ifStmt());
    else s->else_body = block();
    return s;
  }

  // ---- expressions ----
  ExprPtr node(ExprKind k, Loc l) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->loc = l;
    return e;
  }
  // Computes the subtree height and rejects trees the later recursive walks could not take.
  ExprPtr finish(ExprPtr e) {
    int h = 0;
    for (const auto& k : e->kids) h = std::max(h, k->depth);
    for (const auto& a : e->args) h = std::max(h, a.value->depth);
    e->depth = h + 1;
    if (e->depth > kMaxNesting)
      fail(e->loc, fmt::format("expression is too deeply nested (more than {} levels)", kMaxNesting));
    return e;
  }
  ExprPtr binary(Op op, Loc l, ExprPtr a, ExprPtr b) {
    auto e = node(ExprKind::Binary, l);
    e->op = op;
    e->kids.push_back(std::move(a));
    e->kids.push_back(std::move(b));
    return finish(std::move(e));
  }

  // `a, b, c` (a return value): one expression, or a list of them.
  ExprPtr exprList() {
    ExprPtr first = expr();
    if (!at(Tok::Comma)) return first;
    auto l = node(ExprKind::List, first->loc);
    l->kids.push_back(std::move(first));
    while (accept(Tok::Comma)) l->kids.push_back(expr());
    return finish(std::move(l));
  }

  ExprPtr expr() {
    DepthGuard g(*this);
    return orExpr();
  }
  ExprPtr orExpr() {
    ExprPtr e = andExpr();
    while (at(Tok::KwOr)) {
      Loc l = take().loc;
      e = binary(Op::Or, l, std::move(e), andExpr());
    }
    return e;
  }
  ExprPtr andExpr() {
    ExprPtr e = notExpr();
    while (at(Tok::KwAnd)) {
      Loc l = take().loc;
      e = binary(Op::And, l, std::move(e), notExpr());
    }
    return e;
  }
  ExprPtr notExpr() {
    if (at(Tok::KwNot)) {
      DepthGuard g(*this);
      auto e = node(ExprKind::Unary, take().loc);
      e->op = Op::Not;
      e->kids.push_back(notExpr());
      return finish(std::move(e));
    }
    return compare();
  }
  static bool compareOp(Tok t, Op& op) {
    switch (t) {
      case Tok::EqEq: op = Op::Eq; return true;
      case Tok::NotEq: op = Op::Ne; return true;
      case Tok::Lt: op = Op::Lt; return true;
      case Tok::Le: op = Op::Le; return true;
      case Tok::Gt: op = Op::Gt; return true;
      case Tok::Ge: op = Op::Ge; return true;
      default: return false;
    }
  }
  ExprPtr compare() {
    ExprPtr e = additive();
    Op op;
    if (compareOp(peek().kind, op)) {
      Loc l = take().loc;
      e = binary(op, l, std::move(e), additive());
      if (compareOp(peek().kind, op))
        fail(peek().loc, "comparisons cannot be chained; combine them with 'and'");
    }
    return e;
  }
  ExprPtr additive() {
    ExprPtr e = multiplicative();
    while (at(Tok::Plus) || at(Tok::Minus)) {
      Op op = at(Tok::Plus) ? Op::Add : Op::Sub;
      Loc l = take().loc;
      e = binary(op, l, std::move(e), multiplicative());
    }
    return e;
  }
  ExprPtr multiplicative() {
    ExprPtr e = unary();
    for (;;) {
      Op op;
      switch (peek().kind) {
        case Tok::Star: op = Op::Mul; break;
        case Tok::Slash: op = Op::Div; break;
        case Tok::Percent: op = Op::Mod; break;
        case Tok::At: op = Op::MatMul; break;
        default: return e;
      }
      Loc l = take().loc;
      e = binary(op, l, std::move(e), unary());
    }
  }
  ExprPtr unary() {
    if (at(Tok::Minus) || at(Tok::Plus)) {
      DepthGuard g(*this);
      auto e = node(ExprKind::Unary, peek().loc);
      e->op = take().kind == Tok::Minus ? Op::Neg : Op::Plus;
      e->kids.push_back(unary());
      return finish(std::move(e));
    }
    return power();
  }
  ExprPtr power() {
    ExprPtr e = postfix();
    if (at(Tok::StarStar)) {
      DepthGuard g(*this);
      Loc l = take().loc;
      e = binary(Op::Pow, l, std::move(e), unary());  // right associative; 2 ** -1 works
    }
    return e;
  }
  ExprPtr postfix() {
    ExprPtr e = primary();
    for (;;) {
      if (at(Tok::LParen)) {
        take();
        auto c = node(ExprKind::Call, e->loc);  // errors point at the callee
        c->kids.push_back(std::move(e));
        callArgs(*c);
        e = finish(std::move(c));
      } else if (at(Tok::LBracket)) {
        auto ix = node(ExprKind::Index, take().loc);
        ix->kids.push_back(std::move(e));
        while (!at(Tok::RBracket)) {
          ix->kids.push_back(expr());
          if (!accept(Tok::Comma)) break;
        }
        expect(Tok::RBracket, "',' or ']'");
        e = finish(std::move(ix));
      } else if (at(Tok::Dot)) {
        auto m = node(ExprKind::Member, take().loc);
        m->kids.push_back(std::move(e));
        m->text = ident("a member name after '.'");
        e = finish(std::move(m));
      } else {
        return e;
      }
    }
  }
  void callArgs(Expr& c) {
    std::set<std::string> names;
    while (!at(Tok::RParen)) {
      Arg a;
      a.loc = peek().loc;
      if (at(Tok::Ident) && peek(1).kind == Tok::Assign) {
        a.name = take().text;
        take();
        if (!names.insert(a.name).second)
          fail(a.loc, fmt::format("keyword argument '{}' is given twice", a.name));
      } else if (!names.empty()) {
        fail(a.loc, "a positional argument cannot follow keyword arguments");
      }
      a.value = expr();
      c.args.push_back(std::move(a));
      if (!accept(Tok::Comma)) break;
    }
    expect(Tok::RParen, "',' or ')'");
  }
  ExprPtr primary() {
    const Token& t = peek();
    Loc l = t.loc;
    switch (t.kind) {
      case Tok::Int: {
        auto e = node(ExprKind::Int, l);
        e->ival = take().ival;
        return e;
      }
      case Tok::Float: {
        auto e = node(ExprKind::Float, l);
        e->fval = take().fval;
        return e;
      }
      case Tok::String: {
        auto e = node(ExprKind::Str, l);
        e->text = take().text;
        return e;
      }
      case Tok::KwTrue: case Tok::KwFalse: {
        auto e = node(ExprKind::Bool, l);
        e->bval = take().kind == Tok::KwTrue;
        return e;
      }
      case Tok::Ident: {
        auto e = node(ExprKind::Name, l);
        e->text = take().text;
        return e;
      }
      case Tok::LParen: {
        take();
        ExprPtr e = expr();
        expect(Tok::RParen);
        return e;
      }
      case Tok::LBracket: {
        take();
        auto list = node(ExprKind::List, l);
        if (accept(Tok::RBracket)) return list;
        ExprPtr first = expr();
        if (accept(Tok::KwFor)) {
          auto c = node(ExprKind::Comprehension, l);
          c->kids.push_back(std::move(first));
          c->text = ident("a loop variable");
          expect(Tok::KwIn, "'in'");
          c->kids.push_back(expr());
          if (accept(Tok::DotDot)) c->kids.push_back(expr());
          expect(Tok::RBracket);
          return finish(std::move(c));
        }
        list->kids.push_back(std::move(first));
        while (accept(Tok::Comma)) {
          if (at(Tok::RBracket)) break;
          list->kids.push_back(expr());
        }
        expect(Tok::RBracket, "',' or ']'");
        return finish(std::move(list));
      }
      default:
        unexpected("an expression");
    }
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  Diags& d_;
  int depth_ = 0;
};

}  // namespace

FileAst parseFile(std::string_view text, int file, Diags& diags) {
  return Parser(lex(text, file), diags).file(file);
}

}  // namespace tgc::fe
