// The lowering: an evaluator over the syntax tree. Everything except tensor arithmetic
// happens at compile time (config arithmetic, if/else, loops, module instantiation); tensor
// operations become Graph IR nodes through the builder.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "frontend/ast.h"
#include "frontend/diag.h"
#include "frontend/source_map.h"
#include "ir/builder.h"
#include "ir/graph.h"

namespace tgc::fe {

enum class VK : uint8_t {
  None,      // no value (a function without return)
  Int, Float, Bool, Str,
  DType,     // f32, i64, ...
  Type,      // a tensor type: f32[2, 3]
  TypeName,  // int, float, bool, str (annotations)
  Tensor,    // a Graph IR value
  List,
  Fn,        // a function, or a method bound to an instance
  Module,    // a module declaration (calling it instantiates)
  Inst,      // a module instance
  Builtin,   // a builtin function or an op of the op table
  ParamRef,  // a parameter slot of an instance (becomes a graph input when used)
  Error,     // a binding whose statement failed: using it silently abandons the user
};

enum class BuiltinId : uint8_t {
  Op, Dropout, SinusoidalTable, Zeros, Ones, Full, Len, Min, Max, ToInt, ToFloat, ToStr,
  Floor, Ceil, Assert, Fail,
};

struct Instance;

struct Val {
  VK k = VK::None;
  int64_t i = 0;      // Int; ParamRef slot; Builtin: OpKind for BuiltinId::Op
  double f = 0;       // Float
  bool b = false;     // Bool; Fn: a method whose instance is held weakly
  DType dt = DType::f32;  // DType, Type
  std::string s;      // Str, TypeName
  Shape shape;        // Type
  Value* t = nullptr; // Tensor
  std::shared_ptr<std::vector<Val>> list;
  const FnDecl* fn = nullptr;
  const ModuleDecl* mod = nullptr;
  std::shared_ptr<Instance> inst;  // Inst; the bound instance of a method
  std::weak_ptr<Instance> weak_inst;  // a method's instance while stored in a module member
  BuiltinId builtin = BuiltinId::Op;

  static Val none() { return Val{}; }
  static Val integer(int64_t v) { Val x; x.k = VK::Int; x.i = v; return x; }
  static Val number(double v) { Val x; x.k = VK::Float; x.f = v; return x; }
  static Val boolean(bool v) { Val x; x.k = VK::Bool; x.b = v; return x; }
  static Val str(std::string v) { Val x; x.k = VK::Str; x.s = std::move(v); return x; }
  static Val dtype(DType d) { Val x; x.k = VK::DType; x.dt = d; return x; }
  static Val type(TensorType t) { Val x; x.k = VK::Type; x.dt = t.dtype; x.shape = std::move(t.shape); return x; }
  static Val tensor(Value* v) { Val x; x.k = VK::Tensor; x.t = v; return x; }
  static Val listOf(std::vector<Val> v) {
    Val x;
    x.k = VK::List;
    x.list = std::make_shared<std::vector<Val>>(std::move(v));
    return x;
  }
  static Val error() { Val x; x.k = VK::Error; return x; }

  bool isNumber() const { return k == VK::Int || k == VK::Float; }
  double num() const { return k == VK::Int ? static_cast<double>(i) : f; }
  TensorType tensorType() const { return TensorType{dt, shape}; }
};

// "int", "f32[2,3] tensor", "module instance Linear": how messages name a value's kind.
std::string describeVal(const Val& v);

// A parameter declared by `param name: type = init` in a module body.
struct ParamSlot {
  std::string name;
  TensorType type;
  std::string init;  // xavier_uniform, xavier_normal, normal, uniform, zeros, ones, constant
  double arg = 0;
  Loc loc;
};

// One instantiation of a module. Its path ("encoder.layers.3.self_attn") is fixed when it is
// first bound with `let`, relative to the instance whose body bound it.
struct Instance : std::enable_shared_from_this<Instance> {
  const ModuleDecl* decl = nullptr;
  std::weak_ptr<Instance> owner;
  bool has_owner = false;
  bool named = false;
  std::string local;
  std::map<std::string, Val> members;  // constructor arguments, lets, submodules, params
  std::map<std::string, Loc> member_locs;
  std::map<std::string, const FnDecl*> methods;
  std::vector<ParamSlot> params;

  std::string path() const;  // "" while unnamed
};

// Something went wrong and was reported (or a poisoned binding was used): abandon the
// current statement.
struct EvalAbort {};
// Stop lowering altogether (too many errors, evaluation budget exhausted).
struct EvalFatal {};

// The finished lowering of one graph.
struct LoweredGraph {
  std::unique_ptr<Graph> graph;
  std::vector<ParamSlot> params;  // in graph input order, with full names
  std::vector<std::string> output_names;
  int loss_output = -1;
  std::unordered_map<const Node*, NodeOrigin> origins;  // of graph's nodes
  std::vector<ModelWarning> warnings;
};

class Evaluator {
 public:
  explicit Evaluator(Diags& d);

  // ---- setup: the global namespace ----
  bool isBuiltin(const std::string& name) const { return builtins_.count(name) > 0; }
  std::vector<std::string> builtinNames() const;
  // Defines a global; reports a redefinition (or a clash with a builtin) at `loc`.
  bool defineGlobal(const std::string& name, Val v, Loc loc, const char* what);
  void declareUnboundDim(const std::string& name) { unbound_dims_.insert(name); }
  // A bound dim: lookups are recorded so that a graph lists only the dims it depends on.
  void declareDim(const std::string& name) { dim_names_.insert(name); }
  // Dims declared but not yet bound (while the config is evaluated).
  void setPendingDims(std::set<std::string> names) { pending_dims_ = std::move(names); }
  const std::map<std::string, Val>& globals() const { return globals_; }
  // ModelOptions::inference: dropout is the identity even in training graphs.
  void setInference(bool on) { inference_ = on; }

  // Evaluates a top-level expression (config defaults, presets, dims) with tensors disallowed.
  // Throws EvalAbort after reporting.
  Val evalConst(const Expr& e);
  // Runs a top-level `let`.
  void execTopLet(const Stmt& s);
  // Checks a value against a type annotation (int, float, bool, str, a dtype or a tensor type);
  // returns the value converted (an int where a float is wanted), or throws after reporting.
  Val checkAnnotation(const Val& v, const Val& type, Loc loc, const std::string& what);

  // Lowers one graph. Returns nothing when errors were reported. The graph records the dims
  // (of `dims`, in that order) that it or the top-level code used.
  std::optional<LoweredGraph> lowerGraph(const GraphDecl& g,
                                         const std::vector<std::pair<std::string, int64_t>>& dims);

  // ---- shared with the driver (compile.cpp) and helpers in eval*.cpp ----
  struct ArgVal {
    std::string name;  // empty: positional
    Val v;
    Loc loc;
  };
  [[noreturn]] void fail(Loc loc, const std::string& msg);

  enum class FrameKind : uint8_t { TopLevel, Graph, Function, Method, ModuleBody };
  struct Frame {
    FrameKind kind = FrameKind::Function;
    std::unordered_map<std::string, Val> locals;
    std::shared_ptr<Instance> self;  // methods and module bodies
    std::string prefix;              // provenance prefix for IR names
    std::string fn_name;
    Loc call_site;
    bool failed = false;  // a statement failed: the call gives no value
    bool returned = false;
    Val ret;
  };

 private:
  // Expressions (eval_expr.cpp; calls in eval_call.cpp, builtins in builtins.cpp).
  Val eval(const Expr& e);
  Val evalName(const std::string& name, Loc loc);
  Val evalIndex(const Expr& e);
  Val evalMember(const Val& base, const std::string& name, Loc loc);
  Val unaryOp(Op op, const Val& a, Loc loc);
  Val binaryOp(Op op, const Val& a, const Val& b, Loc loc);
  Val foldNumbers(Op op, const Val& a, const Val& b, Loc loc);
  Val call(const Val& callee, std::vector<ArgVal> args, Loc loc);
  Val callFunction(const FnDecl& fn, const std::shared_ptr<Instance>& self,
                   std::vector<ArgVal> args, Loc loc);
  Val instantiate(const ModuleDecl& m, std::vector<ArgVal> args, Loc loc);
  Val callBuiltin(const Val& b, std::vector<ArgVal> args, Loc loc);
  void bindArgs(Frame& f, const std::string& what, const std::vector<ParamDecl>& params,
                std::vector<ArgVal> args, Loc loc, bool intoMembers);
  std::vector<Val> iterate(const Val& lo, const Val* hi, Loc loc);

  // Statements (eval_stmt.cpp).
  void execBlock(const std::vector<StmtPtr>& body);
  void execStmt(const Stmt& s);
  void bind(const std::string& name, Val v, Loc loc, bool isLet);
  void poison(const Stmt& s);
  void declareParam(const Stmt& s);
  Val callOp(OpKind k, std::vector<ArgVal> args, Loc loc);

  // Tensors (eval_tensor.cpp).
  void requireTensorContext(Loc loc, const char* what);
  std::string irName(const std::string& base) const;
  Value* constantScalar(DType dt, double v, Loc loc, const std::string& name = "c");
  Value* toOperand(const Val& v, DType peer, Loc loc);
  Val addNode(Loc loc, OpKind k, std::vector<Value*> operands, AttrMap attrs,
              const std::string& name, std::optional<TensorType> declared = std::nullopt);
  Val tensorBinary(Op op, const Val& a, const Val& b, Loc loc);
  Val paramValue(const std::shared_ptr<Instance>& inst, size_t slot, Loc loc);
  Val dropout(const Val& x, double p, Loc loc);
  void nameInstances(const Val& v, const std::shared_ptr<Instance>& owner, const std::string& local);
  // Renames a tensor created by the current statement after the name it is bound to.
  void nameValue(const Val& v, const std::string& name, size_t nodesBefore);

  Frame& frame() { return *frames_.back(); }
  std::vector<std::string> visibleNames() const;
  void tick(Loc loc);

  struct DepthGuard {
    Evaluator& e;
    DepthGuard(Evaluator& ev, Loc loc);
    ~DepthGuard() { --e.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
  };

  Diags& d_;
  std::map<std::string, Val> globals_;
  std::map<std::string, Loc> global_locs_;
  std::unordered_map<std::string, Val> builtins_;
  std::set<std::string> unbound_dims_;
  std::set<std::string> dim_names_;
  std::set<std::string> pending_dims_;
  std::set<std::string> dims_used_;
  std::vector<std::unique_ptr<Frame>> frames_;
  int depth_ = 0;
  int call_depth_ = 0;
  uint64_t steps_ = 0;
  int no_tensors_ = 0;  // > 0 while module bodies and top-level code run

  // Per graph being lowered.
  Graph* g_ = nullptr;
  bool training_ = false;
  bool inference_ = false;  // dropout off in training graphs too (builtins.cpp)
  Value* seed_ = nullptr;
  Value* step_ = nullptr;
  struct ParamUse {
    Value* value;
    std::shared_ptr<Instance> inst;
    size_t slot;
  };
  std::map<std::string, ParamUse> param_uses_;
  std::vector<Value*> param_order_;
  std::vector<ParamSlot> param_slots_;  // full names, first-use order
  struct OutputDecl {
    std::string name;
    Value* value;
    Loc loc;
  };
  std::vector<OutputDecl> outputs_;
  std::set<const Value*> let_named_;
  Value* dropout_step_offset_ = nullptr;
  Node* dropout_placeholder_ = nullptr;
  int64_t dropout_elements_ = 0;
  // Where each node was made, the nodes whose shape or dtype the model read at compile
  // time (used, though no op reads them), and the warnings found so far.
  std::unordered_map<const Node*, NodeOrigin> origins_;
  std::set<const Node*> read_at_compile_time_;
  std::vector<ModelWarning> warnings_;
  SourcePos pos(Loc loc) const { return SourcePos{loc.file, loc.line, loc.col}; }
  std::vector<SourcePos> callChain() const;
  void warnUnusedValues();
};

// Limits that keep hostile input from exhausting the machine.
inline constexpr int kMaxEvalDepth = 1000;
inline constexpr int kMaxCallDepth = 100;
inline constexpr uint64_t kMaxEvalSteps = 20'000'000;
inline constexpr size_t kMaxGraphNodes = 2'000'000;
inline constexpr size_t kMaxListLength = 100'000;
inline constexpr int64_t kMaxConstantElements = int64_t{1} << 22;
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 42;

}  // namespace tgc::fe
