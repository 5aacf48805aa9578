// Length buckets, static batch shapes, deterministic epochs, padding.
#include "runtime/data/batching.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "runtime/data/rng.h"
#include "tests/data/tatoeba_path.h"

namespace tgc::data {
namespace {

std::vector<int64_t> row(const Tensor& t, int64_t r) {
  const int64_t n = t.shape()[1];
  return {t.as<int64_t>() + r * n, t.as<int64_t>() + (r + 1) * n};
}

TEST(Batching, TensorLayout) {
  BatchingOptions o;
  o.batchSize = 2;
  const Batcher b({{{5, 6, 7}, {8, 9}}, {{5}, {10, 11, 12}}}, o, {{4, 5}});
  const auto plans = b.planEpoch(1, 0);
  ASSERT_EQ(plans.size(), 1u);
  BatchPlan plan = plans[0];
  plan.examples = {0, 1};  // fix the row order for the check
  const Batch batch = b.makeBatch(plan);
  EXPECT_EQ(batch.src.type(), (TensorType{DType::i64, {2, 4}}));
  EXPECT_EQ(batch.tgtIn.type(), (TensorType{DType::i64, {2, 5}}));
  EXPECT_EQ(batch.tgtOut.type(), (TensorType{DType::i64, {2, 5}}));
  EXPECT_EQ(row(batch.src, 0), (std::vector<int64_t>{5, 6, 7, 0}));
  EXPECT_EQ(row(batch.src, 1), (std::vector<int64_t>{5, 0, 0, 0}));
  EXPECT_EQ(row(batch.tgtIn, 0), (std::vector<int64_t>{Vocab::kBos, 8, 9, 0, 0}));
  EXPECT_EQ(row(batch.tgtOut, 0), (std::vector<int64_t>{8, 9, Vocab::kEos, 0, 0}));
  EXPECT_EQ(row(batch.tgtIn, 1), (std::vector<int64_t>{Vocab::kBos, 10, 11, 12, 0}));
  EXPECT_EQ(row(batch.tgtOut, 1), (std::vector<int64_t>{10, 11, 12, Vocab::kEos, 0}));
  EXPECT_EQ(batch.rows, 2);
  EXPECT_EQ(batch.srcTokens, 4);
  EXPECT_EQ(batch.tgtTokens, 7);
  EXPECT_NEAR(b.paddingFraction({plan}), 1.0 - 11.0 / 18.0, 1e-12);
}

// Random-length data in the shape of a corpus: short sentences common, long ones rare.
std::vector<EncodedPair> syntheticData(size_t n) {
  std::vector<EncodedPair> d;
  Rng rng(11);
  for (size_t i = 0; i < n; ++i) {
    const auto s = static_cast<size_t>(1 + rng.below(4) + rng.below(4) * rng.below(6));
    const auto t = static_cast<size_t>(std::max<int64_t>(1, static_cast<int64_t>(s) - 2 +
                                                             static_cast<int64_t>(rng.below(5))));
    d.push_back({std::vector<int64_t>(s, 4 + static_cast<int64_t>(i % 50)),
                 std::vector<int64_t>(t, 4 + static_cast<int64_t>(i % 30))});
  }
  return d;
}

TEST(Batching, EpochsAreDeterministicPermutations) {
  BatchingOptions o;
  o.batchSize = 16;
  o.dropPartial = false;
  const Batcher b(syntheticData(1000), o);
  EXPECT_EQ(b.droppedTooLong(), 0);
  const auto e0 = b.planEpoch(5, 0);
  // Every example exactly once, each in a bucket it fits.
  std::multiset<size_t> seen;
  for (const auto& p : e0) {
    EXPECT_LE(p.examples.size(), 16u);
    const BucketShape& s = b.buckets()[static_cast<size_t>(p.bucket)];
    for (size_t i : p.examples) {
      seen.insert(i);
      EXPECT_LE(b.data()[i].src.size(), static_cast<size_t>(s.srcLen));
      EXPECT_LE(b.data()[i].tgt.size() + 1, static_cast<size_t>(s.tgtLen));
      EXPECT_EQ(b.bucketFor(static_cast<int64_t>(b.data()[i].src.size()),
                            static_cast<int64_t>(b.data()[i].tgt.size())),
                p.bucket);
    }
  }
  ASSERT_EQ(seen.size(), 1000u);
  EXPECT_EQ(std::set<size_t>(seen.begin(), seen.end()).size(), 1000u);

  auto same = [](const std::vector<BatchPlan>& x, const std::vector<BatchPlan>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].bucket != y[i].bucket || x[i].examples != y[i].examples) return false;
    return true;
  };
  EXPECT_TRUE(same(e0, b.planEpoch(5, 0)));
  EXPECT_FALSE(same(e0, b.planEpoch(5, 1)));
  EXPECT_FALSE(same(e0, b.planEpoch(6, 0)));
  // The batch order mixes buckets (not all of bucket 0 first).
  std::vector<int> firstBuckets;
  for (size_t i = 0; i < 8; ++i) firstBuckets.push_back(e0[i].bucket);
  EXPECT_GT(std::set<int>(firstBuckets.begin(), firstBuckets.end()).size(), 1u);
}

TEST(Batching, DropPartialKeepsFullBatches) {
  BatchingOptions o;
  o.batchSize = 16;
  const Batcher b(syntheticData(1000), o);
  const auto plans = b.planEpoch(5, 0);
  std::map<int, size_t> perBucket;
  for (size_t i = 0; i < b.data().size(); ++i)
    ++perBucket[b.bucketFor(static_cast<int64_t>(b.data()[i].src.size()),
                            static_cast<int64_t>(b.data()[i].tgt.size()))];
  size_t expected = 0;
  for (auto [bucket, n] : perBucket) expected += n / 16;
  EXPECT_EQ(plans.size(), expected);
  for (const auto& p : plans) EXPECT_EQ(p.examples.size(), 16u);
}

// Chosen buckets never starve: with whole batches only, each gets at least one batch, even
// for long-tailed lengths where a bucket of a few outliers would pad least.
TEST(Batching, EveryChosenBucketGetsBatches) {
  for (int64_t B : {16, 64, 200}) {
    BatchingOptions o;
    o.batchSize = B;
    o.numBuckets = 6;
    const Batcher b(syntheticData(1000), o);
    std::set<int> used;
    for (const auto& p : b.planEpoch(3, 0)) used.insert(p.bucket);
    EXPECT_EQ(used.size(), b.buckets().size()) << "B=" << B;
    EXPECT_GT(b.buckets().size(), 1u) << "B=" << B;
  }
}

TEST(Batching, PartialBatchRepeatsItsRows) {
  BatchingOptions o;
  o.batchSize = 4;
  o.dropPartial = false;
  const Batcher b({{{5, 6}, {7}}, {{8}, {9, 10}}}, o, {{2, 3}});
  const auto plans = b.planEpoch(0, 0);
  ASSERT_EQ(plans.size(), 1u);
  const Batch batch = b.makeBatch(plans[0]);
  EXPECT_EQ(batch.rows, 2);
  EXPECT_EQ(row(batch.src, 2), row(batch.src, 0));
  EXPECT_EQ(row(batch.tgtOut, 3), row(batch.tgtOut, 1));
  EXPECT_EQ(batch.srcTokens, 3);
}

TEST(Batching, FixedBucketsLeaveOutWhatDoesNotFit) {
  BatchingOptions o;
  o.batchSize = 1;
  const Batcher b({{{1, 2, 3}, {4}}, {{1}, {2, 3, 4, 5}}, {{1}, {2}}}, o, {{2, 3}, {4, 2}});
  EXPECT_EQ(b.droppedTooLong(), 1);  // the 4-token target
  EXPECT_EQ(b.bucketFor(1, 1), 0);   // both fit; 2·3 < 4·2
  EXPECT_EQ(b.bucketFor(3, 1), 1);
  EXPECT_EQ(b.bucketFor(1, 3), -1);
  EXPECT_EQ(b.planEpoch(1, 0).size(), 2u);
}

TEST(Batching, ChooseBucketsRoundsAndCovers) {
  const auto data = syntheticData(500);
  const auto buckets = chooseBuckets(data, 3, 4);
  ASSERT_FALSE(buckets.empty());
  EXPECT_LE(buckets.size(), 3u);
  for (const auto& s : buckets) {
    EXPECT_EQ(s.srcLen % 4, 0);
    EXPECT_EQ(s.tgtLen % 4, 0);
  }
  int64_t maxSrc = 0, maxTgt = 0;
  for (const auto& e : data) {
    maxSrc = std::max<int64_t>(maxSrc, static_cast<int64_t>(e.src.size()));
    maxTgt = std::max<int64_t>(maxTgt, static_cast<int64_t>(e.tgt.size()));
  }
  EXPECT_GE(buckets.back().srcLen, maxSrc);
  EXPECT_THROW(chooseBuckets(data, 0), std::invalid_argument);
}

// The padding that buckets save, on the built-in task and (where present) on Tatoeba.
double padding(const std::vector<EncodedPair>& data, int numBuckets) {
  BatchingOptions o;
  o.batchSize = 64;
  o.numBuckets = numBuckets;
  const Batcher b(data, o);
  return b.paddingFraction(b.planEpoch(1, 0));
}

TEST(Batching, PaddingFraction) {
  NumeralsOptions no;
  no.trainSize = 20'000;
  const auto pairs = tokenizeNumerals(makeNumeralsTask(no).train);
  CorpusOptions co;
  const auto data = encodePairs(pairs, buildSourceVocab(pairs, co), buildTargetVocab(pairs, co));
  const double one = padding(data, 1), four = padding(data, 4), eight = padding(data, 8);
  std::cout << "[ padding  ] numerals, B=64: 1 bucket " << one << ", 4 buckets " << four
            << ", 8 buckets " << eight << "\n";
  EXPECT_LT(four, one);
  EXPECT_LT(eight, four);
  EXPECT_LT(four, 0.25);

  const std::string tatoeba = tatoebaPath();
  if (!std::filesystem::exists(tatoeba)) {
    std::cout << "[ padding  ] " << tatoeba << " not present; Tatoeba figures skipped\n";
    return;
  }
  const PreparedCorpus p = prepareCorpus(readTsvCorpus(tatoeba), co);
  const auto tdata =
      encodePairs(p.train, buildSourceVocab(p.train, co), buildTargetVocab(p.train, co));
  const double tOne = padding(tdata, 1), tFour = padding(tdata, 4), tEight = padding(tdata, 8);
  std::cout << "[ padding  ] tatoeba, B=64: 1 bucket " << tOne << ", 4 buckets " << tFour
            << ", 8 buckets " << tEight << "\n";
  EXPECT_LT(tFour, tOne);
  EXPECT_LT(tEight, tFour);
}

TEST(Batching, SourceTensorForInference) {
  const Tensor t = sourceTensor({{4, 5}, {6}}, 3, 3);
  EXPECT_EQ(row(t, 0), (std::vector<int64_t>{4, 5, 0}));
  EXPECT_EQ(row(t, 1), (std::vector<int64_t>{6, 0, 0}));
  EXPECT_EQ(row(t, 2), (std::vector<int64_t>{6, 0, 0}));
  EXPECT_EQ(row(sourceTensor({{4}}, 2, 2, false), 1), (std::vector<int64_t>{0, 0}));
  EXPECT_THROW(sourceTensor({{4, 5, 6}}, 1, 2), std::invalid_argument);
  EXPECT_THROW(sourceTensor({{4}, {5}}, 1, 2), std::invalid_argument);
}

}  // namespace
}  // namespace tgc::data
