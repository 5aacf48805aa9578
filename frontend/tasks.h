// The tasks a model file can bind its graphs to (`bind lm to train { ... }`): the language's
// table of what each task provides. A task has fields (the tensors of a batch), values (ints
// the task knows, such as the vocabulary size, that feed config entries) and dims (the sizes
// that the batch shapes set, such as the batch size and the sequence length, that feed named
// dims). See docs/language.md, "Data bindings: `bind`".
#pragma once

#include <string>
#include <vector>

#include "ir/dtype.h"

namespace tgc {

// One tensor of a batch: its dtype and, per axis, the task dim that sets its size.
struct TaskField {
  std::string name;
  DType dtype = DType::i64;
  std::vector<std::string> dims;  // one task dim per axis
};

struct TaskSchema {
  std::string name;
  // The tensors task: its fields are the tensors of a file, any name, dtype and shape (known
  // only at run time), batched along axis 0. `fields` and `values` are empty; values and dims
  // other than the batch are written FIELD.shape[i].
  bool file_fields = false;
  std::vector<TaskField> fields;
  std::vector<std::string> values;  // ints: vocabulary sizes, class counts, the pad id
  std::vector<std::string> dims;
  std::string description;          // a few words, for messages and documentation

  const TaskField* field(const std::string& n) const;
  bool hasValue(const std::string& n) const;
  bool hasDim(const std::string& n) const;
  std::vector<std::string> fieldNames() const;
};

// translation, lm, classification, tensors, in that order.
const std::vector<TaskSchema>& taskSchemas();
// nullptr when there is no task of that name.
const TaskSchema* findTask(const std::string& name);
std::vector<std::string> taskNames();
// "i64[batch, length]" for a fixed field.
std::string fieldTypeStr(const TaskField& f);

}  // namespace tgc
