// Data bindings (`bind TASK to GRAPH { ... }`): the parsed form, the resolved API
// (CompiledModel::bindings), every check with its file:line:col, the shipped models'
// bindings, and ModelOptions::inference.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "frontend/parser.h"
#include "frontend/tasks.h"
#include "tests/frontend/fe_test_util.h"

namespace tgc {
namespace {

using testing::compileText;
using testing::contains;
using testing::countOf;
using testing::countOps;
using testing::errorsOf;

// Lines 1-6; a binding appended after it starts on line 7, its entries on lines 8, 9, ...
const std::string kLmGraphs =
    "config { vocab = 100, pad = 0, rate = 0.5 }\n"
    "dim B = 4, T = 8, F = 3\n"
    "graph train(tokens: i64[B, T], targets: i64[B, T]) training {\n"
    "  output loss = zeros(f32[])\n"
    "}\n"
    "graph other(x: f32[B]) { output y = x }\n";

const std::vector<std::string> kLmEntries = {
    "input tokens = tokens",  // line 8
    "input targets = targets",
    "config vocab = vocab",   // line 10
    "config pad = pad",
    "dim B = batch",          // line 12
    "dim T = length",
};

std::string bindBlock(const std::string& head, const std::vector<std::string>& entries) {
  std::string s = head + " {\n";
  for (const auto& e : entries) s += "  " + e + "\n";
  return s + "}\n";
}

std::string lmProgram(const std::vector<std::string>& entries = kLmEntries,
                      const std::string& graphs = kLmGraphs,
                      const std::string& head = "bind lm to train") {
  return graphs + bindBlock(head, entries);
}

// kLmEntries with entry i (0-based, on line 8 + i) replaced; "" removes it.
std::vector<std::string> lmWith(size_t i, const std::string& e) {
  auto v = kLmEntries;
  if (e.empty()) v.erase(v.begin() + static_cast<long>(i));
  else v[i] = e;
  return v;
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

// A graph shaped like the lm one with other input declarations (line 3).
std::string lmGraphsWith(const std::string& inputs) {
  return replaced(kLmGraphs, "tokens: i64[B, T], targets: i64[B, T]", inputs);
}

// Lines 1-5; a tensors binding starts on line 6, its entries on lines 7, 8, ...
const std::string kTensorGraphs =
    "config { vocab = 100, width = 3 }\n"
    "dim B = 4, F = 3\n"
    "graph fit(x: f32[B, F], y: f32[B]) training {\n"
    "  output loss = reduce_mean(y * reduce_sum(x, axes=[1]), axes=[0])\n"
    "}\n";

const std::vector<std::string> kTensorEntries = {
    "input x = x",  // line 7
    "input y = y",
    "dim B = batch",  // line 9
    "dim F = x.shape[1]",
    "config width = x.shape[1]",  // line 11
};

std::string tensorProgram(const std::vector<std::string>& entries = kTensorEntries,
                          const std::string& graphs = kTensorGraphs) {
  return graphs + bindBlock("bind tensors to fit", entries);
}

std::vector<std::string> tensorsWith(size_t i, const std::string& e) {
  auto v = kTensorEntries;
  if (e.empty()) v.erase(v.begin() + static_cast<long>(i));
  else v[i] = e;
  return v;
}

// ---- the parsed form ----

TEST(BindingParse, EntriesAndLocations) {
  fe::Diags d;
  std::string src = lmProgram(lmWith(5, "dim T = tokens.shape[1]"));
  int id = d.addFile("t.tg", src);
  fe::FileAst f = fe::parseFile(d.file(id).text, id, d);
  ASSERT_EQ(d.errorCount(), 0u) << d.render();
  ASSERT_EQ(f.binds.size(), 1u);
  const fe::BindDecl& b = f.binds[0];
  EXPECT_EQ(b.task, "lm");
  EXPECT_EQ(b.graph, "train");
  EXPECT_EQ(b.loc.line, 7);
  EXPECT_EQ(b.loc.col, 1);
  EXPECT_EQ(b.task_loc.col, 6);
  EXPECT_EQ(b.graph_loc.col, 12);
  ASSERT_EQ(b.entries.size(), 6u);
  const fe::BindEntry& in = b.entries[0];
  EXPECT_EQ(in.kind, fe::BindKind::Input);
  EXPECT_EQ(in.name, "tokens");
  EXPECT_EQ(in.from, "tokens");
  EXPECT_EQ(in.axis, -1);
  EXPECT_EQ(in.loc.line, 8);
  EXPECT_EQ(in.loc.col, 3);
  EXPECT_EQ(in.name_loc.col, 9);
  EXPECT_EQ(in.from_loc.col, 18);
  EXPECT_EQ(b.entries[2].kind, fe::BindKind::Config);
  EXPECT_EQ(b.entries[4].kind, fe::BindKind::Dim);
  const fe::BindEntry& shape = b.entries[5];
  EXPECT_EQ(shape.name, "T");
  EXPECT_EQ(shape.from, "tokens");
  EXPECT_EQ(shape.axis, 1);
  EXPECT_EQ(shape.loc.line, 13);
}

TEST(BindingParse, CommasSemicolonsAndComments) {
  fe::Diags d;
  std::string src =
      "bind lm to train { input tokens = tokens, input targets = targets; dim B = batch }\n"
      "// a comment\n"
      "bind tensors to fit {\n"
      "  input x = x   // the features\n"
      "\n"
      "  dim F = x.shape[2]\n"
      "}\n"
      "let bind = 3\n";  // `bind` is a keyword only where an item starts
  int id = d.addFile("t.tg", src);
  fe::FileAst f = fe::parseFile(d.file(id).text, id, d);
  ASSERT_EQ(d.errorCount(), 0u) << d.render();
  ASSERT_EQ(f.binds.size(), 2u);
  EXPECT_EQ(f.binds[0].entries.size(), 3u);
  ASSERT_EQ(f.binds[1].entries.size(), 2u);
  EXPECT_EQ(f.binds[1].entries[1].axis, 2);
  EXPECT_EQ(f.lets.size(), 1u);
}

struct Case {
  const char* name;
  std::string src;
  std::vector<std::string> expect;  // substrings of the diagnostics
};

void expectAll(const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string e = errorsOf(c.src);
    for (const auto& x : c.expect) EXPECT_TRUE(contains(e, x)) << "want: " << x << "\ngot:\n" << e;
  }
}

TEST(BindingParse, SyntaxErrors) {
  expectAll({
      {"no 'to'", kLmGraphs + "bind lm train {\n}\n",
       {"test.tg:7:9: error: expected 'to' and the graph that task 'lm' feeds (bind lm to train { ... }), "
        "got identifier 'train'"}},
      {"unknown entry kind", lmProgram(lmWith(1, "output targets = targets")),
       {"test.tg:9:3: error: expected a binding entry: 'input NAME = FIELD', 'config NAME = VALUE' or "
        "'dim NAME = TASKDIM'"}},
      {"an expression", lmProgram(lmWith(2, "config vocab = vocab + 1")),
       {"test.tg:10:24: error: expected end of statement, got '+'"}},
      {"shape of an input", lmProgram(lmWith(0, "input tokens = tokens.shape[1]")),
       {"test.tg:8:24: error: an input is fed a whole field: write 'input tokens = tokens'"}},
      {"shape without an axis", tensorProgram(tensorsWith(3, "dim F = x.shape")),
       {"test.tg:10:18: error: expected '[' and an axis number (x.shape[1])"}},
      {"not shape", tensorProgram(tensorsWith(3, "dim F = x.size[1]")),
       {"test.tg:10:13: error: expected 'shape[i]' after 'x.'"}},
      {"negative axis", tensorProgram(tensorsWith(3, "dim F = x.shape[-1]")),
       {"test.tg:10:19: error: an axis here counts from 0: write x.shape[1], not a negative axis"}},
      {"inside a graph", "graph g(x: f32[2]) {\n  bind lm to g { }\n  output y = x\n}\n",
       {"test.tg:2:3: error: 'bind' is only allowed at the top level of a file"}},
  });
}

TEST(BindingParse, RecoversAtTheNextItem) {
  std::string e = errorsOf(kLmGraphs + "bind lm train {\n  input tokens = tokens\n}\n"
                           "bind tensors to\n"
                           "bind lm to train {\n  input tokens = tokens.shape[0]\n}\n");
  EXPECT_TRUE(contains(e, "test.tg:7:9: error: expected 'to'")) << e;
  EXPECT_TRUE(contains(e, "test.tg:10:16: error: expected the name of the graph the task feeds")) << e;
  EXPECT_TRUE(contains(e, "test.tg:12:24: error: an input is fed a whole field")) << e;
}

// ---- the resolved API ----

TEST(BindingApi, ResolvedEntries) {
  CompiledModel m = compileText(lmProgram());
  ASSERT_EQ(m.bindings.size(), 1u);
  const DataBinding& b = m.bindings[0];
  EXPECT_EQ(b.task, "lm");
  EXPECT_EQ(b.graph, "train");
  EXPECT_EQ(b.loc, "test.tg:7:1");
  ASSERT_EQ(b.inputs.size(), 2u);
  EXPECT_EQ(b.inputs[0].name, "tokens");
  EXPECT_EQ(b.inputs[0].from, "tokens");
  EXPECT_EQ(b.inputs[0].axis, -1);
  EXPECT_EQ(b.inputs[0].loc, "test.tg:8:3");
  EXPECT_EQ(b.inputs[1].loc, "test.tg:9:3");
  ASSERT_EQ(b.configs.size(), 2u);
  EXPECT_EQ(b.configs[0].name, "vocab");
  EXPECT_EQ(b.configs[0].from, "vocab");
  EXPECT_EQ(b.configs[1].loc, "test.tg:11:3");
  ASSERT_EQ(b.dims.size(), 2u);
  EXPECT_EQ(b.dims[0].name, "B");
  EXPECT_EQ(b.dims[0].from, "batch");
  EXPECT_EQ(b.dims[1].name, "T");
  EXPECT_EQ(b.dims[1].from, "length");
  EXPECT_EQ(b.dims[1].loc, "test.tg:13:3");
}

TEST(BindingApi, TensorsShapeEntries) {
  CompiledModel m = compileText(tensorProgram());
  ASSERT_EQ(m.bindings.size(), 1u);
  const DataBinding& b = m.bindings[0];
  EXPECT_EQ(b.task, "tensors");
  ASSERT_EQ(b.dims.size(), 2u);
  EXPECT_EQ(b.dims[1].name, "F");
  EXPECT_EQ(b.dims[1].from, "x");
  EXPECT_EQ(b.dims[1].axis, 1);
  ASSERT_EQ(b.configs.size(), 1u);
  EXPECT_EQ(b.configs[0].from, "x");
  EXPECT_EQ(b.configs[0].axis, 1);
  EXPECT_EQ(b.configs[0].loc, "test.tg:11:3");
  // Axes past 0 may be fixed sizes (the run time compares them with the file) and a dim may
  // size several fields.
  compileText(tensorProgram(kTensorEntries, "config { vocab = 100, width = 3 }\n"
                                            "dim B = 4, F = 3\n"
                                            "graph fit(x: f32[B, F], y: f32[B, 2, F]) training {\n"
                                            "  output loss = reduce_mean(x, axes=[0, 1])\n"
                                            "}\n"));
}

TEST(BindingApi, EveryBindingInSourceOrderMainFileFirst) {
  ModelOptions o = testing::memoryFiles({{"lib.tg", "bind tensors to train {\n  input tokens = tokens\n"
                                                    "  input targets = targets\n  dim B = batch\n"
                                                    "  dim T = tokens.shape[1]\n}\n"}});
  CompiledModel m = compileText("import \"lib.tg\"\n" + kLmGraphs +
                                    "bind classification to other {\n  input x = tokens\n}\n" +
                                    bindBlock("bind lm to train", kLmEntries),
                                o);
  ASSERT_EQ(m.bindings.size(), 3u);
  EXPECT_EQ(m.bindings[0].task, "classification");
  EXPECT_EQ(m.bindings[0].loc, "test.tg:8:1");
  EXPECT_EQ(m.bindings[1].task, "lm");
  EXPECT_EQ(m.bindings[2].task, "tensors");
  EXPECT_EQ(m.bindings[2].loc, "lib.tg:1:1");
}

TEST(BindingApi, OnlyTheCompiledGraphsBindingsAreChecked) {
  // The lm binding is wrong for `train`; compiling `other` lists it without checking it.
  std::string src = lmProgram(lmWith(0, "input tokns = tokens"));
  ModelOptions o;
  o.graph = "other";
  CompiledModel m = compileText(src, o);
  ASSERT_EQ(m.bindings.size(), 1u);
  EXPECT_EQ(m.bindings[0].inputs[0].name, "tokns");
  EXPECT_TRUE(contains(errorsOf(src), "test.tg:8:9: error: graph 'train' has no data input 'tokns'"));
}

TEST(BindingApi, NoBindings) { EXPECT_TRUE(compileText(kLmGraphs).bindings.empty()); }

TEST(BindingApi, TaskTable) {
  EXPECT_EQ(taskNames(), (std::vector<std::string>{"translation", "lm", "classification", "tensors"}));
  const TaskSchema* lm = findTask("lm");
  ASSERT_TRUE(lm);
  ASSERT_TRUE(lm->field("targets"));
  EXPECT_EQ(fieldTypeStr(*lm->field("targets")), "i64[batch, length]");
  EXPECT_TRUE(lm->hasValue("vocab"));
  EXPECT_TRUE(lm->hasDim("length"));
  const TaskSchema* cls = findTask("classification");
  ASSERT_TRUE(cls && cls->field("labels"));
  EXPECT_EQ(fieldTypeStr(*cls->field("labels")), "i64[batch]");
  EXPECT_TRUE(cls->hasValue("classes"));
  const TaskSchema* tr = findTask("translation");
  ASSERT_TRUE(tr && tr->field("target_out"));
  EXPECT_EQ(fieldTypeStr(*tr->field("source")), "i64[batch, source_length]");
  EXPECT_TRUE(findTask("tensors")->file_fields);
  EXPECT_EQ(findTask("nope"), nullptr);
}

// ---- the checks ----

TEST(BindingCheck, Header) {
  expectAll({
      {"unknown task", lmProgram(kLmEntries, kLmGraphs, "bind lmm to train"),
       {"test.tg:7:6: error: unknown task 'lmm' (did you mean 'lm'?); the tasks are: translation, lm, "
        "classification, tensors",
        "bind lmm to train {\n     ^"}},
      {"unknown graph", lmProgram(kLmEntries, kLmGraphs, "bind lm to trian"),
       {"test.tg:7:12: error: there is no graph 'trian' (did you mean 'train'?) for task 'lm' to feed; "
        "the graphs are: train, other"}},
      {"a task bound twice", lmProgram() + "bind lm to other {\n  input x = tokens\n}\n",
       {"test.tg:15:1: error: task 'lm' is bound twice: 'tgc train --task lm' could not choose",
        "test.tg:7:1: note: the other binding is here"}},
  });
  // The header is checked whichever graph is compiled.
  ModelOptions o;
  o.graph = "other";
  EXPECT_TRUE(contains(errorsOf(lmProgram(kLmEntries, kLmGraphs, "bind lm to trian"), o),
                       "test.tg:7:12: error: there is no graph 'trian'"));
}

TEST(BindingCheck, Inputs) {
  expectAll({
      {"not a data input", lmProgram(lmWith(0, "input tokns = tokens")),
       {"test.tg:8:9: error: graph 'train' has no data input 'tokns' (did you mean 'tokens'?); its data "
        "inputs are: tokens, targets"}},
      {"seed", lmProgram(lmWith(0, "input seed = tokens")),
       {"test.tg:8:9: error: 'seed' is fed by the trainer (the dropout seed of training graph 'train'), "
        "not by the data: remove this line"}},
      {"step", lmProgram(lmWith(0, "input step = tokens")), {"test.tg:8:9: error: 'step' is fed by the trainer"}},
      {"bound twice", lmProgram(lmWith(1, "input tokens = targets")),
       {"test.tg:9:3: error: input 'tokens' is bound twice in this binding: keep one of the two lines",
        "test.tg:8:3: note: the first one is here"}},
      {"left unbound", lmProgram(lmWith(1, "")),
       {"test.tg:7:1: error: input 'targets' of graph 'train' is not bound: add 'input targets = targets' "
        "(lm's fields: tokens, targets)",
        "test.tg:3:32: note: input 'targets' is declared here"}},
      {"unknown field", lmProgram(lmWith(0, "input tokens = tokenz")),
       {"test.tg:8:18: error: task 'lm' has no field 'tokenz' (did you mean 'tokens'?); its fields are: "
        "tokens, targets"}},
      {"dtype", lmProgram(kLmEntries, lmGraphsWith("tokens: f32[B, T], targets: i64[B, T]")),
       {"test.tg:8:9: error: input tokens is f32[4, 8] but lm's field tokens is i64[batch, length]: "
        "declare it as tokens: i64[B, T]",
        "test.tg:3:13: note: input 'tokens' is declared here"}},
      {"rank", lmProgram(kLmEntries, lmGraphsWith("tokens: i64[B, T], targets: i64[B, T, 2]")),
       {"test.tg:9:9: error: input targets is i64[4, 8, 2] but lm's field targets is i64[batch, length]"}},
      {"dtype, dims not bound", lmProgram(lmWith(5, ""), lmGraphsWith("tokens: i32[B, T], targets: i64[B, T]")),
       {"test.tg:8:9: error: input tokens is i32[4, 8] but lm's field tokens is i64[batch, length]: "
        "declare it as i64[...] with 2 axes"}},
      {"no field to feed it", lmProgram(kLmEntries, lmGraphsWith("tokens: i64[B, T], targets: i64[B, T], "
                                                                 "mask: bool[B, T]")),
       {"test.tg:7:1: error: input 'mask' of graph 'train' is not bound: add 'input mask = FIELD' with one "
        "of lm's fields (tokens, targets), or compute 'mask' in the graph from the other inputs"}},
  });
}

TEST(BindingCheck, ConfigAndDimEntries) {
  expectAll({
      {"unknown value", lmProgram(lmWith(2, "config vocab = vocab_size")),
       {"test.tg:10:18: error: task 'lm' has no value 'vocab_size'; its values are: vocab, pad"}},
      {"unknown task dim", lmProgram(lmWith(5, "dim T = len")),
       {"test.tg:13:11: error: task 'lm' has no dim 'len'; its dims are: batch, length"}},
      {"unknown config entry", lmProgram(lmWith(2, "config vocb = vocab")),
       {"test.tg:10:10: error: there is no config entry 'vocb' (did you mean 'vocab'?) to bind; the "
        "config entries are: vocab, pad, rate"}},
      {"config entry not an int", lmProgram(lmWith(3, "config rate = pad")),
       {"test.tg:11:10: error: config entry 'rate' is a float, but task values are ints"}},
      {"unknown dim", lmProgram(lmWith(4, "dim X = batch")),
       {"test.tg:12:7: error: there is no dim 'X' to bind: declare it at the top level ('dim X') or bind "
        "one of: B, F, T"}},
      {"config bound twice", lmProgram(lmWith(3, "config vocab = pad")),
       {"test.tg:11:3: error: config 'vocab' is bound twice in this binding"}},
      {"shape in a fixed task", lmProgram(lmWith(5, "dim T = tokens.shape[1]")),
       {"test.tg:13:11: error: tokens.shape[1] is for the tensors task; task 'lm''s dims are: batch, length"}},
      {"shape for a value", lmProgram(lmWith(2, "config vocab = tokens.shape[1]")),
       {"test.tg:10:18: error: tokens.shape[1] is for the tensors task; task 'lm''s values are: vocab, pad"}},
  });
}

TEST(BindingCheck, Dims) {
  expectAll({
      {"dim missing", lmProgram(lmWith(5, "")),
       {"test.tg:8:9: error: dim T is not bound: axis 1 of input 'tokens' is T, which the batches set "
        "(lm's dim length): add 'dim T = length' to this binding"}},
      {"dim bound to another task dim", lmProgram(lmWith(5, "dim T = batch")),
       {"test.tg:13:11: error: dim T is used two ways: this binds it to batch, but axis 1 of input "
        "'tokens' is T, which is lm's dim length: write 'dim T = length'",
        "test.tg:8:3: note: input 'tokens' is bound here"}},
      {"one dim for two task dims", lmProgram(kLmEntries, lmGraphsWith("tokens: i64[B, T], targets: i64[T, T]")),
       {"test.tg:9:9: error: dim T is used two ways: axis 0 of input 'targets' is lm's dim batch, but axis 1 "
        "of input 'tokens' is lm's dim length: declare these axes with different dims"}},
      {"a fixed axis", lmProgram(kLmEntries, lmGraphsWith("tokens: i64[4, T], targets: i64[B, T]")),
       {"test.tg:8:9: error: axis 0 of input 'tokens' has the fixed size 4, but the batches set it (lm's dim "
        "batch): declare the axis with dim B, which this binding binds to batch",
        "test.tg:3:13: note: input 'tokens' is declared here as i64[4, 8]"}},
      {"an axis sized by a config entry",
       lmProgram(lmWith(5, ""), replaced(lmGraphsWith("tokens: i64[B, n], targets: i64[B, n]"),
                                         "rate = 0.5", "rate = 0.5, n = 8")),
       {"test.tg:8:9: error: axis 1 of input 'tokens' has the fixed size 8, but the batches set it (lm's dim "
        "length): declare the axis with a named dim D ('dim D' at the top level, then i64[..., D, ...]) and "
        "bind it here with 'dim D = length'"}},
  });
}

TEST(BindingCheck, Tensors) {
  expectAll({
      {"axis 0 fixed", tensorProgram(kTensorEntries, "config { vocab = 100, width = 3 }\n"
                                                     "dim B = 4, F = 3\n"
                                                     "graph fit(x: f32[4, F], y: f32[B]) training {\n"
                                                     "  output loss = reduce_mean(y, axes=[0])\n"
                                                     "}\n"),
       {"test.tg:7:9: error: axis 0 of input 'x' has the fixed size 4, but the batches set it (the batch "
        "(axis 0)): declare the axis with dim B, which this binding binds to batch"}},
      {"axis 0 dim not batch", tensorProgram(tensorsWith(2, "dim B = x.shape[0]")),
       {"test.tg:9:11: error: x.shape[0] is the batch size (the tensors task batches along axis 0): write "
        "'dim B = batch'"}},
      {"batch missing", tensorProgram(tensorsWith(2, "")),
       {"test.tg:7:9: error: dim B is not bound: axis 0 of input 'x' is B, which the batches set (the batch "
        "(axis 0)): add 'dim B = batch' to this binding"}},
      {"feature dim missing", tensorProgram(tensorsWith(3, "")),
       {"test.tg:7:9: error: dim F is not bound: axis 1 of input 'x' is F, which the batches set (x.shape[1]): "
        "add 'dim F = x.shape[1]' to this binding"}},
      {"an axis past the field's rank", tensorProgram(tensorsWith(2, "dim B = y.shape[1]")),
       {"test.tg:9:11: error: field 'y' has 1 axes (input 'y' is f32[4]): y.shape[1] does not exist"}},
      {"no named values", tensorProgram(tensorsWith(4, "config width = features")),
       {"test.tg:11:18: error: the tensors task has no named values: write FIELD.shape[i], the size of axis "
        "i of a field (config width = x.shape[1])"}},
      {"named dims", tensorProgram(tensorsWith(3, "dim F = features")),
       {"test.tg:10:11: error: the tensors task's dims are batch and FIELD.shape[i]: write 'dim F = batch' "
        "or 'dim F = FIELD.shape[i]'"}},
      {"axis out of range", tensorProgram(tensorsWith(3, "dim F = x.shape[2]")),
       {"test.tg:10:11: error: field 'x' has 2 axes (input 'x' is f32[4, 3]): x.shape[2] does not exist"}},
      {"scalar input", tensorProgram(kTensorEntries, "config { vocab = 100, width = 3 }\n"
                                                     "dim B = 4, F = 3\n"
                                                     "graph fit(x: f32[B, F], y: f32[]) training {\n"
                                                     "  output loss = reduce_mean(x, axes=[0, 1]) + y\n"
                                                     "}\n"),
       {"test.tg:8:9: error: input y is a scalar (f32[]), but the tensors task takes batches along axis 0 "
        "of every field: give the input a leading named dim bound to batch (y: f32[B] with 'dim B = batch')"}},
      {"unbound", tensorProgram(tensorsWith(1, "")),
       {"test.tg:6:1: error: input 'y' of graph 'fit' is not bound: add 'input y = y' (the file's tensor of "
        "that name)"}},
  });
}

TEST(BindingCheck, SeveralErrorsAtOnce) {
  std::string e = errorsOf(lmProgram({"input tokns = tokens", "input targets = targetz", "dim T = len"}));
  EXPECT_TRUE(contains(e, "test.tg:8:9: error: graph 'train' has no data input 'tokns'")) << e;
  EXPECT_TRUE(contains(e, "test.tg:9:19: error: task 'lm' has no field 'targetz'")) << e;
  EXPECT_TRUE(contains(e, "test.tg:10:11: error: task 'lm' has no dim 'len'")) << e;
  EXPECT_TRUE(contains(e, "test.tg:7:1: error: input 'tokens' of graph 'train' is not bound")) << e;
}

// ---- ModelOptions::inference ----

TEST(Inference, DropoutIsTheIdentityInATrainingGraph) {
  std::string src =
      "graph train(x: f32[4, 8]) training {\n"
      "  let h = dropout(x, 0.5)\n"
      "  if training { h = h * 2.0 }\n"
      "  output loss = reduce_mean(h, axes=[0, 1])\n"
      "}\n";
  CompiledModel on = compileText(src);
  EXPECT_EQ(countOps(*on.graph, OpKind::PhiloxUniform), 1u);
  ModelOptions o;
  o.inference = true;
  CompiledModel off = compileText(src, o);
  EXPECT_EQ(countOps(*off.graph, OpKind::PhiloxUniform), 0u);
  EXPECT_EQ(countOps(*off.graph, OpKind::Where), 0u);
  // The same signature and outputs; `training` is still true.
  EXPECT_TRUE(off.training);
  EXPECT_EQ(off.loss_output, 0);
  ASSERT_EQ(off.graph->inputs().size(), 3u);
  EXPECT_EQ(off.graph->inputs()[1]->result()->name(), "seed");
  EXPECT_EQ(off.graph->inputs()[2]->result()->name(), "step");
  EXPECT_EQ(countOps(*off.graph, OpKind::Mul), 1u);
  // Dropout's own checks still apply.
  EXPECT_TRUE(contains(errorsOf("graph train(x: f32[4]) training {\n"
                                "  output loss = reduce_mean(dropout(x, 1.5), axes=[0])\n}\n",
                                o),
                       "test.tg:2:29: error: dropout probability must be in [0, 1), got 1.5"));
}

TEST(Inference, TheTransformerTrainGraphWithoutDropout) {
  ModelOptions o;
  o.preset = "tiny";
  CompiledModel on = compileModelFile(std::string(TGC_SOURCE_DIR) + "/models/transformer.tg", o);
  o.inference = true;
  CompiledModel off = compileModelFile(std::string(TGC_SOURCE_DIR) + "/models/transformer.tg", o);
  EXPECT_GT(countOps(*on.graph, OpKind::PhiloxUniform), 0u);
  EXPECT_EQ(countOps(*off.graph, OpKind::PhiloxUniform), 0u);
  EXPECT_EQ(on.graph->inputs().size(), off.graph->inputs().size());
  EXPECT_EQ(on.output_names, off.output_names);
  EXPECT_EQ(on.params.size(), off.params.size());
}

// ---- the shipped models ----

std::string readFile(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The model file with its `bind` block taken out.
std::string withoutBinding(std::string s) {
  size_t b = s.find("\nbind ");
  size_t e = s.find("\n}\n", b);
  EXPECT_NE(b, std::string::npos);
  EXPECT_NE(e, std::string::npos);
  s.erase(b, e + 2 - b);
  return s;
}

TEST(BindingModels, TransformerBindsTranslation) {
  std::string path = std::string(TGC_SOURCE_DIR) + "/models/transformer.tg";
  ModelOptions o;
  o.preset = "tiny";
  CompiledModel m = compileModelFile(path, o);
  ASSERT_EQ(m.bindings.size(), 1u);
  const DataBinding& b = m.bindings[0];
  EXPECT_EQ(b.task, "translation");
  EXPECT_EQ(b.graph, "train");
  ASSERT_EQ(b.inputs.size(), 3u);
  EXPECT_EQ(b.inputs[2].name, "tgt_out");
  EXPECT_EQ(b.inputs[2].from, "target_out");
  ASSERT_EQ(b.configs.size(), 3u);
  EXPECT_EQ(b.configs[1].name, "tgt_vocab");
  EXPECT_EQ(b.configs[1].from, "target_vocab");
  ASSERT_EQ(b.dims.size(), 3u);
  EXPECT_EQ(b.dims[1].name, "S");
  EXPECT_EQ(b.dims[1].from, "source_length");
  EXPECT_TRUE(b.loc.starts_with(path + ":")) << b.loc;
  // The binding adds nothing to any graph.
  std::string text = withoutBinding(readFile(path));
  for (const char* g : {"train", "encode", "decode_step"}) {
    SCOPED_TRACE(g);
    o.graph = g;
    CompiledModel bare = compileModelSource(text, path, o);
    EXPECT_EQ(printGraph(*compileModelFile(path, o).graph), printGraph(*bare.graph));
    EXPECT_TRUE(bare.bindings.empty());
  }
}

TEST(BindingModels, GptBindsLm) {
  std::string path = std::string(TGC_SOURCE_DIR) + "/models/gpt.tg";
  ModelOptions o;
  o.preset = "tiny";
  CompiledModel m = compileModelFile(path, o);
  ASSERT_EQ(m.bindings.size(), 1u);
  const DataBinding& b = m.bindings[0];
  EXPECT_EQ(b.task, "lm");
  EXPECT_EQ(b.graph, "train");
  ASSERT_EQ(b.inputs.size(), 2u);
  ASSERT_EQ(b.configs.size(), 2u);
  ASSERT_EQ(b.dims.size(), 2u);
  EXPECT_EQ(b.dims[1].name, "T");
  EXPECT_EQ(b.dims[1].from, "length");
  CompiledModel bare = compileModelSource(withoutBinding(readFile(path)), path, o);
  EXPECT_EQ(printGraph(*m.graph), printGraph(*bare.graph));
}

}  // namespace
}  // namespace tgc
