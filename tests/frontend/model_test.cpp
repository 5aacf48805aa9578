// The shipped models: every preset and graph compiles; structure follows the paper (and
// avoids the reference articles' bugs); the base parameter count matches the closed form.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>

#include "frontend/model_stats.h"
#include "ir/verifier.h"
#include "tests/frontend/fe_test_util.h"

namespace tgc {
namespace {

using testing::countOps;

const std::string kTransformer = std::string(TGC_SOURCE_DIR) + "/models/transformer.tg";
const std::string kGpt = std::string(TGC_SOURCE_DIR) + "/models/gpt.tg";

std::map<std::string, ConfigValue> configOf(const CompiledModel& m) {
  return {m.config.begin(), m.config.end()};
}

TEST(ModelTest, TransformerCompilesForEveryPresetAndGraph) {
  for (const char* preset : {"tiny", "small", "base"}) {
    for (const char* graph : {"train", "encode", "decode_step"}) {
      SCOPED_TRACE(std::string(preset) + " " + graph);
      // decode_at, decode_memory and decode_cached serve tgc translate (tests/train).
      auto m = compileModelFile(kTransformer, {.graph = graph, .preset = preset});
      EXPECT_EQ(m.graph->name(), graph);
      EXPECT_EQ(verifyGraph(*m.graph), std::vector<std::string>{});
      EXPECT_EQ(m.graph_names,
                (std::vector<std::string>{"train", "encode", "decode_step", "decode_at",
                                          "decode_memory", "decode_cached"}));
      EXPECT_EQ(m.training, std::string(graph) == "train");
      auto cfg = configOf(m);
      int64_t d = std::get<int64_t>(cfg.at("d_model"));
      int64_t v = std::get<int64_t>(cfg.at("tgt_vocab"));
      const auto& outs = m.graph->outputs();
      if (std::string(graph) == "train") {
        ASSERT_EQ(m.output_names, (std::vector<std::string>{"loss", "logits"}));
        EXPECT_EQ(outs[0]->type().str(), "f32[]");
        EXPECT_EQ(outs[1]->type().str(), fmt::format("f32[16,64,{}]", v));
        EXPECT_EQ(m.loss_output, 0);
      } else if (std::string(graph) == "encode") {
        EXPECT_EQ(outs[0]->type().str(), fmt::format("f32[16,64,{}]", d));
        EXPECT_EQ(countOps(*m.graph, OpKind::PhiloxUniform), 0u);  // no dropout at inference
      } else {
        EXPECT_EQ(m.output_names, std::vector<std::string>{"log_probs"});
        EXPECT_EQ(outs[0]->type().str(), fmt::format("f32[16,{}]", v));
        EXPECT_EQ(countOps(*m.graph, OpKind::PhiloxUniform), 0u);
      }
    }
  }
}

// Vaswani et al.: per layer 4 d^2 + 4 d (attention with biases) per attention block,
// 2 d d_ff + d_ff + d (FFN), 2 d per LayerNorm; embeddings V d; the projection d V + V.
int64_t closedForm(int64_t d, int64_t dff, int64_t nEnc, int64_t nDec, int64_t srcV, int64_t tgtV,
                   bool tie) {
  int64_t attn = 4 * d * d + 4 * d, ffn = 2 * d * dff + dff + d, ln = 2 * d;
  int64_t enc = nEnc * (attn + ffn + 2 * ln);
  int64_t dec = nDec * (2 * attn + ffn + 3 * ln);
  int64_t emb = srcV * d + tgtV * d;
  int64_t proj = tie ? 0 : d * tgtV + tgtV;
  return enc + dec + emb + proj;
}

TEST(ModelTest, BaseParameterCountMatchesTheClosedForm) {
  for (bool tie : {false, true}) {
    SCOPED_TRACE(tie ? "tied" : "untied");
    auto m = compileModelFile(kTransformer, {.preset = "base",
                                             .sets = {{"tie_output", tie ? "true" : "false"}}});
    auto cfg = configOf(m);
    EXPECT_EQ(std::get<int64_t>(cfg.at("d_model")), 512);
    EXPECT_EQ(std::get<int64_t>(cfg.at("heads")), 8);
    EXPECT_EQ(std::get<int64_t>(cfg.at("n_enc")), 6);
    int64_t want = closedForm(512, 2048, 6, 6, std::get<int64_t>(cfg.at("src_vocab")),
                              std::get<int64_t>(cfg.at("tgt_vocab")), tie);
    EXPECT_EQ(computeStats(*m.graph).param_count, want);
    int64_t fromInits = 0;
    for (const auto& p : m.params) fromInits += p.type.numel();
    EXPECT_EQ(fromInits, want);
  }
  // The formula itself, by hand for the base model without embeddings and projection:
  // encoder 6 * 3,152,384 + decoder 6 * 4,204,032.
  EXPECT_EQ(closedForm(512, 2048, 6, 6, 0, 0, true), 18'914'304 + 25'224'192);
}

TEST(ModelTest, ParameterNamesAreTheCheckpointNames) {
  auto m = compileModelFile(kTransformer, {.preset = "tiny"});
  std::set<std::string> names;
  for (const auto& p : m.params) names.insert(p.name);
  for (const char* n : {"src_embed.weight", "tgt_embed.weight",
                        "encoder.layers.1.self_attn.w_q.weight", "encoder.layers.1.self_attn.w_o.bias",
                        "encoder.layers.0.ffn.linear1.weight", "encoder.layers.0.norm2.gamma",
                        "decoder.layers.1.cross_attn.w_k.weight", "decoder.layers.0.norm3.beta",
                        "generator.proj.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_EQ(names.size(), m.params.size());  // no duplicates
  // encode uses only the source side; decode_step the same names as train.
  auto enc = compileModelFile(kTransformer, {.graph = "encode", .preset = "tiny"});
  for (const auto& p : enc.params) {
    EXPECT_TRUE(names.count(p.name)) << p.name;
    EXPECT_TRUE(p.name.rfind("src_embed.", 0) == 0 || p.name.rfind("encoder.", 0) == 0) << p.name;
  }
}

// The articles' bugs, checked on the IR: scale by 1/sqrt(d_k), cross-attention masked by the
// source padding only, log_softmax applied once before the loss, the mask actually used.
TEST(ModelTest, AttentionStructureFollowsThePaper) {
  auto m = compileModelFile(kTransformer, {.preset = "base", .dims = {{"B", 2}, {"S", 5}, {"T", 7}}});
  const Graph& g = *m.graph;
  size_t softmaxes = 0;
  for (const auto& n : g.nodes()) {
    if (n->op() != OpKind::Softmax) continue;
    ++softmaxes;
    // softmax(where(mask, scores * c, -inf))
    const Node* w = n->operand(0)->def();
    ASSERT_EQ(w->op(), OpKind::Where) << printNode(*n);
    const Node* scaled = w->operand(1)->def();
    ASSERT_EQ(scaled->op(), OpKind::Mul);
    EXPECT_DOUBLE_EQ(scaled->operand(1)->def()->attrFloats("value")[0], 0.125);  // 1/sqrt(64)
    EXPECT_EQ(w->operand(2)->def()->attrFloats("value")[0], -std::numeric_limits<double>::infinity());
    const std::string& name = n->result()->name();
    const TensorType& mask = w->operand(0)->type();
    if (name.find("cross_attn") != std::string::npos) {
      EXPECT_EQ(mask.str(), "bool[2,1,1,5]") << name;  // source padding, not causal
    } else if (name.find("decoder") != std::string::npos) {
      EXPECT_EQ(mask.str(), "bool[2,1,7,7]") << name;  // causal and target padding
      EXPECT_EQ(w->operand(0)->def()->op(), OpKind::LogicalAnd);
    } else {
      EXPECT_EQ(mask.str(), "bool[2,1,1,5]") << name;
    }
  }
  EXPECT_EQ(softmaxes, 6u + 12u);
  EXPECT_EQ(countOps(g, OpKind::LogSoftmax), 1u);
  const Node* logits = g.outputs()[1]->def();
  EXPECT_EQ(logits->op(), OpKind::Add);  // the projection's bias: raw logits, no softmax
}

TEST(ModelTest, DropoutSitesWhereThePaperPutsThem) {
  auto m = compileModelFile(kTransformer, {.preset = "tiny"});
  // Embeddings (2) + residual dropout on every sub-layer: 2 per encoder layer, 3 per decoder.
  EXPECT_EQ(countOps(*m.graph, OpKind::PhiloxUniform), 2u + 2 * 2 + 2 * 3);
  auto more = compileModelFile(kTransformer, {.preset = "tiny",
                                              .sets = {{"attn_dropout", "0.1"}, {"ffn_dropout", "0.1"}}});
  // Plus attention weights (1 per encoder layer, 2 per decoder layer) and the FFN hidden layer.
  EXPECT_EQ(countOps(*more.graph, OpKind::PhiloxUniform), 12u + (2 * 1 + 2 * 2) + (2 + 2));
  auto none = compileModelFile(kTransformer, {.preset = "tiny", .sets = {{"p_drop", "0"}}});
  EXPECT_EQ(countOps(*none.graph, OpKind::PhiloxUniform), 0u);
}

TEST(ModelTest, TiedOutputProjectionUsesTheTargetEmbedding) {
  auto m = compileModelFile(kTransformer, {.graph = "decode_step", .preset = "tiny",
                                           .sets = {{"tie_output", "true"}}});
  const Node* logp = m.graph->outputs()[0]->def();
  ASSERT_EQ(logp->op(), OpKind::LogSoftmax);
  const Node* proj = logp->operand(0)->def();
  ASSERT_EQ(proj->op(), OpKind::MatMul);
  EXPECT_TRUE(proj->attrBool("transpose_b"));
  EXPECT_EQ(proj->operand(1)->name(), "tgt_embed.weight");
}

TEST(ModelTest, PresetsAndOverridesReachTheGraph) {
  auto m = compileModelFile(kTransformer, {.graph = "encode", .preset = "small",
                                           .sets = {{"d_model", "384"}, {"heads", "6"}},
                                           .dims = {{"B", 3}, {"S", 11}}});
  EXPECT_EQ(m.graph->outputs()[0]->type().str(), "f32[3,11,384]");
  // encode does not depend on T, so T is not part of its dims (the compile cache key).
  EXPECT_EQ(m.graph->dims(), (std::vector<std::pair<std::string, int64_t>>{{"B", 3}, {"S", 11}}));
  auto f64 = compileModelFile(kTransformer, {.graph = "encode", .preset = "tiny", .sets = {{"dtype", "f64"}}});
  EXPECT_EQ(f64.graph->outputs()[0]->type().dtype, DType::f64);
  for (const auto& p : f64.params) EXPECT_EQ(p.type.dtype, DType::f64) << p.name;
  std::string e;
  try {
    compileModelFile(kTransformer, {.preset = "tiny", .sets = {{"heads", "5"}}});
  } catch (const ParseError& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("d_model (64) must be divisible by heads (5)"), std::string::npos) << e;
}

TEST(ModelTest, GptCompiles) {
  for (const char* preset : {"tiny", "small", "base"}) {
    for (const char* graph : {"train", "next_token"}) {
      SCOPED_TRACE(std::string(preset) + " " + graph);
      auto m = compileModelFile(kGpt, {.graph = graph, .preset = preset});
      EXPECT_EQ(verifyGraph(*m.graph), std::vector<std::string>{});
    }
  }
  auto m = compileModelFile(kGpt, {.graph = "next_token", .preset = "tiny", .dims = {{"B", 1}, {"T", 9}}});
  EXPECT_EQ(m.graph->outputs()[0]->type().str(), "f32[1,8000]");
  EXPECT_EQ(countOps(*m.graph, OpKind::Gelu), 2u);
  // Tied: the only vocabulary-sized parameter is the embedding.
  for (const auto& p : m.params)
    if (p.name != "tok_embed.weight") {
      EXPECT_LT(p.type.numel(), 8000 * 64) << p.name;
    }
}

}  // namespace
}  // namespace tgc
