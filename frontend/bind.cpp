#include "frontend/bind.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "frontend/tasks.h"

namespace tgc::fe {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "none" : s;
}

std::string locStr(const Diags& d, Loc l) {
  std::string file = l.file >= 0 && static_cast<size_t>(l.file) < d.numFiles()
                         ? d.file(l.file).path
                         : std::string("<unknown>");
  return fmt::format("{}:{}:{}", file, l.line, l.col);
}

// "f32[16, 128]", as a model file spells it.
std::string typeStr(const TensorType& t) {
  std::string s(dtypeName(t.dtype));
  s += "[";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

const char* kindWord(BindKind k) {
  switch (k) {
    case BindKind::Input: return "input";
    case BindKind::Config: return "config";
    case BindKind::Dim: return "dim";
  }
  return "?";
}

std::string sourceStr(const BindEntry& e) {
  return e.axis < 0 ? e.from : fmt::format("{}.shape[{}]", e.from, e.axis);
}

const char* configKind(const ConfigValue& v) {
  switch (v.index()) {
    case 0: return "an int";
    case 1: return "a float";
    case 2: return "a bool";
    case 3: return "a str";
    default: return "a dtype";
  }
}

// Checks one binding of a known task against the compiled graph.
class BindingChecker {
 public:
  BindingChecker(const BindDecl& b, const TaskSchema& t, const BindTarget& tg, Diags& d)
      : b_(b), t_(t), tg_(tg), d_(d) {
    const GraphDecl& gd = *tg.decl;
    for (const auto& p : gd.params) {
      if (gd.training && (p.name == "seed" || p.name == "step")) continue;
      data_.push_back(&p);
      data_names_.push_back(p.name);
    }
    for (const Node* n : tg.graph->inputs()) types_.emplace(n->result()->name(), n->result()->type());
    if (tg.config)
      for (const auto& [k, v] : *tg.config) {
        config_.emplace(k, &v);
        config_names_.push_back(k);
      }
    dim_names_.assign(tg.dims.begin(), tg.dims.end());
  }

  void run() {
    std::map<std::pair<BindKind, std::string>, const BindEntry*> seen;
    std::vector<const BindEntry*> entries;
    for (const auto& e : b_.entries) {
      auto [it, fresh] = seen.emplace(std::make_pair(e.kind, e.name), &e);
      if (!fresh) {
        d_.error(e.loc, fmt::format("{} '{}' is bound twice in this binding: keep one of the two lines",
                                    kindWord(e.kind), e.name));
        d_.note(it->second->loc, "the first one is here");
        continue;
      }
      entries.push_back(&e);
      if (e.kind == BindKind::Input && !field_types_.count(e.from))
        if (const ParamDecl* p = dataInput(e.name))
          if (auto ty = typeOf(*p)) field_types_.emplace(e.from, std::make_pair(&e, *ty));
    }
    for (const BindEntry* e : entries) {
      switch (e->kind) {
        case BindKind::Input: input(*e); break;
        case BindKind::Config: config(*e); break;
        case BindKind::Dim: dim(*e); break;
      }
    }
    dimUses();
    for (const ParamDecl* p : data_) {
      if (bound_.count(p->name)) continue;
      std::string field;
      if (t_.file_fields || t_.field(p->name)) field = p->name;
      else field = closestName(p->name, t_.fieldNames());
      std::string hint;
      if (t_.file_fields)
        hint = fmt::format("add 'input {} = {}' (the file's tensor of that name)", p->name, p->name);
      else if (!field.empty())
        hint = fmt::format("add 'input {} = {}' ({}'s fields: {})", p->name, field, t_.name,
                           join(t_.fieldNames()));
      else
        hint = fmt::format("add 'input {} = FIELD' with one of {}'s fields ({}), or compute '{}' in the "
                           "graph from the other inputs",
                           p->name, t_.name, join(t_.fieldNames()), p->name);
      d_.error(b_.loc, fmt::format("input '{}' of graph '{}' is not bound: {}", p->name,
                                   tg_.decl->name, hint));
      d_.note(p->loc, fmt::format("input '{}' is declared here", p->name));
    }
  }

 private:
  // One axis of a bound input that a declared dim sizes.
  struct DimUse {
    const BindEntry* entry;
    const ParamDecl* input;
    size_t axis;
    std::string want;  // the task dim that sets it: batch, length, x.shape[2]
    bool strict;       // the dim must be bound to exactly `want` (else any size will do)
  };

  const ParamDecl* dataInput(const std::string& n) const {
    for (const ParamDecl* p : data_)
      if (p->name == n) return p;
    return nullptr;
  }
  std::optional<TensorType> typeOf(const ParamDecl& p) const {
    auto it = types_.find(p.name);
    if (it == types_.end()) return std::nullopt;
    return it->second;
  }
  // The declared dim that axis i of the input's type names (`i64[B, T]`), or "".
  std::string namedDim(const ParamDecl& p, size_t axis, size_t rank) const {
    if (!p.type || p.type->kind != ExprKind::Index || p.type->kids.size() != rank + 1) return "";
    const Expr& a = *p.type->kids[axis + 1];
    if (a.kind == ExprKind::Name && tg_.dims.count(a.text)) return a.text;
    return "";
  }
  // The declared dim that this binding binds to the task dim `want` (batch, x.shape[1]), or "".
  std::string boundTo(const std::string& want) const {
    for (const auto& x : b_.entries)
      if (x.kind == BindKind::Dim && sourceStr(x) == want && tg_.dims.count(x.name)) return x.name;
    return "";
  }
  std::string taskDimStr(const std::string& want) const {
    if (t_.file_fields) return want == "batch" ? "the batch (axis 0)" : want;
    return fmt::format("{}'s dim {}", t_.name, want);
  }

  void input(const BindEntry& e) {
    const GraphDecl& gd = *tg_.decl;
    if (gd.training && (e.name == "seed" || e.name == "step")) {
      d_.error(e.name_loc,
               fmt::format("'{}' is fed by the trainer ({} of training graph '{}'), not by the data: "
                           "remove this line", e.name,
                           e.name == "seed" ? "the dropout seed" : "the step counter", gd.name));
      return;
    }
    const ParamDecl* p = dataInput(e.name);
    if (!p) {
      d_.error(e.name_loc, fmt::format("graph '{}' has no data input '{}'{}; its data inputs are: {}",
                                       gd.name, e.name, didYouMean(e.name, data_names_),
                                       join(data_names_)));
      return;
    }
    bound_.insert(e.name);
    const TaskField* field = nullptr;
    if (!t_.file_fields) {
      field = t_.field(e.from);
      if (!field) {
        d_.error(e.from_loc, fmt::format("task '{}' has no field '{}'{}; its fields are: {}", t_.name,
                                         e.from, didYouMean(e.from, t_.fieldNames()),
                                         join(t_.fieldNames())));
        return;
      }
    }
    auto ty = typeOf(*p);
    if (!ty) return;
    size_t rank = ty->shape.size();
    if (field && (ty->dtype != field->dtype || rank != field->dims.size())) {
      // The type to write: the dims this binding binds to the field's task dims.
      std::string want = fmt::format("{}[", dtypeName(field->dtype));
      bool named = true;
      for (size_t i = 0; i < field->dims.size(); ++i) {
        std::string n = boundTo(field->dims[i]);
        if (n.empty()) named = false;
        want += (i ? ", " : "") + n;
      }
      want += "]";
      std::string how = named ? fmt::format("declare it as {}: {}", e.name, want)
                              : fmt::format("declare it as {}[...] with {} axes", dtypeName(field->dtype),
                                            field->dims.size());
      d_.error(e.name_loc, fmt::format("input {} is {} but {}'s field {} is {}: {}", e.name, typeStr(*ty),
                                       t_.name, field->name, fieldTypeStr(*field), how));
      d_.note(p->loc, fmt::format("input '{}' is declared here", e.name));
      return;
    }
    if (!field && rank == 0) {
      d_.error(e.name_loc,
               fmt::format("input {} is a scalar ({}), but the tensors task takes batches along axis 0 "
                           "of every field: give the input a leading named dim bound to batch "
                           "({}: {}[B] with 'dim B = batch')",
                           e.name, typeStr(*ty), e.name, dtypeName(ty->dtype)));
      d_.note(p->loc, fmt::format("input '{}' is declared here", e.name));
      return;
    }
    for (size_t i = 0; i < rank; ++i) {
      std::string want = field ? field->dims[i]
                         : i == 0 ? std::string("batch")
                                  : fmt::format("{}.shape[{}]", e.from, i);
      bool strict = field || i == 0;
      std::string dim = namedDim(*p, i, rank);
      if (dim.empty()) {
        if (!strict) continue;  // tensors: a fixed size, checked against the file at run time
        std::string named = boundTo(want);
        for (size_t j = 0; j < rank; ++j)
          if (!named.empty() && namedDim(*p, j, rank) == named) named.clear();  // used elsewhere
        std::string how = named.empty()
                              ? fmt::format("declare the axis with a named dim D ('dim D' at the top "
                                            "level, then {}[..., D, ...]) and bind it here with "
                                            "'dim D = {}'", dtypeName(ty->dtype), want)
                              : fmt::format("declare the axis with dim {}, which this binding binds "
                                            "to {}", named, want);
        d_.error(e.name_loc,
                 fmt::format("axis {} of input '{}' has the fixed size {}, but the batches set it "
                             "({}): {}",
                             i, e.name, ty->shape[i], taskDimStr(want), how));
        d_.note(p->loc, fmt::format("input '{}' is declared here as {}", e.name, typeStr(*ty)));
        continue;
      }
      auto [it, fresh] = uses_.try_emplace(dim);
      if (fresh) use_order_.push_back(dim);
      it->second.push_back(DimUse{&e, p, i, want, strict});
    }
  }

  // FIELD.shape[i] on the right of a config or dim entry: the axis must exist when FIELD is
  // a bound input (other fields are checked against the file at run time).
  bool axisExists(const BindEntry& e) {
    auto it = field_types_.find(e.from);
    if (it == field_types_.end()) return true;
    const TensorType& ty = it->second.second;
    if (static_cast<size_t>(e.axis) < ty.shape.size()) return true;
    d_.error(e.from_loc, fmt::format("field '{}' has {} axes (input '{}' is {}): {}.shape[{}] does not "
                                     "exist; axes count from 0",
                                     e.from, ty.shape.size(), it->second.first->name, typeStr(ty),
                                     e.from, e.axis));
    return false;
  }

  void config(const BindEntry& e) {
    auto it = config_.find(e.name);
    if (it == config_.end()) {
      d_.error(e.name_loc, fmt::format("there is no config entry '{}'{} to bind; the config entries "
                                       "are: {}",
                                       e.name, didYouMean(e.name, config_names_), join(config_names_)));
    } else if (it->second->index() != 0) {
      d_.error(e.name_loc, fmt::format("config entry '{}' is {}, but task values are ints: give '{}' an "
                                       "int default in the config block",
                                       e.name, configKind(*it->second), e.name));
    }
    if (t_.file_fields) {
      if (e.axis < 0)
        d_.error(e.from_loc, fmt::format("the tensors task has no named values: write FIELD.shape[i], "
                                         "the size of axis i of a field (config {} = x.shape[1])",
                                         e.name));
      else
        axisExists(e);
      return;
    }
    if (e.axis >= 0)
      d_.error(e.from_loc, fmt::format("{}.shape[{}] is for the tensors task; task '{}''s values are: {}",
                                       e.from, e.axis, t_.name, join(t_.values)));
    else if (!t_.hasValue(e.from))
      d_.error(e.from_loc, fmt::format("task '{}' has no value '{}'{}; its values are: {}", t_.name, e.from,
                                       didYouMean(e.from, t_.values), join(t_.values)));
  }

  void dim(const BindEntry& e) {
    bool ok = true;
    if (!tg_.dims.count(e.name)) {
      d_.error(e.name_loc, fmt::format("there is no dim '{}'{} to bind: declare it at the top level "
                                       "('dim {}') or bind one of: {}",
                                       e.name, didYouMean(e.name, dim_names_), e.name, join(dim_names_)));
      ok = false;
    }
    if (t_.file_fields) {
      if (e.axis < 0 && e.from != "batch") {
        d_.error(e.from_loc, fmt::format("the tensors task's dims are batch and FIELD.shape[i]: write "
                                         "'dim {} = batch' or 'dim {} = FIELD.shape[i]' (x.shape[1])",
                                         e.name, e.name));
        ok = false;
      } else if (e.axis == 0) {
        d_.error(e.from_loc, fmt::format("{}.shape[0] is the batch size (the tensors task batches along "
                                         "axis 0): write 'dim {} = batch'",
                                         e.from, e.name));
        ok = false;
      } else if (e.axis > 0 && !axisExists(e)) {
        ok = false;
      }
    } else if (e.axis >= 0) {
      d_.error(e.from_loc, fmt::format("{}.shape[{}] is for the tensors task; task '{}''s dims are: {}",
                                       e.from, e.axis, t_.name, join(t_.dims)));
      ok = false;
    } else if (!t_.hasDim(e.from)) {
      d_.error(e.from_loc, fmt::format("task '{}' has no dim '{}'{}; its dims are: {}", t_.name, e.from,
                                       didYouMean(e.from, t_.dims), join(t_.dims)));
      ok = false;
    }
    if (ok) dims_.emplace(e.name, &e);
    else bad_dims_.insert(e.name);
  }

  // Every axis that a dim sizes must get its size from what `dim D = ...` binds.
  void dimUses() {
    for (const std::string& dim : use_order_) {
      const auto& uses = uses_[dim];
      const DimUse* first = nullptr;
      const DimUse* clash = nullptr;
      for (const auto& u : uses) {
        if (!u.strict) continue;
        if (!first) first = &u;
        else if (u.want != first->want && !clash) clash = &u;
      }
      if (clash) {
        d_.error(clash->entry->name_loc,
                 fmt::format("dim {} is used two ways: axis {} of input '{}' is {}, but axis {} of input "
                             "'{}' is {}: declare these axes with different dims",
                             dim, clash->axis, clash->entry->name, taskDimStr(clash->want), first->axis,
                             first->entry->name, taskDimStr(first->want)));
        d_.note(clash->input->loc, fmt::format("input '{}' is declared here", clash->entry->name));
        continue;
      }
      if (bad_dims_.count(dim)) continue;
      const DimUse& u = first ? *first : uses.front();
      auto it = dims_.find(dim);
      if (it == dims_.end()) {
        d_.error(u.entry->name_loc,
                 fmt::format("dim {} is not bound: axis {} of input '{}' is {}, which the batches set "
                             "({}): add 'dim {} = {}' to this binding",
                             dim, u.axis, u.entry->name, dim, taskDimStr(u.want), dim, u.want));
        continue;
      }
      if (!first) continue;  // tensors, axes past 0: any size; the run time compares the file's
      std::string bound = sourceStr(*it->second);
      if (bound != first->want) {
        d_.error(it->second->from_loc,
                 fmt::format("dim {} is used two ways: this binds it to {}, but axis {} of input '{}' is "
                             "{}, which is {}: write 'dim {} = {}'",
                             dim, bound, first->axis, first->entry->name, dim, taskDimStr(first->want),
                             dim, first->want));
        d_.note(first->entry->loc, fmt::format("input '{}' is bound here", first->entry->name));
      }
    }
  }

  const BindDecl& b_;
  const TaskSchema& t_;
  const BindTarget& tg_;
  Diags& d_;
  std::vector<const ParamDecl*> data_;
  std::vector<std::string> data_names_, config_names_, dim_names_;
  std::map<std::string, TensorType> types_;
  std::map<std::string, const ConfigValue*> config_;
  std::map<std::string, std::pair<const BindEntry*, TensorType>> field_types_;
  std::set<std::string> bound_;
  std::map<std::string, std::vector<DimUse>> uses_;
  std::vector<std::string> use_order_;
  std::map<std::string, const BindEntry*> dims_;
  std::set<std::string> bad_dims_;
};

}  // namespace

std::vector<DataBinding> resolveBindings(const std::vector<const FileAst*>& files,
                                         const std::vector<std::string>& graphs, Diags& d) {
  std::vector<DataBinding> out;
  std::map<std::string, const BindDecl*> byTask;
  for (const FileAst* f : files) {
    for (const BindDecl& b : f->binds) {
      const TaskSchema* t = findTask(b.task);
      if (!t)
        d.error(b.task_loc, fmt::format("unknown task '{}'{}; the tasks are: {}", b.task,
                                        didYouMean(b.task, taskNames()), join(taskNames())));
      if (std::find(graphs.begin(), graphs.end(), b.graph) == graphs.end())
        d.error(b.graph_loc, fmt::format("there is no graph '{}'{} for task '{}' to feed; the graphs "
                                         "are: {}",
                                         b.graph, didYouMean(b.graph, graphs), b.task, join(graphs)));
      if (t) {
        auto [it, fresh] = byTask.emplace(b.task, &b);
        if (!fresh) {
          d.error(b.loc, fmt::format("task '{}' is bound twice: 'tgc train --task {}' could not choose "
                                     "between the bindings; keep one",
                                     b.task, b.task));
          d.note(it->second->loc, "the other binding is here");
        }
      }
      DataBinding db{b.task, b.graph, locStr(d, b.loc), {}, {}, {}};
      for (const BindEntry& e : b.entries) {
        BindingEntry be{e.name, e.from, e.axis, locStr(d, e.loc)};
        switch (e.kind) {
          case BindKind::Input: db.inputs.push_back(std::move(be)); break;
          case BindKind::Config: db.configs.push_back(std::move(be)); break;
          case BindKind::Dim: db.dims.push_back(std::move(be)); break;
        }
      }
      out.push_back(std::move(db));
    }
  }
  return out;
}

void checkBindings(const std::vector<const FileAst*>& files, const BindTarget& target, Diags& d) {
  for (const FileAst* f : files)
    for (const BindDecl& b : f->binds) {
      if (b.graph != target.decl->name) continue;
      if (const TaskSchema* t = findTask(b.task)) BindingChecker(b, *t, target, d).run();
    }
}

}  // namespace tgc::fe
