// Graph IR as JSON. Schema:
//
//   {"graph": "name", "dims": [["B", 16], ...],
//    "nodes": [{"op": "softmax",
//               "results": [{"name": "y", "type": {"dtype": "f32", "shape": [2, 3]}}],
//               "operands": ["x"], "attrs": {"axis": 0}}, ...],
//    "outputs": ["y", ...]}
//
// Attribute values are plain JSON (the op table says which kind each one is); floats that
// JSON cannot hold are the strings "inf", "-inf" and "nan". Reading checks everything and
// names the JSON path of the first problem ("nodes[3].attrs.axis").
#include "ir/json.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "ir/diagnostic.h"
#include "ir/irio_detail.h"
#include "ir/verifier.h"

namespace tgc {

using nlohmann::json;

namespace {

json typeToJson(const TensorType& t) {
  return json{{"dtype", std::string(dtypeName(t.dtype))}, {"shape", t.shape}};
}

json floatToJson(double v) {
  if (std::isfinite(v)) return v;
  return formatDouble(v);  // "inf", "-inf" or "nan"
}

json attrToJson(const Attr& a) {
  return std::visit(
      [](const auto& v) -> json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, double>) {
          return floatToJson(v);
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          json arr = json::array();
          for (double d : v) arr.push_back(floatToJson(d));
          return arr;
        } else if constexpr (std::is_same_v<T, DType>) {
          return std::string(dtypeName(v));
        } else {
          return v;
        }
      },
      a);
}

// Walks the JSON document; every check failure names the path it is at.
class Reader {
 public:
  explicit Reader(std::string_view file) : file_(file) {}

  std::unique_ptr<Graph> read(const json& j) {
    expectObject(j, "", {"graph", "dims", "nodes", "outputs"});
    g_ = std::make_unique<Graph>(string(member(j, "", "graph"), "graph"));
    if (auto it = j.find("dims"); it != j.end()) readDims(*it);
    const json& nodes = member(j, "", "nodes");
    array(nodes, "nodes");
    for (size_t i = 0; i < nodes.size(); ++i) readNode(nodes[i], fmt::format("nodes[{}]", i));
    const json& outs = member(j, "", "outputs");
    array(outs, "outputs");
    std::vector<Value*> outputs;
    for (size_t i = 0; i < outs.size(); ++i) {
      std::string path = fmt::format("outputs[{}]", i);
      outputs.push_back(lookup(string(outs[i], path), path));
    }
    g_->setOutputs(std::move(outputs));
    auto errs = verifyGraph(*g_);
    if (!errs.empty()) fail("", "graph does not verify: " + errs.front());
    return std::move(g_);
  }

 private:
  [[noreturn]] void fail(const std::string& path, std::string_view msg) const {
    throw ParseError(
        fmt::format("{}: json: {}: {}", file_, path.empty() ? "(top level)" : path, msg));
  }

  // Keys come from the input: control bytes are shown escaped, long keys cut.
  static std::string join(const std::string& path, std::string_view key) {
    std::string k = irio::shownName(key);
    return path.empty() ? k : fmt::format("{}.{}", path, k);
  }

  static std::string_view kindOf(const json& j) {
    switch (j.type()) {
      case json::value_t::null:
        return "null";
      case json::value_t::boolean:
        return "a bool";
      case json::value_t::number_integer:
      case json::value_t::number_unsigned:
        return "an integer";
      case json::value_t::number_float:
        return "a float";
      case json::value_t::string:
        return "a string";
      case json::value_t::array:
        return "an array";
      case json::value_t::object:
        return "an object";
      case json::value_t::binary:
        return "binary data";
      case json::value_t::discarded:
        return "nothing";
    }
    return "?";
  }

  [[noreturn]] void wrongType(const json& j, const std::string& path, std::string_view want) const {
    fail(path, fmt::format("expected {}, got {}", want, kindOf(j)));
  }

  void expectObject(const json& j, const std::string& path,
                    std::initializer_list<std::string_view> keys) const {
    if (!j.is_object()) wrongType(j, path, "an object");
    for (const auto& [k, v] : j.items()) {
      bool known = false;
      for (auto key : keys) known = known || k == key;
      if (!known)
        fail(join(path, k), fmt::format("unknown key (expected one of {})", fmt::join(keys, ", ")));
    }
  }

  const json& member(const json& obj, const std::string& path, std::string_view key) const {
    auto it = obj.find(key);
    if (it == obj.end()) fail(join(path, key), "missing");
    return *it;
  }

  void array(const json& j, const std::string& path) const {
    if (!j.is_array()) wrongType(j, path, "an array");
  }

  std::string string(const json& j, const std::string& path) const {
    if (!j.is_string()) wrongType(j, path, "a string");
    const auto& s = j.get_ref<const std::string&>();
    if (!irio::isValidUtf8(s)) fail(path, "string is not valid UTF-8");
    return s;
  }

  int64_t integer(const json& j, const std::string& path) const {
    if (j.is_number_unsigned()) {
      if (j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(path, "integer does not fit in 64 bits");
      return static_cast<int64_t>(j.get<uint64_t>());
    }
    if (j.is_number_integer()) return j.get<int64_t>();
    // nlohmann reads integers beyond 64 bits as floats.
    if (j.is_number_float() && std::trunc(j.get<double>()) == j.get<double>() &&
        std::fabs(j.get<double>()) >= 0x1p63)
      fail(path, "integer does not fit in 64 bits");
    wrongType(j, path, "an integer");
  }

  // A number, or one of the strings "inf", "-inf", "nan".
  double number(const json& j, const std::string& path) const {
    if (j.is_number_float()) return j.get<double>();
    if (j.is_number_unsigned()) return static_cast<double>(j.get<uint64_t>());
    if (j.is_number_integer()) return static_cast<double>(j.get<int64_t>());
    if (j.is_string()) {
      const auto& s = j.get_ref<const std::string&>();
      if (s == "inf") return HUGE_VAL;
      if (s == "-inf") return -HUGE_VAL;
      if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
      fail(path, fmt::format("expected a number or \"inf\", \"-inf\", \"nan\", got \"{}\"",
                             irio::shownName(s)));
    }
    wrongType(j, path, "a number");
  }

  DType dtype(const json& j, const std::string& path) const {
    std::string s = string(j, path);
    if (auto d = parseDType(s)) return *d;
    std::vector<std::string_view> names;
    for (DType d : kAllDTypes) names.push_back(dtypeName(d));
    auto close = irio::closestName(s, names);
    fail(path, fmt::format("unknown dtype \"{}\"{} (expected one of {})", irio::shownName(s),
                           close ? fmt::format(" (did you mean \"{}\"?)", *close) : "",
                           fmt::join(names, ", ")));
  }

  void readDims(const json& dims) {
    array(dims, "dims");
    std::vector<std::pair<std::string, int64_t>> out;
    std::unordered_set<std::string> seen;  // sets, not scans: inputs may list many names
    for (size_t i = 0; i < dims.size(); ++i) {
      std::string path = fmt::format("dims[{}]", i);
      const json& d = dims[i];
      if (!d.is_array() || d.size() != 2) wrongType(d, path, "a [name, size] pair");
      std::string name = string(d[0], path + "[0]");
      if (!irio::isIdentifier(name))
        fail(path + "[0]",
             fmt::format("dim name \"{}\" is not an identifier", irio::shownName(name)));
      if (!seen.insert(name).second)
        fail(path + "[0]", fmt::format("dim '{}' is bound twice", name));
      int64_t size = integer(d[1], path + "[1]");
      if (size < 0) fail(path + "[1]", fmt::format("dim '{}' has negative size {}", name, size));
      out.emplace_back(std::move(name), size);
    }
    g_->setDims(std::move(out));
  }

  TensorType type(const json& j, const std::string& path) const {
    expectObject(j, path, {"dtype", "shape"});
    TensorType t;
    t.dtype = dtype(member(j, path, "dtype"), join(path, "dtype"));
    std::string shapePath = join(path, "shape");
    const json& shape = member(j, path, "shape");
    array(shape, shapePath);
    for (size_t i = 0; i < shape.size(); ++i) {
      std::string p = fmt::format("{}[{}]", shapePath, i);
      int64_t d = integer(shape[i], p);
      if (d < 0) fail(p, fmt::format("dimension {} is negative", d));
      t.shape.push_back(d);
    }
    if (auto why = irio::shapeTooLarge(t.shape))
      fail(shapePath, fmt::format("{} is too large ({})", t.str(), *why));
    return t;
  }

  Value* lookup(const std::string& name, const std::string& path) const {
    auto it = values_.find(name);
    if (it != values_.end()) return it->second;
    auto close = irio::closestName(name, order_);
    fail(path,
         fmt::format("unknown value \"{}\"{}", irio::shownName(name),
                     close ? fmt::format(" (did you mean \"{}\"?)", irio::shownName(*close)) : ""));
  }

  Attr attrValue(const AttrSpec& spec, const json& j, const std::string& path) const {
    switch (spec.kind) {
      case AttrKind::Bool:
        if (!j.is_boolean()) wrongType(j, path, "a bool");
        return j.get<bool>();
      case AttrKind::Int:
        return integer(j, path);
      case AttrKind::Float:
        return number(j, path);
      case AttrKind::String:
        return string(j, path);
      case AttrKind::DTypeKind:
        return dtype(j, path);
      case AttrKind::Ints: {
        if (!j.is_array()) wrongType(j, path, "an array of integers");
        std::vector<int64_t> v;
        for (size_t i = 0; i < j.size(); ++i)
          v.push_back(integer(j[i], fmt::format("{}[{}]", path, i)));
        return v;
      }
      case AttrKind::Floats: {
        if (!j.is_array()) wrongType(j, path, "an array of numbers");
        std::vector<double> v;
        for (size_t i = 0; i < j.size(); ++i)
          v.push_back(number(j[i], fmt::format("{}[{}]", path, i)));
        return v;
      }
    }
    fail(path, "unsupported attribute kind");
  }

  void readNode(const json& n, const std::string& path) {
    expectObject(n, path, {"op", "results", "operands", "attrs"});
    std::string opPath = join(path, "op");
    std::string opName = string(member(n, path, "op"), opPath);
    auto op = opByName(opName);
    if (!op) {
      std::vector<std::string_view> names;
      for (const auto& i : allOps()) names.push_back(i.name);
      auto close = irio::closestName(opName, names);
      fail(opPath, fmt::format("unknown op \"{}\"{}", irio::shownName(opName),
                               close ? fmt::format(" (did you mean \"{}\"?)", *close) : ""));
    }
    const OpInfo& info = opInfo(*op);

    std::string resPath = join(path, "results");
    const json& results = member(n, path, "results");
    array(results, resPath);
    if (results.empty()) fail(resPath, "a node needs at least one result");
    std::vector<std::string> names;
    std::vector<TensorType> types;
    std::unordered_set<std::string> seen;
    for (size_t i = 0; i < results.size(); ++i) {
      std::string rp = fmt::format("{}[{}]", resPath, i);
      expectObject(results[i], rp, {"name", "type"});
      std::string name = string(member(results[i], rp, "name"), join(rp, "name"));
      if (name.empty()) fail(join(rp, "name"), "value names must not be empty");
      if (values_.count(name) || !seen.insert(name).second)
        fail(join(rp, "name"), fmt::format("redefinition of value \"{}\"", irio::shownName(name)));
      names.push_back(std::move(name));
      types.push_back(type(member(results[i], rp, "type"), join(rp, "type")));
    }

    std::vector<Value*> operands;
    if (auto it = n.find("operands"); it != n.end()) {
      std::string opsPath = join(path, "operands");
      array(*it, opsPath);
      for (size_t i = 0; i < it->size(); ++i) {
        std::string p = fmt::format("{}[{}]", opsPath, i);
        operands.push_back(lookup(string((*it)[i], p), p));
      }
    }
    if (auto why = irio::arityError(info, static_cast<int>(operands.size())))
      fail(join(path, "operands"), *why);

    AttrMap attrs;
    std::string attrsPath = join(path, "attrs");
    if (auto it = n.find("attrs"); it != n.end()) {
      if (!it->is_object()) wrongType(*it, attrsPath, "an object");
      for (const auto& [k, v] : it->items()) {
        std::string p = join(attrsPath, k);
        const AttrSpec* spec = info.findAttr(k);
        if (!spec) {
          std::vector<std::string> known;
          for (const auto& s : info.attrs) known.push_back(s.name);
          auto close = irio::closestName(k, known);
          fail(p, fmt::format("unknown attribute for '{}'{} ({})", info.name,
                              close ? fmt::format(" (did you mean '{}'?)", *close) : "",
                              known.empty() ? "it has none"
                                            : fmt::format("known: {}", fmt::join(known, ", "))));
        }
        Attr a = attrValue(*spec, v, p);
        if (auto why = irio::attrTooLarge(k, a)) fail(p, *why);
        attrs.emplace(k, std::move(a));
      }
    }
    for (const auto& s : info.attrs)
      if (!s.default_value && !attrs.count(s.name))
        fail(join(attrsPath, s.name),
             fmt::format("missing required attribute ({})", attrKindName(s.kind)));

    Node* node = nullptr;
    try {
      node = g_->add(*op, std::move(operands), std::move(attrs), names, types);
    } catch (const IRError& e) {
      fail(path, e.what());
    }
    if (node->numResults() != names.size())
      fail(resPath, fmt::format("'{}' gives {} results, {} are listed", info.name,
                                node->numResults(), names.size()));
    for (size_t i = 0; i < names.size(); ++i) {
      values_[names[i]] = node->result(i);
      order_.push_back(names[i]);
    }
  }

  std::string_view file_;
  std::unique_ptr<Graph> g_;
  std::unordered_map<std::string, Value*> values_;
  std::vector<std::string> order_;  // names in definition order, for suggestions
};

}  // namespace

json graphToJson(const Graph& g) {
  json dims = json::array();
  for (const auto& [name, size] : g.dims()) dims.push_back(json::array({name, size}));
  json nodes = json::array();
  for (const auto& n : g.nodes()) {
    json results = json::array();
    for (size_t i = 0; i < n->numResults(); ++i)
      results.push_back(
          {{"name", n->result(i)->name()}, {"type", typeToJson(n->result(i)->type())}});
    json operands = json::array();
    for (const Value* v : n->operands()) operands.push_back(v->name());
    json attrs = json::object();
    for (const auto& [k, v] : n->attrs()) attrs[k] = attrToJson(v);
    nodes.push_back({{"op", std::string(n->info().name)},
                     {"results", std::move(results)},
                     {"operands", std::move(operands)},
                     {"attrs", std::move(attrs)}});
  }
  json outputs = json::array();
  for (const Value* v : g.outputs()) outputs.push_back(v->name());
  return json{{"graph", g.name()},
              {"dims", std::move(dims)},
              {"nodes", std::move(nodes)},
              {"outputs", std::move(outputs)}};
}

std::unique_ptr<Graph> graphFromJson(const json& j, std::string_view filename) {
  return Reader(filename).read(j);
}

std::unique_ptr<Graph> graphFromJsonText(std::string_view text, std::string_view filename) {
  // The line and column of byte `offset`.
  auto locAt = [&](size_t offset) {
    SourceLoc loc;
    for (size_t i = 0; i < offset && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++loc.line;
        loc.col = 1;
      } else {
        ++loc.col;
      }
    }
    return loc;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    // nlohmann's message is "[json.exception.parse_error.101] parse error at line L,
    // column C: what"; keep only "what", the location is ours. e.byte counts the bytes
    // read, the offending one included.
    std::string msg = e.what();
    if (size_t p = msg.find(": "); p != std::string::npos) msg = msg.substr(p + 2);
    SourceLoc loc = locAt(e.byte > 0 ? e.byte - 1 : 0);
    throw ParseError(irio::errorAt(filename, text, loc, "json: " + msg));
  } catch (const json::exception& e) {
    // Numbers too large for a double ("number overflow parsing '1e999'") come without a
    // position; find the number's spelling in the text instead.
    std::string msg = e.what();
    if (size_t p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    size_t q1 = msg.find('\''), q2 = msg.rfind('\'');
    size_t at = q1 < q2 ? text.find(msg.substr(q1 + 1, q2 - q1 - 1)) : std::string_view::npos;
    if (at == std::string_view::npos)
      throw ParseError(fmt::format("{}: error: json: {}", filename, msg));
    throw ParseError(irio::errorAt(filename, text, locAt(at), "json: " + msg));
  }
  return graphFromJson(j, filename);
}

}  // namespace tgc
