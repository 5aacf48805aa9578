// The op table (generated from ops.def): names, arity, attributes, shape rules, fusion kinds.
#pragma once

#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ir/attr.h"
#include "ir/dtype.h"

namespace tgc {

enum class OpKind : uint16_t {
#define OP(Enum, ...) Enum,
#include "ir/ops.def"
#undef OP
};

// How the fusion passes may group an op with its neighbours.
enum class FusionKind : uint8_t { Elementwise, Reduction, MatMul, Layout, Opaque };
std::string_view fusionKindName(FusionKind k);

struct AttrSpec {
  std::string name;
  AttrKind kind;
  std::optional<Attr> default_value;  // nullopt: required
};

// What a shape rule sees. `declared` holds the result types the caller asserts; source ops
// (no operands: input, constant, iota) take their type from it.
struct InferContext {
  std::span<const TensorType> operands;
  const AttrMap& attrs;
  std::span<const TensorType> declared;
};

// A shape or dtype rule failed; the message names the shapes, the caller adds the op.
struct ShapeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using InferFn = std::vector<TensorType> (*)(const InferContext&);

struct OpInfo {
  OpKind kind;
  std::string_view name;
  int min_operands;
  int max_operands;  // -1: any number
  FusionKind fusion;
  InferFn infer;
  std::vector<AttrSpec> attrs;
  std::string_view doc;

  const AttrSpec* findAttr(std::string_view n) const;
  bool isSource() const { return max_operands == 0; }
};

const OpInfo& opInfo(OpKind k);
std::optional<OpKind> opByName(std::string_view name);
std::span<const OpInfo> allOps();
inline std::string_view opName(OpKind k) { return opInfo(k).name; }

// Checks operand count and attributes against the table (unknown names, wrong kinds,
// missing required ones), drops attributes equal to their default so that equal nodes
// compare equal, then runs the shape rule. Throws ShapeError.
std::vector<TensorType> inferResultTypes(OpKind op, std::span<const TensorType> operands,
                                         AttrMap& attrs, std::span<const TensorType> declared);

// Attribute access with the table's defaults filled in.
const Attr& getAttr(OpKind op, const AttrMap& attrs, std::string_view name);
int64_t attrInt(OpKind op, const AttrMap& attrs, std::string_view name);
double attrFloat(OpKind op, const AttrMap& attrs, std::string_view name);
bool attrBool(OpKind op, const AttrMap& attrs, std::string_view name);
const std::string& attrString(OpKind op, const AttrMap& attrs, std::string_view name);
const std::vector<int64_t>& attrInts(OpKind op, const AttrMap& attrs, std::string_view name);
const std::vector<double>& attrFloats(OpKind op, const AttrMap& attrs, std::string_view name);
DType attrDType(OpKind op, const AttrMap& attrs, std::string_view name);

// Shape helpers shared by rules, the interpreter and passes.
// numpy broadcasting of two shapes; throws ShapeError naming both.
Shape broadcastShapes(const Shape& a, const Shape& b);
// Normalizes a possibly negative axis against rank; throws ShapeError when out of range.
int64_t normalizeAxis(int64_t axis, int64_t rank);

// dynamic_update_slice's bounds, shared by the interpreter and the CPU kernel: why the first
// of `starts` (one per dim of x) outside [0, x - update] is out of range, or empty.
std::string updateStartsError(const Shape& x, const Shape& update, const int64_t* starts);

}  // namespace tgc
