#include "runtime/index_bounds.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

namespace tgc::runtime {
namespace {

// Where one element of a traced value comes from: element `flat` of integer input `input`
// (its position in Tracer::inputs), or nothing traceable (input -1).
struct Origin {
  int32_t input = -1;
  int64_t flat = 0;
};
using Origins = std::vector<Origin>;

// Values bigger than this are not traced (the trace costs 16 bytes an element).
constexpr int64_t kMaxTraced = int64_t{1} << 24;

std::vector<int64_t> stridesOf(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

// For every element of `out` (row-major), the flat index of `in` it reads, given the operand
// index of each output multi-index: `map(outIndex, inIndex)` fills inIndex.
template <typename F>
Origins remap(const Origins& in, const Shape& inShape, const Shape& outShape, F map) {
  const int64_t n = numElements(outShape);
  Origins out(static_cast<size_t>(n));
  const std::vector<int64_t> inStrides = stridesOf(inShape);
  std::vector<int64_t> idx(outShape.size(), 0), src(inShape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    map(idx, src);
    int64_t flat = 0;
    for (size_t d = 0; d < src.size(); ++d) flat += src[d] * inStrides[d];
    out[static_cast<size_t>(i)] = in[static_cast<size_t>(flat)];
    for (size_t d = idx.size(); d-- > 0;) {  // the next multi-index
      if (++idx[d] < outShape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

class Tracer {
 public:
  std::vector<const Value*> inputs;  // integer inputs seen, by Origin::input

  // The origin of every element of v, or null when none is traceable.
  std::shared_ptr<const Origins> trace(const Value* v) {
    auto it = memo_.find(v);
    if (it != memo_.end()) return it->second;
    auto r = compute(v);
    if (r && std::all_of(r->begin(), r->end(), [](const Origin& o) { return o.input < 0; }))
      r = nullptr;
    memo_.emplace(v, r);
    return r;
  }

 private:
  std::shared_ptr<const Origins> compute(const Value* v) {
    const Node& n = *v->def();
    const TensorType& t = v->type();
    if (!isInteger(t.dtype) || t.numel() > kMaxTraced) return nullptr;
    switch (n.op()) {
      case OpKind::Input: {
        const auto id = static_cast<int32_t>(inputs.size());
        inputs.push_back(v);
        auto o = std::make_shared<Origins>(static_cast<size_t>(t.numel()));
        for (int64_t i = 0; i < t.numel(); ++i) (*o)[static_cast<size_t>(i)] = {id, i};
        return o;
      }
      case OpKind::Reshape: return trace(n.operand(0));  // the same elements in the same order
      case OpKind::Cast: {
        // Only widening keeps every value: i64 -> i32 wraps an out-of-range index into range.
        const DType from = n.operand(0)->type().dtype;
        if (!(from == t.dtype || (from == DType::i32 && t.dtype == DType::i64))) return nullptr;
        return trace(n.operand(0));
      }
      case OpKind::Transpose: {
        auto in = trace(n.operand(0));
        if (!in) return nullptr;
        const auto& perm = n.attrInts("perm");
        return std::make_shared<Origins>(remap(
            *in, n.operand(0)->type().shape, t.shape,
            [&](const std::vector<int64_t>& idx, std::vector<int64_t>& src) {
              for (size_t i = 0; i < perm.size(); ++i) src[static_cast<size_t>(perm[i])] = idx[i];
            }));
      }
      case OpKind::Broadcast: {
        auto in = trace(n.operand(0));
        if (!in) return nullptr;
        const Shape& is = n.operand(0)->type().shape;
        const size_t lead = t.shape.size() - is.size();
        return std::make_shared<Origins>(
            remap(*in, is, t.shape, [&](const std::vector<int64_t>& idx, std::vector<int64_t>& src) {
              for (size_t d = 0; d < is.size(); ++d) src[d] = is[d] == 1 ? 0 : idx[d + lead];
            }));
      }
      case OpKind::Slice: {
        auto in = trace(n.operand(0));
        if (!in) return nullptr;
        const Shape& is = n.operand(0)->type().shape;
        const auto axis = static_cast<size_t>(normalizeAxis(n.attrInt("axis"),
                                                            static_cast<int64_t>(is.size())));
        const int64_t start = n.attrInt("start"), step = n.attrInt("step");
        return std::make_shared<Origins>(
            remap(*in, is, t.shape, [&](const std::vector<int64_t>& idx, std::vector<int64_t>& src) {
              src = idx;
              src[axis] = start + idx[axis] * step;
            }));
      }
      case OpKind::Concat: {
        const auto axis = static_cast<size_t>(normalizeAxis(n.attrInt("axis"), t.rank()));
        auto out = std::make_shared<Origins>(static_cast<size_t>(t.numel()));
        // Row-major: the output is `outer` blocks, each the operands' blocks one after another.
        int64_t outer = 1, inner = 1;
        for (size_t d = 0; d < axis; ++d) outer *= t.shape[d];
        for (size_t d = axis + 1; d < t.shape.size(); ++d) inner *= t.shape[d];
        const int64_t outBlock = t.shape[axis] * inner;
        int64_t offset = 0;  // of the operand's block within an output block
        bool any = false;
        for (const Value* x : n.operands()) {
          const int64_t block = x->type().shape[axis] * inner;
          if (auto in = trace(x)) {
            any = true;
            for (int64_t o = 0; o < outer; ++o)
              for (int64_t j = 0; j < block; ++j)
                (*out)[static_cast<size_t>(o * outBlock + offset + j)] =
                    (*in)[static_cast<size_t>(o * block + j)];
          }
          offset += block;
        }
        return any ? out : nullptr;
      }
      default: return nullptr;
    }
  }

  std::unordered_map<const Value*, std::shared_ptr<const Origins>> memo_;
};

int64_t lastDim(const Value* v) {
  const Shape& s = v->type().shape;
  return s.empty() ? 1 : s.back();
}

std::string positionStr(const Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return fmt::format("[{}]", fmt::join(idx, ", "));
}

[[noreturn]] void fail(const IndexBound& b, int64_t pos, int64_t value) {
  const std::string where = fmt::format("at position {} of input %{}", positionStr(b.type.shape, pos),
                                        b.input);
  if (b.kind == IndexBound::Kind::Target)
    throw IRError(fmt::format("{}: target {} ({}) is outside [0, {})", b.op, value, where, b.hi));
  throw IRError(fmt::format("{}: index {} ({}) is out of range for a table of {} rows; valid "
                            "indices are [0, {})",
                            b.op, value, where, b.hi, b.hi));
}

template <typename T>
void scan(const IndexBound& b, const T* p) {
  const auto hi = static_cast<uint64_t>(b.hi);
  // One unsigned compare catches both ends: a negative value wraps above any hi.
  auto bad = [&](int64_t i) { return static_cast<uint64_t>(static_cast<int64_t>(p[i])) >= hi; };
  if (b.positions.empty()) {
    // Blocks without a branch per element (vectorized); a block with a bad one is scanned
    // again for the first.
    constexpr int64_t kBlock = 512;
    const int64_t n = b.type.numel();
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
      const int64_t i1 = std::min(n, i0 + kBlock);
      bool any = false;
      for (int64_t i = i0; i < i1; ++i) any |= bad(i);
      if (!any) continue;
      for (int64_t i = i0; i < i1; ++i)
        if (bad(i)) fail(b, i, static_cast<int64_t>(p[i]));
    }
  } else {
    for (int64_t i : b.positions)
      if (bad(i)) fail(b, i, static_cast<int64_t>(p[i]));
  }
}

}  // namespace

std::vector<IndexBound> findIndexBounds(const Graph& g) {
  Tracer tracer;
  std::vector<IndexBound> out;
  for (const auto& node : g.nodes()) {
    const Node& n = *node;
    const Value* indices = nullptr;
    int64_t hi = 0;
    IndexBound::Kind kind = IndexBound::Kind::Row;
    switch (n.op()) {
      case OpKind::Gather:
        indices = n.operand(1);
        hi = n.operand(0)->type().shape.at(0);
        break;
      case OpKind::ScatterAdd:
        indices = n.operand(0);
        hi = n.result()->type().shape.at(0);
        break;
      case OpKind::SoftmaxCrossEntropy:
      case OpKind::SoftmaxCrossEntropyGrad:
        indices = n.operand(1);
        hi = lastDim(n.operand(0));
        kind = IndexBound::Kind::Target;
        break;
      default: continue;
    }
    auto origins = tracer.trace(indices);
    if (!origins) continue;
    // The positions of each input that reach this operand.
    std::map<int32_t, std::vector<int64_t>> reached;
    for (const Origin& o : *origins)
      if (o.input >= 0) reached[o.input].push_back(o.flat);
    for (auto& [id, pos] : reached) {
      const Value* in = tracer.inputs[static_cast<size_t>(id)];
      std::sort(pos.begin(), pos.end());
      pos.erase(std::unique(pos.begin(), pos.end()), pos.end());
      if (static_cast<int64_t>(pos.size()) == in->type().numel()) pos.clear();  // all
      IndexBound b{in->name(), in->type(), hi, kind, describeNode(n), std::move(pos)};
      const bool seen = std::any_of(out.begin(), out.end(), [&](const IndexBound& o) {
        return o.input == b.input && o.hi == b.hi && o.kind == b.kind &&
               o.positions == b.positions;
      });
      if (!seen) out.push_back(std::move(b));
    }
  }
  return out;
}

void checkIndexBound(const IndexBound& b, const void* data) {
  if (b.type.dtype == DType::i64)
    scan(b, static_cast<const int64_t*>(data));
  else
    scan(b, static_cast<const int32_t*>(data));
}

}  // namespace tgc::runtime
