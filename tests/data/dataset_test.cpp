// The assembled data sets, end to end: text → ids → batches → ids → text.
#include "runtime/data/dataset.h"

#include <gtest/gtest.h>

#include "runtime/data/bleu.h"

namespace tgc::data {
namespace {

TEST(Dataset, NumeralsEndToEnd) {
  NumeralsOptions o;
  o.trainSize = 20'000;
  const TranslationData d = numeralsData(o);
  std::cout << "[ dataset  ] " << d.summary << "\n";
  // 零一二两三四五六七八九十百千万 and zero..nineteen, 8 tens, 72 hyphenated, hundred,
  // thousand, million: all occur in 20,000 examples.
  EXPECT_EQ(d.srcVocab.size(), 4 + 15);
  EXPECT_EQ(d.tgtVocab.size(), 4 + 20 + 8 + 72 + 3);
  EXPECT_EQ(d.test.size(), 1000u);

  // Held-out text needs no <unk>.
  for (const auto& p : d.test) {
    for (int64_t id : d.srcVocab.encode(p.src)) ASSERT_NE(id, Vocab::kUnk) << p.srcText;
    for (int64_t id : d.tgtVocab.encode(p.tgt)) ASSERT_NE(id, Vocab::kUnk) << p.tgtText;
  }

  // Batches decode back to the references, so a perfect model scores exact match 1, BLEU 100.
  BatchingOptions bo;
  bo.batchSize = 32;
  bo.dropPartial = false;
  const Batcher batcher(encodeSplit(d, d.test), bo);
  std::vector<std::string> hyps(d.test.size()), refs(d.test.size());
  for (const BatchPlan& plan : batcher.planEpoch(1, 0)) {
    const Batch b = batcher.makeBatch(plan);
    const int64_t T = b.tgtOut.shape()[1];
    for (int64_t r = 0; r < b.rows; ++r) {
      const size_t i = b.examples[static_cast<size_t>(r)];
      const std::span<const int64_t> row(b.tgtOut.as<int64_t>() + r * T, static_cast<size_t>(T));
      hyps[i] = d.tgtVocab.decode(row);
      refs[i] = d.test[i].tgtText;
      const std::span<const int64_t> src(b.src.as<int64_t>() + r * b.src.shape()[1],
                                         static_cast<size_t>(b.src.shape()[1]));
      EXPECT_EQ(d.srcVocab.decode(src), d.test[i].srcText);
    }
  }
  EXPECT_EQ(exactMatch(hyps, refs), 1.0);
  EXPECT_NEAR(corpusBleu(hyps, refs).score, 100.0, 1e-9);
}

TEST(Dataset, CorpusWithVocabularyLimits) {
  const std::string tsv =
      "The cat sat.\t猫坐着。\nThe dog sat.\t狗坐着。\nThe cat ran.\t猫跑了。\nA bird!\t鸟！\n";
  CorpusOptions o;
  o.validFraction = 0;
  CorpusVocabOptions v;
  v.minCount = 2;
  const TranslationData d = corpusData(parseTsvCorpus(tsv, "t.tsv"), o, v);
  EXPECT_EQ(d.train.size(), 4u);
  EXPECT_TRUE(d.test.empty());
  // Twice or more: the . sat cat / 坐 着 . 猫.
  EXPECT_EQ(d.tgtVocab.size(), 4 + 4);
  EXPECT_EQ(d.srcVocab.size(), 4 + 4);
  EXPECT_EQ(d.tgtVocab.decode(d.tgtVocab.encodeText("The bird sat.")), "the <unk> sat.");
  EXPECT_NE(d.summary.find("zh→en: 4 pairs, 4 train, 0 valid"), std::string::npos) << d.summary;
}

}  // namespace
}  // namespace tgc::data
