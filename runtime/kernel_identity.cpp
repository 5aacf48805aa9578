#include "runtime/kernel_identity.h"

#include <fmt/format.h>

#include <unordered_map>

namespace tgc::runtime {

namespace kir = codegen::kir;

namespace {

class KeyWriter {
 public:
  std::string key(const kir::Kernel& k) {
    out_ += fmt::format("p{} x{} c{} i{}|", k.parallelVar, k.parallelExtent, k.costPerIteration,
                        k.vectorInterleave);
    for (const auto& b : k.buffers)
      out_ += fmt::format("b{},{},{},{};", static_cast<int>(b.dtype), b.numel,
                          static_cast<int>(b.access), b.inPlaceOf);
    for (const auto& v : k.vars) out_ += fmt::format("v{};", static_cast<int>(v.type));
    stmts(k.body);
    return std::move(out_);
  }

 private:
  void stmts(const std::vector<kir::StmtP>& body) {
    out_ += '{';
    for (const auto& s : body) {
      out_ += fmt::format("S{},{},{},{},{},{}(", static_cast<int>(s->kind), s->var, s->extent,
                          static_cast<int>(s->loop), s->unroll, s->buffer);
      for (const auto& a : s->args) expr(a);
      out_ += ')';
      stmts(s->body);
      stmts(s->elseBody);
    }
    out_ += '}';
  }
  void expr(const kir::ExprP& e) {
    auto [it, fresh] = ids_.emplace(e.get(), ids_.size());
    if (!fresh) {
      out_ += fmt::format("#{}", it->second);
      return;
    }
    out_ += fmt::format("E{},{},{},{},{},{},{},{}(", static_cast<int>(e->kind),
                        static_cast<int>(e->type), e->f, e->i, e->var, e->buffer,
                        static_cast<int>(e->unary), static_cast<int>(e->binary));
    for (const auto& a : e->args) expr(a);
    out_ += ')';
  }

  std::string out_;
  std::unordered_map<const kir::Expr*, size_t> ids_;
};

}  // namespace

std::string structuralKernelKey(const kir::Kernel& k) { return KeyWriter().key(k); }

std::string KernelNameUniquer::operator()(const std::string& base) {
  if (used_.insert(base).second) return base;
  for (int i = 2;; ++i) {
    std::string name = fmt::format("{}_{}", base, i);
    if (used_.insert(name).second) return name;
  }
}

}  // namespace tgc::runtime
