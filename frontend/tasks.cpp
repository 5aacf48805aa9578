#include "frontend/tasks.h"

#include <algorithm>

namespace tgc {

const std::vector<TaskSchema>& taskSchemas() {
  static const std::vector<TaskSchema> tasks = [] {
    std::vector<TaskSchema> t;
    t.push_back(TaskSchema{
        "translation", false,
        {{"source", DType::i64, {"batch", "source_length"}},
         {"target_in", DType::i64, {"batch", "target_length"}},
         {"target_out", DType::i64, {"batch", "target_length"}}},
        {"source_vocab", "target_vocab", "pad"},
        {"batch", "source_length", "target_length"},
        "sentence pairs: source ids, target ids shifted right (target_in) and the targets"});
    t.push_back(TaskSchema{
        "lm", false,
        {{"tokens", DType::i64, {"batch", "length"}},
         {"targets", DType::i64, {"batch", "length"}}},
        {"vocab", "pad"},
        {"batch", "length"},
        "language modelling: token ids and the same ids shifted by one"});
    t.push_back(TaskSchema{
        "classification", false,
        {{"tokens", DType::i64, {"batch", "length"}}, {"labels", DType::i64, {"batch"}}},
        {"vocab", "classes", "pad"},
        {"batch", "length"},
        "labelled texts: token ids and one class id per text"});
    t.push_back(TaskSchema{
        "tensors", true, {}, {}, {"batch"},
        "the tensors of a safetensors file, named after the graph's inputs, batched along axis 0"});
    return t;
  }();
  return tasks;
}

const TaskSchema* findTask(const std::string& name) {
  for (const auto& t : taskSchemas())
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<std::string> taskNames() {
  std::vector<std::string> r;
  for (const auto& t : taskSchemas()) r.push_back(t.name);
  return r;
}

const TaskField* TaskSchema::field(const std::string& n) const {
  for (const auto& f : fields)
    if (f.name == n) return &f;
  return nullptr;
}

bool TaskSchema::hasValue(const std::string& n) const {
  return std::find(values.begin(), values.end(), n) != values.end();
}

bool TaskSchema::hasDim(const std::string& n) const {
  return std::find(dims.begin(), dims.end(), n) != dims.end();
}

std::vector<std::string> TaskSchema::fieldNames() const {
  std::vector<std::string> r;
  for (const auto& f : fields) r.push_back(f.name);
  return r;
}

std::string fieldTypeStr(const TaskField& f) {
  std::string s(dtypeName(f.dtype));
  s += "[";
  for (size_t i = 0; i < f.dims.size(); ++i) s += (i ? ", " : "") + f.dims[i];
  return s + "]";
}

}  // namespace tgc
