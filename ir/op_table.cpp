#include "ir/op_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <unordered_map>

#include "ir/fused_ops.h"

namespace tgc {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw ShapeError(msg); }

// ---- shape rules -------------------------------------------------------------------------

const TensorType& declaredOne(const InferContext& c) {
  if (c.declared.size() != 1) fail("needs exactly one declared result type");
  return c.declared[0];
}

void checkDims(const Shape& s, std::string_view what) {
  for (int64_t d : s)
    if (d < 0) fail(fmt::format("{} {} has a negative dimension", what, shapeStr(s)));
}

std::vector<TensorType> inferSource(const InferContext& c) {
  const TensorType& t = declaredOne(c);
  checkDims(t.shape, "type");
  return {t};
}

std::vector<TensorType> inferConstant(const InferContext& c) {
  const TensorType& t = declaredOne(c);
  checkDims(t.shape, "type");
  const auto& v = std::get<std::vector<double>>(c.attrs.at("value"));
  if (v.size() != 1 && static_cast<int64_t>(v.size()) != t.numel())
    fail(fmt::format("value has {} elements; {} needs 1 or {}", v.size(), t.str(), t.numel()));
  return {t};
}

std::vector<TensorType> inferIota(const InferContext& c) {
  const TensorType& t = declaredOne(c);
  checkDims(t.shape, "type");
  if (t.dtype == DType::boolean) fail("iota cannot produce bool");
  normalizeAxis(std::get<int64_t>(c.attrs.at("axis")), t.rank());
  return {t};
}

std::vector<TensorType> inferPhilox(const InferContext& c) {
  for (size_t i = 0; i < 2; ++i)
    if (c.operands[i] != TensorType{DType::i64, {}})
      fail(fmt::format("{} must be i64[], got {}", i == 0 ? "seed" : "offset",
                       c.operands[i].str()));
  const TensorType& t = declaredOne(c);
  checkDims(t.shape, "type");
  if (!isFloat(t.dtype)) fail(fmt::format("result must be a float type, got {}", t.str()));
  return {t};
}

std::vector<TensorType> inferUnaryNumeric(const InferContext& c) {
  if (c.operands[0].dtype == DType::boolean)
    fail(fmt::format("operand {} must be numeric", c.operands[0].str()));
  return {c.operands[0]};
}

std::vector<TensorType> inferUnaryFloat(const InferContext& c) {
  if (!isFloat(c.operands[0].dtype))
    fail(fmt::format("operand {} must be a float type", c.operands[0].str()));
  return {c.operands[0]};
}

std::vector<TensorType> inferSameAsFloatOperand(const InferContext& c) {
  auto r = inferUnaryFloat(c);
  normalizeAxis(std::get<int64_t>(c.attrs.count("axis") ? c.attrs.at("axis") : Attr{int64_t{-1}}),
                c.operands[0].rank());
  return r;
}

std::vector<TensorType> inferUnaryBool(const InferContext& c) {
  if (c.operands[0].dtype != DType::boolean)
    fail(fmt::format("operand {} must be bool", c.operands[0].str()));
  return {c.operands[0]};
}

std::vector<TensorType> inferCast(const InferContext& c) {
  return {TensorType{std::get<DType>(c.attrs.at("dtype")), c.operands[0].shape}};
}

TensorType broadcastSameDType(const InferContext& c) {
  const TensorType& a = c.operands[0];
  const TensorType& b = c.operands[1];
  if (a.dtype != b.dtype)
    fail(fmt::format("operands {} and {} have different dtypes", a.str(), b.str()));
  return {a.dtype, broadcastShapes(a.shape, b.shape)};
}

std::vector<TensorType> inferBinaryNumeric(const InferContext& c) {
  TensorType t = broadcastSameDType(c);
  if (t.dtype == DType::boolean)
    fail(fmt::format("operands {} and {} must be numeric", c.operands[0].str(),
                     c.operands[1].str()));
  return {t};
}

std::vector<TensorType> inferBinaryFloat(const InferContext& c) {
  TensorType t = broadcastSameDType(c);
  if (!isFloat(t.dtype))
    fail(fmt::format("operands {} and {} must be float types", c.operands[0].str(),
                     c.operands[1].str()));
  return {t};
}

std::vector<TensorType> inferCompare(const InferContext& c) {
  TensorType t = broadcastSameDType(c);
  return {TensorType{DType::boolean, t.shape}};
}

std::vector<TensorType> inferBinaryBool(const InferContext& c) {
  TensorType t = broadcastSameDType(c);
  if (t.dtype != DType::boolean)
    fail(fmt::format("operands {} and {} must be bool", c.operands[0].str(),
                     c.operands[1].str()));
  return {t};
}

std::vector<TensorType> inferWhere(const InferContext& c) {
  const auto& cond = c.operands[0];
  const auto& a = c.operands[1];
  const auto& b = c.operands[2];
  if (cond.dtype != DType::boolean) fail(fmt::format("condition {} must be bool", cond.str()));
  if (a.dtype != b.dtype)
    fail(fmt::format("branches {} and {} have different dtypes", a.str(), b.str()));
  return {TensorType{a.dtype, broadcastShapes(cond.shape, broadcastShapes(a.shape, b.shape))}};
}

std::vector<TensorType> inferReduce(const InferContext& c) {
  const TensorType& x = c.operands[0];
  if (x.dtype == DType::boolean) fail(fmt::format("operand {} must be numeric", x.str()));
  const auto& axes = std::get<std::vector<int64_t>>(c.attrs.at("axes"));
  auto kd = c.attrs.find("keepdims");
  bool keepdims = kd != c.attrs.end() && std::get<bool>(kd->second);
  std::vector<bool> reduced(x.shape.size(), false);
  for (int64_t a : axes) {
    int64_t n = normalizeAxis(a, x.rank());
    if (reduced[n]) fail(fmt::format("axis {} is listed twice for {}", a, x.str()));
    reduced[n] = true;
  }
  Shape out;
  for (size_t i = 0; i < x.shape.size(); ++i) {
    if (!reduced[i]) out.push_back(x.shape[i]);
    else if (keepdims) out.push_back(1);
  }
  return {TensorType{x.dtype, out}};
}

std::vector<TensorType> inferLayerNorm(const InferContext& c) {
  const auto& x = c.operands[0];
  if (!isFloat(x.dtype)) fail(fmt::format("input {} must be a float type", x.str()));
  if (x.rank() < 1) fail(fmt::format("input {} must have rank >= 1", x.str()));
  TensorType p{x.dtype, {x.shape.back()}};
  for (int i = 1; i < 3; ++i)
    if (c.operands[i] != p)
      fail(fmt::format("{} is {} but input {} needs {}", i == 1 ? "gamma" : "beta",
                       c.operands[i].str(), x.str(), p.str()));
  return {x};
}

std::vector<TensorType> inferRmsNorm(const InferContext& c) {
  const auto& x = c.operands[0];
  if (!isFloat(x.dtype)) fail(fmt::format("input {} must be a float type", x.str()));
  if (x.rank() < 1) fail(fmt::format("input {} must have rank >= 1", x.str()));
  TensorType p{x.dtype, {x.shape.back()}};
  if (c.operands[1] != p)
    fail(fmt::format("gamma is {} but input {} needs {}", c.operands[1].str(), x.str(), p.str()));
  return {x};
}

std::vector<TensorType> inferMatMul(const InferContext& c) {
  const auto& a = c.operands[0];
  const auto& b = c.operands[1];
  auto flag = [&](const char* n) {
    auto it = c.attrs.find(n);
    return it != c.attrs.end() && std::get<bool>(it->second);
  };
  if (a.dtype != b.dtype || a.dtype == DType::boolean)
    fail(fmt::format("operands {} and {} must share a numeric dtype", a.str(), b.str()));
  if (a.rank() < 2 || b.rank() < 2)
    fail(fmt::format("operands {} and {} must have rank >= 2", a.str(), b.str()));
  int64_t m = a.shape[a.rank() - 2], ka = a.shape[a.rank() - 1];
  if (flag("transpose_a")) std::swap(m, ka);
  int64_t kb = b.shape[b.rank() - 2], n = b.shape[b.rank() - 1];
  if (flag("transpose_b")) std::swap(kb, n);
  if (ka != kb)
    fail(fmt::format("contraction dims differ: {} and {} ({} vs {})", a.str(), b.str(), ka,
                     kb));
  Shape batch;
  try {
    batch = broadcastShapes(Shape(a.shape.begin(), a.shape.end() - 2),
                            Shape(b.shape.begin(), b.shape.end() - 2));
  } catch (const ShapeError&) {
    fail(fmt::format("batch dims of {} and {} do not broadcast", a.str(), b.str()));
  }
  batch.push_back(m);
  batch.push_back(n);
  return {TensorType{a.dtype, batch}};
}

std::vector<TensorType> inferReshape(const InferContext& c) {
  const auto& x = c.operands[0];
  const auto& shape = std::get<std::vector<int64_t>>(c.attrs.at("shape"));
  checkDims(shape, "shape");
  if (numElements(shape) != x.numel())
    fail(fmt::format("cannot reshape {} ({} elements) to {} ({} elements)", x.str(), x.numel(),
                     shapeStr(shape), numElements(shape)));
  return {TensorType{x.dtype, shape}};
}

std::vector<TensorType> inferTranspose(const InferContext& c) {
  const auto& x = c.operands[0];
  const auto& perm = std::get<std::vector<int64_t>>(c.attrs.at("perm"));
  if (static_cast<int64_t>(perm.size()) != x.rank())
    fail(fmt::format("perm {} has {} entries but {} has rank {}", shapeStr(perm), perm.size(),
                     x.str(), x.rank()));
  std::vector<bool> seen(perm.size(), false);
  Shape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= x.rank() || seen[p])
      fail(fmt::format("perm {} is not a permutation of 0..{}", shapeStr(perm), x.rank() - 1));
    seen[p] = true;
    out.push_back(x.shape[p]);
  }
  return {TensorType{x.dtype, out}};
}

std::vector<TensorType> inferBroadcast(const InferContext& c) {
  const auto& x = c.operands[0];
  const auto& shape = std::get<std::vector<int64_t>>(c.attrs.at("shape"));
  checkDims(shape, "shape");
  bool ok = x.shape.size() <= shape.size();
  for (size_t i = 0; ok && i < x.shape.size(); ++i) {
    int64_t d = x.shape[x.shape.size() - 1 - i];
    ok = d == 1 || d == shape[shape.size() - 1 - i];
  }
  if (!ok) fail(fmt::format("cannot broadcast {} to {}", x.str(), shapeStr(shape)));
  return {TensorType{x.dtype, shape}};
}

std::vector<TensorType> inferSlice(const InferContext& c) {
  const auto& x = c.operands[0];
  auto get = [&](const char* n, int64_t dflt) {
    auto it = c.attrs.find(n);
    return it == c.attrs.end() ? dflt : std::get<int64_t>(it->second);
  };
  int64_t axis = normalizeAxis(get("axis", 0), x.rank());
  int64_t start = get("start", 0), end = get("end", 0), step = get("step", 1);
  int64_t dim = x.shape[axis];
  if (step < 1) fail(fmt::format("step {} must be >= 1", step));
  if (start < 0 || end < start || end > dim)
    fail(fmt::format("range [{}, {}) is not within dim {} (size {}) of {}", start, end, axis,
                     dim, x.str()));
  Shape out = x.shape;
  out[axis] = end == start ? 0 : (end - start - 1) / step + 1;  // ceil; no overflow for any step
  return {TensorType{x.dtype, out}};
}

std::vector<TensorType> inferConcat(const InferContext& c) {
  const auto& first = c.operands[0];
  int64_t axis = normalizeAxis(std::get<int64_t>(c.attrs.at("axis")), first.rank());
  Shape out = first.shape;
  for (size_t i = 1; i < c.operands.size(); ++i) {
    const auto& t = c.operands[i];
    bool ok = t.dtype == first.dtype && t.rank() == first.rank();
    for (int64_t d = 0; ok && d < t.rank(); ++d) ok = d == axis || t.shape[d] == first.shape[d];
    if (!ok)
      fail(fmt::format("operands {} and {} do not match outside axis {}", first.str(), t.str(),
                       axis));
    out[axis] += t.shape[axis];
  }
  return {TensorType{first.dtype, out}};
}

std::vector<TensorType> inferGather(const InferContext& c) {
  const auto& table = c.operands[0];
  const auto& idx = c.operands[1];
  if (table.rank() < 1) fail(fmt::format("table {} must have rank >= 1", table.str()));
  if (!isInteger(idx.dtype)) fail(fmt::format("indices {} must be i32 or i64", idx.str()));
  Shape out = idx.shape;
  out.insert(out.end(), table.shape.begin() + 1, table.shape.end());
  return {TensorType{table.dtype, out}};
}

std::vector<TensorType> inferScatterAdd(const InferContext& c) {
  const auto& idx = c.operands[0];
  const auto& upd = c.operands[1];
  if (!isInteger(idx.dtype)) fail(fmt::format("indices {} must be i32 or i64", idx.str()));
  if (upd.dtype == DType::boolean) fail(fmt::format("updates {} must be numeric", upd.str()));
  bool prefix = upd.rank() >= idx.rank() &&
                std::equal(idx.shape.begin(), idx.shape.end(), upd.shape.begin());
  if (!prefix)
    fail(fmt::format("updates {} must start with the indices shape {}", upd.str(), idx.str()));
  int64_t rows = std::get<int64_t>(c.attrs.at("rows"));
  if (rows < 0) fail(fmt::format("rows {} must be >= 0", rows));
  Shape out{rows};
  out.insert(out.end(), upd.shape.begin() + idx.rank(), upd.shape.end());
  return {TensorType{upd.dtype, out}};
}

std::vector<TensorType> inferDynamicUpdateSlice(const InferContext& c) {
  const auto &x = c.operands[0], &update = c.operands[1], &starts = c.operands[2];
  bool fits = update.dtype == x.dtype && update.rank() == x.rank();
  for (int64_t d = 0; fits && d < x.rank(); ++d) fits = update.shape[d] <= x.shape[d];
  if (!fits) fail(fmt::format("update {} does not fit in {}", update.str(), x.str()));
  if (starts != TensorType{DType::i64, {x.rank()}})
    fail(fmt::format("starts {} must be i64[{}], one per dim of {}", starts.str(), x.rank(), x.str()));
  return {x};
}

// ---- attribute specs -----------------------------------------------------------------------

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

Attr parseDefault(AttrKind k, const std::string& v) {
  switch (k) {
    case AttrKind::Bool: return v == "true";
    case AttrKind::Int: return static_cast<int64_t>(std::stoll(v));
    case AttrKind::Float: return std::stod(v);
    case AttrKind::String: return v.substr(1, v.size() - 2);  // strip the quotes
    case AttrKind::DTypeKind: return *parseDType(v);
    case AttrKind::Ints: return std::vector<int64_t>{};
    case AttrKind::Floats: return std::vector<double>{};
  }
  return false;
}

std::vector<AttrSpec> parseSpecs(std::string_view text) {
  std::vector<AttrSpec> specs;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    size_t colon = item.find(':'), eq = item.find('=');
    AttrSpec s;
    s.name = trim(item.substr(0, colon));
    std::string kind = trim(item.substr(colon + 1, eq == std::string::npos ? eq : eq - colon - 1));
    static const std::pair<const char*, AttrKind> kinds[] = {
        {"bool", AttrKind::Bool},     {"int", AttrKind::Int},       {"float", AttrKind::Float},
        {"string", AttrKind::String}, {"ints", AttrKind::Ints},     {"floats", AttrKind::Floats},
        {"dtype", AttrKind::DTypeKind}};
    for (auto& [n, k] : kinds)
      if (kind == n) s.kind = k;
    if (eq != std::string::npos) s.default_value = parseDefault(s.kind, trim(item.substr(eq + 1)));
    specs.push_back(std::move(s));
  }
  return specs;
}

const std::vector<OpInfo>& table() {
  static const std::vector<OpInfo> t = [] {
    std::vector<OpInfo> v;
#define OP(Enum, Name, MinOps, MaxOps, Fusion, Infer, Attrs, Doc) \
  v.push_back(OpInfo{OpKind::Enum, Name, MinOps, MaxOps, FusionKind::Fusion, Infer, parseSpecs(Attrs), Doc});
#include "ir/ops.def"
#undef OP
    return v;
  }();
  return t;
}

}  // namespace

std::string_view fusionKindName(FusionKind k) {
  switch (k) {
    case FusionKind::Elementwise: return "elementwise";
    case FusionKind::Reduction: return "reduction";
    case FusionKind::MatMul: return "matmul";
    case FusionKind::Layout: return "layout";
    case FusionKind::Opaque: return "opaque";
  }
  return "?";
}

const AttrSpec* OpInfo::findAttr(std::string_view n) const {
  for (const auto& a : attrs)
    if (a.name == n) return &a;
  return nullptr;
}

const OpInfo& opInfo(OpKind k) { return table()[static_cast<size_t>(k)]; }

std::span<const OpInfo> allOps() { return table(); }

std::optional<OpKind> opByName(std::string_view name) {
  static const auto byName = [] {
    std::unordered_map<std::string_view, OpKind> m;
    for (const auto& i : table()) m.emplace(i.name, i.kind);
    return m;
  }();
  auto it = byName.find(name);
  if (it == byName.end()) return std::nullopt;
  return it->second;
}

std::vector<TensorType> inferResultTypes(OpKind op, std::span<const TensorType> operands,
                                         AttrMap& attrs, std::span<const TensorType> declared) {
  const OpInfo& info = opInfo(op);
  int n = static_cast<int>(operands.size());
  if (n < info.min_operands || (info.max_operands >= 0 && n > info.max_operands)) {
    if (info.min_operands == info.max_operands)
      fail(fmt::format("takes {} operand{}, got {}", info.min_operands,
                       info.min_operands == 1 ? "" : "s", n));
    fail(fmt::format("takes at least {} operand{}, got {}", info.min_operands,
                     info.min_operands == 1 ? "" : "s", n));
  }
  for (auto it = attrs.begin(); it != attrs.end();) {
    const AttrSpec* spec = info.findAttr(it->first);
    if (!spec) {
      std::string known;
      for (const auto& s : info.attrs) known += (known.empty() ? "" : ", ") + s.name;
      fail(fmt::format("unknown attribute '{}' (known: {})", it->first,
                       known.empty() ? "none" : known));
    }
    // An integer literal is a fine float; an empty list is fine for either list kind.
    if (spec->kind == AttrKind::Float && std::holds_alternative<int64_t>(it->second))
      it->second = static_cast<double>(std::get<int64_t>(it->second));
    if (spec->kind == AttrKind::Floats && std::holds_alternative<std::vector<int64_t>>(it->second)) {
      const auto& iv = std::get<std::vector<int64_t>>(it->second);
      it->second = std::vector<double>(iv.begin(), iv.end());
    }
    if (attrKind(it->second) != spec->kind)
      fail(fmt::format("attribute '{}' must be {}, got {}", it->first, attrKindName(spec->kind),
                       attrKindName(attrKind(it->second))));
    if (spec->default_value && *spec->default_value == it->second) it = attrs.erase(it);
    else ++it;
  }
  for (const auto& s : info.attrs)
    if (!s.default_value && !attrs.count(s.name))
      fail(fmt::format("missing required attribute '{}'", s.name));
  return info.infer(InferContext{operands, attrs, declared});
}

const Attr& getAttr(OpKind op, const AttrMap& attrs, std::string_view name) {
  auto it = attrs.find(std::string(name));
  if (it != attrs.end()) return it->second;
  const AttrSpec* s = opInfo(op).findAttr(name);
  if (!s || !s->default_value)
    throw std::logic_error(fmt::format("{} has no attribute '{}'", opName(op), name));
  return *s->default_value;
}

int64_t attrInt(OpKind op, const AttrMap& a, std::string_view n) {
  return std::get<int64_t>(getAttr(op, a, n));
}
double attrFloat(OpKind op, const AttrMap& a, std::string_view n) {
  return std::get<double>(getAttr(op, a, n));
}
bool attrBool(OpKind op, const AttrMap& a, std::string_view n) {
  return std::get<bool>(getAttr(op, a, n));
}
const std::string& attrString(OpKind op, const AttrMap& a, std::string_view n) {
  return std::get<std::string>(getAttr(op, a, n));
}
const std::vector<int64_t>& attrInts(OpKind op, const AttrMap& a, std::string_view n) {
  return std::get<std::vector<int64_t>>(getAttr(op, a, n));
}
const std::vector<double>& attrFloats(OpKind op, const AttrMap& a, std::string_view n) {
  return std::get<std::vector<double>>(getAttr(op, a, n));
}
DType attrDType(OpKind op, const AttrMap& a, std::string_view n) {
  return std::get<DType>(getAttr(op, a, n));
}

Shape broadcastShapes(const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      fail(fmt::format("shapes {} and {} do not broadcast", shapeStr(a), shapeStr(b)));
    out[r - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

std::string updateStartsError(const Shape& x, const Shape& update, const int64_t* starts) {
  for (size_t d = 0; d < x.size(); ++d)
    if (starts[d] < 0 || starts[d] > x[d] - update[d])
      return fmt::format("start {} of dim {} is out of range: an update of {} must start in [0, {}] of size {}",
                         starts[d], d, update[d], x[d] - update[d], x[d]);
  return {};
}

int64_t normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    fail(fmt::format("axis {} is out of range for rank {}", axis, rank));
  return axis < 0 ? axis + rank : axis;
}

}  // namespace tgc
