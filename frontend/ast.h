// The model language's syntax tree. The parser builds it; the checker and the lowering
// read it. Nodes are plain structs: a kind plus the fields that kind uses.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tgc::fe {

// A position in one of the loaded source files (file indexes the Sources table).
struct Loc {
  int file = 0;
  int line = 1;
  int col = 1;
};

enum class ExprKind : uint8_t {
  Int,       // ival
  Float,     // fval
  Str,       // text
  Bool,      // bval
  Name,      // text
  Unary,     // op, kids[0]
  Binary,    // op, kids[0], kids[1]
  Call,      // kids[0] callee, args
  Index,     // kids[0] base, kids[1..] indices (possibly none: i64[])
  Member,    // kids[0] base, text = member name
  List,      // kids = elements
  Comprehension,  // [kids[0] for text in kids[1] (.. kids[2])]
};

// Operators, spelled as in the source.
enum class Op : uint8_t {
  Add, Sub, Mul, Div, Mod, Pow, MatMul,
  Eq, Ne, Lt, Le, Gt, Ge,
  And, Or, Not, Neg, Plus,
};
const char* opSpelling(Op op);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Arg {
  std::string name;  // empty: positional
  Loc loc;
  ExprPtr value;
};

struct Expr {
  ExprKind kind;
  Loc loc;
  Op op = Op::Add;
  int64_t ival = 0;
  double fval = 0;
  bool bval = false;
  std::string text;
  std::vector<ExprPtr> kids;
  std::vector<Arg> args;
  int depth = 1;  // height of this subtree (the parser bounds it)
};

struct FnDecl;

enum class StmtKind : uint8_t {
  Let,     // let names... = value
  Assign,  // names[0] = value
  Return,  // return [value]
  If,      // if cond { body } else { else_body }
  For,     // for names[0] in lo [.. hi] { body }
  Param,   // param names[0]: type [= value]   (module bodies)
  Fn,      // fn ... (module bodies: a method)
  Output,  // output names[0] = value           (graph bodies)
  ExprStmt,
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;

struct Stmt {
  StmtKind kind;
  Loc loc;
  std::vector<std::string> names;
  std::vector<Loc> name_locs;
  ExprPtr value;  // let/assign/return/param initializer/output/expression; for: the list or lo
  ExprPtr type;   // param type
  ExprPtr cond;   // if
  ExprPtr hi;     // for over a range lo..hi
  std::vector<StmtPtr> body, else_body;
  std::shared_ptr<FnDecl> fn;
};

// A formal parameter of a fn, module or graph: name [: type] [= default].
struct ParamDecl {
  std::string name;
  Loc loc;
  ExprPtr type;
  ExprPtr def;
};

struct FnDecl {
  std::string name;
  Loc loc;
  std::vector<ParamDecl> params;
  std::vector<StmtPtr> body;
};

struct ModuleDecl {
  std::string name;
  Loc loc;
  std::vector<ParamDecl> params;
  std::vector<StmtPtr> body;  // let, param, fn, if, for, expression statements
};

struct GraphDecl {
  std::string name;
  Loc loc;
  std::vector<ParamDecl> params;  // inputs; each must have a tensor type
  bool training = false;
  std::vector<StmtPtr> body;
};

struct ConfigEntry {
  std::string name;
  Loc loc;
  ExprPtr type;  // optional: int, float, bool, str or a dtype
  ExprPtr value;
};

struct PresetEntry {
  std::string name;
  Loc loc;
  ExprPtr value;
};

struct PresetDecl {
  std::string name;
  Loc loc;
  std::vector<PresetEntry> entries;
};

struct DimDecl {
  std::string name;
  Loc loc;
  ExprPtr def;  // optional default size
};

// One line of a `bind` block: `input NAME = FIELD`, `config NAME = VALUE` or
// `dim NAME = TASKDIM`, where the right side may also be `FIELD.shape[i]` (tensors task).
enum class BindKind : uint8_t { Input, Config, Dim };

struct BindEntry {
  BindKind kind = BindKind::Input;
  Loc loc;            // the entry's first word
  std::string name;   // the graph input, config entry or dim that is fed
  Loc name_loc;
  std::string from;   // the task's field, value or dim; for FIELD.shape[i]: FIELD
  Loc from_loc;
  int axis = -1;      // FIELD.shape[i]: i; else -1
};

// `bind TASK to GRAPH { entries }`: which task's fields feed which inputs of which graph.
struct BindDecl {
  Loc loc;  // `bind`
  std::string task;
  Loc task_loc;
  std::string graph;
  Loc graph_loc;
  std::vector<BindEntry> entries;
};

struct ImportDecl {
  std::string path;
  Loc loc;
};

// One parsed file. Top-level items keep their source order within each kind.
struct FileAst {
  int file = 0;
  std::vector<ImportDecl> imports;
  std::vector<ConfigEntry> config;
  std::vector<PresetDecl> presets;
  std::vector<DimDecl> dims;
  std::vector<StmtPtr> lets;  // top-level `let` statements
  std::vector<std::shared_ptr<FnDecl>> fns;
  std::vector<std::shared_ptr<ModuleDecl>> modules;
  std::vector<std::shared_ptr<GraphDecl>> graphs;
  std::vector<BindDecl> binds;
};

}  // namespace tgc::fe
