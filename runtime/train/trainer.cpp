#include "runtime/train/trainer.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "frontend/frontend.h"
#include "ir/builder.h"
#include "runtime/train/report.h"

namespace tgc::train {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

Tensor scalarI64(int64_t v) {
  Tensor t(TensorType{DType::i64, {}});
  t.setI(0, v);
  return t;
}

std::string clockText(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02d}:{:02d}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{}:{:02d}", s / 60, s % 60);
}

std::string countText(double v) {
  return v >= 1e6 ? fmt::format("{:.2f}M", v / 1e6)
                  : v >= 1e3 ? fmt::format("{:.1f}k", v / 1e3) : fmt::format("{:.0f}", v);
}

// The noam schedule's d_model: the model's config entry of that name.
int64_t noamDModel(const CompiledModel& m) {
  for (const auto& [k, v] : m.config)
    if (k == "d_model" && std::holds_alternative<int64_t>(v)) return std::get<int64_t>(v);
  throw std::runtime_error(
      "the noam schedule scales the learning rate by d_model^-0.5, and the model has no integer "
      "config entry 'd_model': train with --schedule constant --lr RATE");
}

// The binding that feeds the run: the one named by its task, or the only one there is.
DataBinding chooseBinding(const CompiledModel& m, const std::string& task, const std::string& path) {
  std::string known;
  for (const DataBinding& b : m.bindings) known += (known.empty() ? "" : ", ") + b.task;
  if (m.bindings.empty())
    throw std::runtime_error(fmt::format(
        "{}: error: the model declares no data binding, so tgc train does not know which data "
        "feeds which graph input; add one, e.g. `bind lm to train {{ input tokens = tokens ... }}` "
        "(docs/language.md, \"Data bindings\")", path));
  if (task.empty()) {
    if (m.bindings.size() == 1) return m.bindings.front();
    throw std::runtime_error(fmt::format(
        "{}: error: the model declares {} data bindings ({}): choose one with --task", path,
        m.bindings.size(), known));
  }
  for (const DataBinding& b : m.bindings)
    if (b.task == task) return b;
  throw std::runtime_error(fmt::format("--task {}: the model declares no binding of that task (it has: {})",
                                       task, known));
}

// The run directory of a checkpoint file: the folder above "checkpoints".
std::string runDirOf(const std::string& checkpointPath) {
  fs::path dir = fs::path(checkpointPath).parent_path();
  if (dir.filename() == "checkpoints") dir = dir.parent_path();
  return dir.empty() ? "." : dir.string();
}

}  // namespace

// train(src, tgt_in, tgt_out) with src_vocab, tgt_vocab and dims B, S, T: what every run
// trained before bindings existed.
DataBinding legacyTranslationBinding(const std::string& path) {
  const std::string loc = path + " (a run from before data bindings: translation)";
  DataBinding b;
  b.task = "translation";
  b.graph = "train";
  b.loc = loc;
  b.inputs = {{"src", "source", -1, loc}, {"tgt_in", "target_in", -1, loc}, {"tgt_out", "target_out", -1, loc}};
  b.configs = {{"src_vocab", "source_vocab", -1, loc}, {"tgt_vocab", "target_vocab", -1, loc}};
  b.dims = {{"B", "batch", -1, loc}, {"S", "source_length", -1, loc}, {"T", "target_length", -1, loc}};
  return b;
}

DataBinding findBinding(const ModelSpec& model, const std::string& task, bool legacy) {
  const CompiledModel m = compileModelFile(model.path, model.options(""));
  if (legacy && m.bindings.empty()) return legacyTranslationBinding(model.path);
  DataBinding b = chooseBinding(m, task, model.path);
  // Compiling the bound graph checks the binding against it (errors at file:line:col).
  compileModelFile(model.path, model.options(b.graph));
  return b;
}

// ---- configuration -------------------------------------------------------------------------

std::string TrainConfig::toJson() const {
  json j;
  j["batch_size"] = batchSize;
  j["buckets"] = buckets;
  j["task"] = task;
  j["seed"] = seed;
  j["valid_every"] = validEvery;
  j["valid_size"] = validSize;
  j["checkpoint_every"] = checkpointEvery;
  j["keep_checkpoints"] = keepCheckpoints;
  j["max_bad_steps"] = maxBadSteps;
  j["decode_batch"] = decodeBatch;
  j["ema"] = ema;
  const OptimizerConfig& o = optimizer;
  j["optimizer"] = {{"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps},
                    {"weight_decay", o.weight_decay}, {"schedule", o.schedule}, {"lr", o.lr},
                    {"lr_scale", o.lr_scale}, {"warmup", o.warmup}, {"d_model", o.d_model},
                    {"clip_norm", o.clip_norm}, {"precision", dtypeName(o.precision)}};
  return j.dump();
}

TrainConfig TrainConfig::fromJson(std::string_view text) {
  try {
    json j = json::parse(text);
    TrainConfig c;
    c.batchSize = j.at("batch_size").get<int64_t>();
    c.buckets = j.at("buckets").get<int>();
    c.task = j.value("task", std::string());
    c.legacyBinding = !j.contains("task");
    c.seed = j.at("seed").get<uint64_t>();
    c.validEvery = j.at("valid_every").get<int64_t>();
    c.validSize = j.at("valid_size").get<int64_t>();
    c.checkpointEvery = j.at("checkpoint_every").get<int64_t>();
    c.keepCheckpoints = j.at("keep_checkpoints").get<int>();
    c.maxBadSteps = j.at("max_bad_steps").get<int>();
    c.decodeBatch = j.at("decode_batch").get<int64_t>();
    c.ema = j.value("ema", 0.0);
    const json& o = j.at("optimizer");
    OptimizerConfig& p = c.optimizer;
    p.beta1 = o.at("beta1").get<double>();
    p.beta2 = o.at("beta2").get<double>();
    p.eps = o.at("eps").get<double>();
    p.weight_decay = o.at("weight_decay").get<double>();
    p.schedule = o.at("schedule").get<std::string>();
    p.lr = o.at("lr").get<double>();
    p.lr_scale = o.at("lr_scale").get<double>();
    p.warmup = o.at("warmup").get<int64_t>();
    p.d_model = o.at("d_model").get<int64_t>();
    p.clip_norm = o.at("clip_norm").get<double>();
    // Checkpoints from before mixed precision have no entry: they trained in f32.
    const std::string precision = o.value("precision", std::string("f32"));
    const std::optional<DType> pd = parseDType(precision);
    if (!pd || (*pd != DType::f32 && *pd != DType::bf16))
      throw std::runtime_error(
          fmt::format("invalid training options: precision '{}' (f32 or bf16)", precision));
    p.precision = *pd;
    return c;
  } catch (const json::exception& e) {
    throw std::runtime_error(fmt::format("invalid training options: {}", e.what()));
  }
}

// ---- the non-finite guard ------------------------------------------------------------------

size_t guardNonFinite(Graph& g) {
  if (g.outputs().empty()) throw IRError("guardNonFinite: the graph has no outputs");
  Value* loss = g.outputs()[0];
  Value* norm = g.findValue("grad_norm");
  if (!norm) throw IRError("guardNonFinite: the graph has no grad_norm (not a training step)");
  Builder b(g);
  const DType ft = loss->type().dtype;
  const double largest = ft == DType::f64 ? std::numeric_limits<double>::max()
                                          : static_cast<double>(std::numeric_limits<float>::max());
  // |x| <= largest is false for NaN and for ±inf.
  auto finite = [&](Value* x) {
    return b.binary(OpKind::Le, b.unary(OpKind::Abs, x), b.scalar(ft, largest, "largest"));
  };
  Value* ok = b.binary(OpKind::LogicalAnd, finite(loss), finite(norm), "finite");
  std::vector<Value*> outs = g.outputs();
  size_t guarded = 0;
  for (Value*& out : outs) {
    if (!out->name().starts_with("new.")) continue;
    Value* old = g.findValue(out->name().substr(4));
    if (!old || old->def()->op() != OpKind::Input || old->type() != out->type()) continue;
    const std::string name = out->name();
    g.renameValue(out, name + ".unguarded");
    Value* kept = b.where(ok, out, old);
    g.renameValue(kept, name);
    out = kept;
    ++guarded;
  }
  g.renameValue(ok, "finite");
  outs.push_back(ok);
  g.setOutputs(outs);
  g.topoSort();
  return guarded;
}

// ---- construction --------------------------------------------------------------------------

Trainer::Trainer(ModelSpec model, DataSpec data, TrainConfig config, std::string outDir,
                 runtime::ExecOptions exec, std::ostream* log, Target target)
    : Trainer(std::move(model), std::move(data), std::move(config), std::move(outDir), exec, log,
              nullptr, target) {}

Trainer::Trainer(ModelSpec model, DataSpec dataSpec, TrainConfig config, std::string outDir,
                 runtime::ExecOptions exec, std::ostream* log, const Checkpoint* from,
                 Target target)
    : model_(std::move(model)),
      dataSpec_(std::move(dataSpec)),
      config_(std::move(config)),
      outDir_(std::move(outDir)),
      exec_(exec),
      log_(log),
      start_(Clock::now()) {
  if (config_.batchSize < 1) throw std::invalid_argument("the batch size must be at least 1");
  if (config_.buckets < 1) throw std::invalid_argument("there must be at least one bucket");
  exec_.updateInPlace = true;
  backend_ = makeStepBackend(target, exec_);  // no device: throws before anything is written
  if (target != Target::cpu) onTarget_ = " on " + backend_->describe();
  fs::create_directories(checkpointDir(outDir_));
  if (!from && !listCheckpoints(outDir_).empty())
    throw std::runtime_error(fmt::format(
        "{} already holds checkpoints of a run: continue it with --resume {}, or choose another "
        "--out", outDir_, outDir_));
  if (int n = removeStaleTemporaries(outDir_))
    say(fmt::format("removed {} temporary file{} of an interrupted checkpoint save", n, n == 1 ? "" : "s"));

  // The binding (checked against its graph by the front end) says which task feeds which
  // inputs; compiling with the config defaults finds it before any data is read.
  {
    binding_ = findBinding(model_, config_.task, from && config_.legacyBinding);
    CompiledModel probe = compileModelFile(model_.path, model_.options(binding_.graph));
    if (probe.loss_output < 0)
      throw std::runtime_error(fmt::format("{}: the graph '{}' that the binding feeds has no output 'loss'",
                                           binding_.loc, binding_.graph));
    if (!probe.training)
      throw std::runtime_error(fmt::format("{}: the graph '{}' that the binding feeds is not marked `training`",
                                           binding_.loc, binding_.graph));
    const auto t0 = Clock::now();
    task_ = makeTask(dataSpec_, binding_, {config_.batchSize, config_.buckets});
    say(fmt::format("data: {} ({:.1f} s)", task_->summary(), since(t0)));
  }
  modelWithVocab_ = model_;
  if (from) {
    task_->checkResume(*from);  // the model is stored with its bound values
  } else {
    for (const BindingEntry& e : binding_.configs) {
      const std::optional<int64_t> v = task_->value(bindingKey(e));
      if (!v)
        throw std::runtime_error(fmt::format("{}: the {} task has no value '{}'", e.loc,
                                             binding_.task, bindingKey(e)));
      modelWithVocab_.sets.emplace_back(e.name, std::to_string(*v));
    }
  }

  if (task_->buckets().empty())
    throw std::runtime_error(fmt::format("the {} task's training split is empty", binding_.task));
  {
    // The graph as the first bucket's batches will feed it.
    const CompiledModel m = compileModelFile(
        modelWithVocab_.path, modelWithVocab_.options(binding_.graph, graphDims(task_->buckets().front())));
    std::map<std::string, TensorType> types;
    for (const Node* in : m.graph->inputs()) types.emplace(in->result()->name(), in->result()->type());
    task_->checkInputs(types);
    // The initial parameters, so that validation can run before the first step (the steps
    // add the optimizer's moments).
    if (!from) backend_->editState() = runtime::ParamStore(initParams(m.params, config_.seed));
  }
  steps_.assign(task_->buckets().size(), -1);
  std::string shapes, dimNames;
  for (const BucketDims& b : task_->buckets()) shapes += " " + shapeText(b);
  for (const BindingEntry& e : binding_.dims)
    if (e.from != "batch") dimNames += (dimNames.empty() ? "" : " x ") + e.name;
  say(fmt::format("batches: {} {}, buckets ({}):{}", config_.batchSize,
                  binding_.task == "tensors" ? "rows" : "sentences", dimNames.empty() ? "-" : dimNames,
                  shapes));

  if (from) {
    backend_->editState() = runtime::ParamStore(from->tensors);
    stepCount_ = from->step;
    updates_ = from->updates;
    skipped_ = from->skipped;
    secondsBefore_ = from->seconds;
    history_ = from->history;
    valid_ = from->valid;
  }
  lastPrint_ = start_;
}

std::unique_ptr<Trainer> Trainer::resume(const std::string& checkpoint, std::string outDir,
                                         runtime::ExecOptions exec, std::ostream* log,
                                         Target target) {
  std::string used;
  Checkpoint c = loadLatestCheckpoint(checkpoint, &used);
  if (outDir.empty()) outDir = runDirOf(used);
  TrainConfig config = TrainConfig::fromJson(c.options);
  if (log)
    *log << fmt::format("resuming from {} (step {}{})\n", used, c.step,
                        config.optimizer.precision == DType::bf16 ? ", bf16 matmuls" : "");
  return std::unique_ptr<Trainer>(new Trainer(ModelSpec::fromJson(c.model),
                                              DataSpec::fromJson(c.data), config, outDir, exec,
                                              log, &c, target));
}

Trainer::~Trainer() = default;

TranslationTask& Trainer::translation() const {
  auto* t = dynamic_cast<TranslationTask*>(task_.get());
  if (!t)
    throw std::logic_error(fmt::format("the run's task is {}, not translation", task_->name()));
  return *t;
}

std::vector<std::pair<std::string, int64_t>> Trainer::graphDims(const BucketDims& dims) const {
  return boundDims(binding_, dims);
}

std::string Trainer::shapeText(const BucketDims& dims) const {
  std::string s;
  for (const auto& [name, v] : graphDims(dims)) {
    bool isBatch = false;
    for (const BindingEntry& e : binding_.dims) isBatch = isBatch || (e.name == name && e.from == "batch");
    if (!isBatch) s += (s.empty() ? "" : "x") + std::to_string(v);
  }
  return s.empty() ? std::to_string(config_.batchSize) : s;
}

void Trainer::say(const std::string& line) {
  if (!log_) return;
  if (tty_) *log_ << "\r\033[K";
  *log_ << line << "\n";
  log_->flush();
}

// ---- compiled graphs ----------------------------------------------------------------------

int Trainer::stepFor(int bucket) {
  int& slot = steps_[static_cast<size_t>(bucket)];
  if (slot >= 0) return slot;
  const auto t0 = Clock::now();
  const BucketDims& shape = task_->buckets()[static_cast<size_t>(bucket)];
  CompiledModel m =
      compileModelFile(modelWithVocab_.path, modelWithVocab_.options(binding_.graph, graphDims(shape)));
  if (m.loss_output < 0)
    throw std::runtime_error(fmt::format("the model's {} graph has no output 'loss'", binding_.graph));
  m.graph->setOutputs({m.graph->outputs()[static_cast<size_t>(m.loss_output)]});
  OptimizerConfig opt = config_.optimizer;
  if (opt.schedule == "noam") opt.d_model = noamDModel(m);
  PassManagerOptions pm = passOptions_;
  if (!pm.dump_dir.empty())
    pm.dump_dir = (std::filesystem::path(pm.dump_dir) / fmt::format("bucket-{}", bucket)).string();
  buildTrainStep(*m.graph, opt, pm);
  guardNonFinite(*m.graph);
  paramNames_.clear();
  for (const ParamInit& p : m.params) paramNames_.push_back(p.name);
  // The host store is edited (and on a device uploaded again) only when state is missing:
  // the first bucket's parameters and moments.
  bool missing = paramNames_.empty() || !backend_->holds(paramNames_.front());
  for (const Node* in : m.graph->inputs())
    missing = missing || (in->attrString("role") == "state" && !backend_->holds(in->result()->name()));
  if (missing) {
    runtime::ParamStore& store = backend_->editState();
    if (store.tensors().empty()) store = runtime::ParamStore(initParams(m.params, config_.seed));
    store.addZeroState(*m.graph);
  }
  slot = backend_->compile(*m.graph);
  const double s = since(t0);
  compileSeconds_ += s;
  const CompiledStepInfo info = backend_->info(slot);
  say(fmt::format("compiled the training step for {}{} in {:.1f} s ({} kernels, {} from the cache)",
                  shapeText(shape), onTarget_, s, info.distinctKernels, info.cacheHits));
  return slot;
}

std::map<std::string, Tensor> Trainer::forward(const FieldBatch& batch) {
  if (!forward_) forward_ = std::make_unique<ForwardRunner>(modelWithVocab_, binding_, exec_);
  const double before = forward_->compileSeconds();
  auto out = forward_->run(batch, parameters(), config_.seed, updates_ + 1);
  compileSeconds_ += forward_->compileSeconds() - before;
  return out;
}

DecodeOptions Trainer::decodeOptions() const { return translation().decodeOptions(config_.decodeBatch); }

std::map<std::string, Tensor> Trainer::parameters() {
  return evaluationParameters(backend_->state().tensors());
}

void Trainer::updateAverages() {
  if (config_.ema <= 0) return;
  // The decay ramps up from 0.1 (TensorFlow's ExponentialMovingAverage with num_updates), so
  // early averages do not drag the initial parameters along.
  const double u = static_cast<double>(updates_);
  const auto d = static_cast<float>(std::min(config_.ema, (1 + u) / (10 + u)));
  backend_->updateAverages(paramNames_, d);
}

Translator& Trainer::translator() {
  runtime::ExecOptions e = exec_;
  e.updateInPlace = false;
  return translation().translator(modelWithVocab_, parameters(), e);
}

// ---- steps ---------------------------------------------------------------------------------

HistoryRow Trainer::step() {
  if (epochPlanned_ < 0) {
    epochPlan_ = task_->planEpoch(config_.seed, 0);
    epochPlanned_ = 0;
    if (epochPlan_.empty())
      throw std::runtime_error(fmt::format(
          "no full batch of {} {}: the training data ({} examples) is too small for this batch size",
          config_.batchSize, binding_.task == "tensors" ? "rows" : "sentences", task_->trainExamples()));
  }
  const auto perEpoch = static_cast<int64_t>(epochPlan_.size());
  const int64_t epoch = stepCount_ / perEpoch;
  if (epoch != epochPlanned_) {
    epochPlan_ = task_->planEpoch(config_.seed, static_cast<uint64_t>(epoch));
    epochPlanned_ = epoch;
  }
  const data::BatchPlan& plan = epochPlan_[static_cast<size_t>(stepCount_ % perEpoch)];
  const int exe = stepFor(plan.bucket);
  const FieldBatch batch = task_->makeBatch(plan);

  std::map<std::string, Tensor> in;
  for (const BindingEntry& e : binding_.inputs) in.emplace(e.name, batch.fields.at(e.from));
  in.emplace("seed", scalarI64(static_cast<int64_t>(config_.seed)));
  in.emplace("step", scalarI64(updates_ + 1));
  const auto t0 = Clock::now();
  auto out = backend_->run(exe, in);
  const double took = since(t0);
  stepSeconds_ += took;
  stepSecondsThisRun_ += took;
  ++stepsThisRun_;
  tokensThisRun_ += static_cast<double>(batch.tokens);

  HistoryRow r;
  r.step = ++stepCount_;
  r.loss = out.at("loss").getF(0);
  r.gradNorm = out.at("grad_norm").getF(0);
  r.lr = out.at("lr").getF(0);
  r.tokens = static_cast<int64_t>(batch.weight);
  if (out.at("finite").getI(0)) {
    ++updates_;
    badInARow_ = 0;
    updateAverages();
  } else {
    ++skipped_;
    ++badInARow_;
  }
  r.update = updates_;
  history_.push_back(r);
  return r;
}

ValidationContext Trainer::validationContext(int64_t limit) {
  ValidationContext ctx;
  ctx.forward = [this](const FieldBatch& b) { return forward(b); };
  ctx.limit = limit;
  ctx.seed = config_.seed;
  ctx.model = &modelWithVocab_;
  ctx.parameters = [this] { return parameters(); };
  ctx.exec = exec_;
  ctx.decodeBatch = config_.decodeBatch;
  return ctx;
}

ValidRow Trainer::score(int64_t limit) {
  ValidationContext ctx = validationContext(limit);
  ValidRow v = task_->validate(ctx);
  v.step = stepCount_;
  return v;
}

std::string Trainer::report(int samples) {
  ValidationContext ctx = validationContext(0);
  return task_->report(ctx, samples);
}

ValidRow Trainer::validate() {
  const auto t0 = Clock::now();
  const int64_t n = config_.validSize > 0 ? std::min(config_.validSize, task_->validExamples())
                                          : task_->validExamples();
  if (n == 0) {
    ValidRow v;
    v.step = stepCount_;
    return v;
  }
  ValidRow v = score(config_.validSize);
  valid_.push_back(v);
  say(fmt::format("validation at step {}: {} ({} {}, {:.1f} s)", v.step, scoreText(task_->metric(), v), n,
                  binding_.task == "tensors" ? "rows" : "sentences", since(t0)));
  return v;
}

std::string Trainer::saveCheckpoint() {
  Checkpoint c;
  c.tensors = backend_->state().tensors();
  c.step = stepCount_;
  c.updates = updates_;
  c.skipped = skipped_;
  c.seconds = secondsBefore_ + since(start_);
  task_->save(c);
  c.model = modelWithVocab_.toJson();
  c.data = dataSpec_.toJson();
  c.options = config_.toJson();
  c.history = history_;
  c.valid = valid_;
  const std::string path = (fs::path(checkpointDir(outDir_)) / checkpointFileName(stepCount_)).string();
  try {
    train::saveCheckpoint(path, c);
  } catch (const CheckpointError& e) {  // a NaN or an infinity in the state: keep the good ones
    say(fmt::format("{}; {}", e.what(),
                    lastCheckpoint_.empty() ? std::string("no checkpoint of this run was written")
                                            : "the last checkpoint is " + lastCheckpoint_));
    return {};
  }
  pruneCheckpoints(outDir_, config_.keepCheckpoints);
  writeReports(outDir_, history_, valid_,
               fmt::format("{} — {}", fs::path(modelWithVocab_.path).filename().string(),
                           dataSpec_.describe(binding_.task)),
               task_->metric());
  lastCheckpoint_ = path;
  return path;
}

// ---- the loop ------------------------------------------------------------------------------

void Trainer::progress(const HistoryRow& r, const StopRule& rule, double elapsed) {
  if (!log_) return;
  const double sinceLast = since(lastPrint_);
  if (sinceLast < (tty_ ? 0.25 : 10.0)) return;
  lastPrint_ = Clock::now();
  const double perStep = stepSecondsThisRun_ / std::max<double>(1, static_cast<double>(stepsThisRun_));
  double eta = -1;
  if (rule.steps > 0) eta = perStep * static_cast<double>(rule.steps - r.step);
  if (rule.seconds > 0) eta = eta < 0 ? rule.seconds - elapsed : std::min(eta, rule.seconds - elapsed);
  std::string line = fmt::format("step {}{} | loss {:.4f} | lr {:.2e} | {} tok/s | {}", r.step,
                                 rule.steps > 0 ? fmt::format("/{}", rule.steps) : "", r.loss, r.lr,
                                 countText(tokensThisRun_ / std::max(stepSecondsThisRun_, 1e-9)),
                                 clockText(elapsed));
  if (eta >= 0) line += " | ETA " + clockText(eta);
  if (skipped_) line += fmt::format(" | {} skipped", skipped_);
  if (tty_)
    *log_ << "\r\033[K" << line << std::flush;
  else
    *log_ << line << "\n" << std::flush;
}

TrainResult Trainer::train(const StopRule& rule, const std::atomic<bool>* stop) {
  TrainResult res;
  const int64_t firstStep = stepCount_;
  const double compiledBefore = compileSeconds_, stepBefore = stepSeconds_;
  tokensThisRun_ = 0;
  stepsThisRun_ = 0;
  stepSecondsThisRun_ = 0;
  while (true) {
    const double elapsed = since(start_);
    if (stop && stop->load()) {
      res.reason = TrainResult::Reason::interrupted;
      res.message = fmt::format("interrupted at step {}", stepCount_);
      break;
    }
    if (rule.steps > 0 && stepCount_ >= rule.steps) {
      res.reason = TrainResult::Reason::steps;
      res.message = fmt::format("reached step {}", stepCount_);
      break;
    }
    if (rule.seconds > 0) {
      const int64_t ran = stepCount_ - firstStep;
      const double perStep = ran > 0 ? (stepSeconds_ - stepBefore) / static_cast<double>(ran) : 0;
      const auto* tr = dynamic_cast<const TranslationTask*>(task_.get());
      const double perSentence =
          tr && tr->decodeSecondsPerSentence() > 0 ? tr->decodeSecondsPerSentence() : 0.005;
      // The caller's evaluation, the last checkpoint and the process's exit must fit too.
      const double reserve =
          rule.reserveSentences > 0 ? 1.2 * perSentence * static_cast<double>(rule.reserveSentences) + 3.0 : 1.0;
      if (elapsed + perStep + reserve >= rule.seconds) {
        res.reason = TrainResult::Reason::time;
        res.message = fmt::format("time budget of {} reached at step {}", clockText(rule.seconds), stepCount_);
        break;
      }
    }
    const HistoryRow r = step();
    if (badInARow_ >= config_.maxBadSteps) {
      res.reason = TrainResult::Reason::nonFinite;
      res.message = fmt::format(
          "stopped: {} steps in a row had a non-finite loss or gradient norm (last at step {}); "
          "they were skipped, the parameters are those after update {}",
          badInARow_, stepCount_, updates_);
      break;
    }
    if (config_.validEvery > 0 && stepCount_ % config_.validEvery == 0) validate();
    if (config_.checkpointEvery > 0 && stepCount_ % config_.checkpointEvery == 0)
      if (const std::string path = saveCheckpoint(); !path.empty())
        say(fmt::format("checkpoint {}", path));
    progress(r, rule, since(start_));
  }
  if (tty_ && log_) *log_ << "\r\033[K" << std::flush;
  if (lastCheckpoint_.empty() || !lastCheckpoint_.ends_with(checkpointFileName(stepCount_)))
    saveCheckpoint();
  res.step = stepCount_;
  res.updates = updates_;
  res.skipped = skipped_;
  res.seconds = since(start_);
  res.compileSeconds = compileSeconds_ - compiledBefore;
  res.stepSeconds = stepSeconds_ - stepBefore;
  res.stepsRun = stepCount_ - firstStep;
  res.tokens = static_cast<int64_t>(tokensThisRun_);
  res.lastValid = valid_.empty() ? ValidRow{} : valid_.back();
  res.checkpoint = lastCheckpoint_;
  return res;
}

}  // namespace tgc::train
