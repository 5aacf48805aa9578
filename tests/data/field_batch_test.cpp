// Length buckets in one dimension (lm, classification) and the shared epoch planner.
#include "runtime/data/field_batch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <set>

#include "runtime/data/rng.h"

namespace tgc::data {
namespace {

// The padded size of lengths in buckets (shortest that holds each), or max when a bucket
// has fewer than minCount examples or a length fits none.
int64_t padded(const std::vector<int64_t>& lengths, const std::vector<int64_t>& buckets,
               int64_t minCount) {
  std::vector<int64_t> count(buckets.size(), 0);
  int64_t size = 0;
  for (int64_t n : lengths) {
    const auto it = std::lower_bound(buckets.begin(), buckets.end(), n);
    if (it == buckets.end()) return std::numeric_limits<int64_t>::max();
    ++count[static_cast<size_t>(it - buckets.begin())];
    size += *it;
  }
  for (int64_t c : count)
    if (c < minCount) return std::numeric_limits<int64_t>::max();
  return size;
}

TEST(LengthBuckets, SmallCases) {
  EXPECT_EQ(chooseLengthBuckets({1, 1, 1, 2, 2, 10}, 2), (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(chooseLengthBuckets({1, 1, 1, 2, 2, 10}, 1), (std::vector<int64_t>{10}));
  EXPECT_EQ(chooseLengthBuckets({5, 5, 5}, 4), (std::vector<int64_t>{5}));  // no more than needed
  EXPECT_EQ(chooseLengthBuckets({}, 3), (std::vector<int64_t>{}));
  // Rounded up to the multiple; the longest is covered.
  EXPECT_EQ(chooseLengthBuckets({1, 3, 9}, 1, 4), (std::vector<int64_t>{12}));
  // Every bucket keeps minPerBucket examples: a lone outlier shares the long bucket.
  EXPECT_EQ(chooseLengthBuckets({1, 1, 1, 1, 2, 2, 2, 9}, 3, 1, 3), (std::vector<int64_t>{1, 9}));
  EXPECT_THROW(chooseLengthBuckets({1}, 0), std::invalid_argument);
  EXPECT_THROW(chooseLengthBuckets({0}, 1), std::invalid_argument);
  EXPECT_THROW(chooseLengthBuckets({1}, 1, 0), std::invalid_argument);
}

// The dynamic programme is optimal: against every choice of bucket lengths on small data.
TEST(LengthBuckets, OptimalAgainstBruteForce) {
  Rng rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int64_t> lengths;
    const auto n = static_cast<size_t>(1 + rng.below(30));
    for (size_t i = 0; i < n; ++i) lengths.push_back(1 + static_cast<int64_t>(rng.below(8)));
    const int K = 1 + static_cast<int>(rng.below(4));
    const int64_t minPer = 1 + static_cast<int64_t>(rng.below(6));
    const int64_t minCount = std::min<int64_t>(minPer, static_cast<int64_t>(n));
    const auto got = chooseLengthBuckets(lengths, K, 1, minPer);
    ASSERT_FALSE(got.empty());
    ASSERT_LE(got.size(), static_cast<size_t>(K));
    EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
    EXPECT_EQ(got.back(), *std::max_element(lengths.begin(), lengths.end()));
    const int64_t cost = padded(lengths, got, minCount);
    // Brute force over subsets of 1..8 that contain the longest length.
    int64_t best = std::numeric_limits<int64_t>::max();
    for (unsigned mask = 1; mask < 256; ++mask) {
      std::vector<int64_t> b;
      for (int64_t l = 1; l <= 8; ++l)
        if (mask & (1u << (l - 1))) b.push_back(l);
      if (b.size() > static_cast<size_t>(K)) continue;
      best = std::min(best, padded(lengths, b, minCount));
    }
    EXPECT_EQ(cost, best) << "trial " << trial;
  }
}

TEST(PlanBucketEpoch, PartitionsAndIsDeterministic) {
  const std::vector<std::vector<size_t>> members = {{0, 1, 2, 3, 4}, {5, 6, 7}, {8, 9, 10, 11}};
  const auto all = planBucketEpoch(members, 2, false, 9, 0);
  std::multiset<size_t> seen;
  for (const auto& p : all) {
    ASSERT_LE(p.examples.size(), 2u);
    for (size_t i : p.examples) {
      seen.insert(i);
      const auto& m = members[static_cast<size_t>(p.bucket)];
      EXPECT_NE(std::find(m.begin(), m.end(), i), m.end());
    }
  }
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(std::set<size_t>(seen.begin(), seen.end()).size(), 12u);
  EXPECT_EQ(all.size(), 7u);  // 3 + 2 + 2
  const auto whole = planBucketEpoch(members, 2, true, 9, 0);
  EXPECT_EQ(whole.size(), 5u);  // 2 + 1 + 2
  for (const auto& p : whole) EXPECT_EQ(p.examples.size(), 2u);
  auto key = [](const std::vector<BatchPlan>& ps) {
    std::vector<std::pair<int, std::vector<size_t>>> k;
    for (const auto& p : ps) k.emplace_back(p.bucket, p.examples);
    return k;
  };
  EXPECT_EQ(key(all), key(planBucketEpoch(members, 2, false, 9, 0)));
  EXPECT_NE(key(all), key(planBucketEpoch(members, 2, false, 9, 1)));
  EXPECT_NE(key(all), key(planBucketEpoch(members, 2, false, 10, 0)));
  EXPECT_THROW(planBucketEpoch(members, 0, true, 1, 0), std::invalid_argument);
}

}  // namespace
}  // namespace tgc::data
