#include "runtime/data/field_batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "runtime/data/rng.h"

namespace tgc::data {

std::vector<int64_t> chooseLengthBuckets(const std::vector<int64_t>& lengths, int numBuckets,
                                         int64_t lengthMultiple, int64_t minPerBucket) {
  if (numBuckets < 1) throw std::invalid_argument("batching: numBuckets must be at least 1");
  if (lengthMultiple < 1) throw std::invalid_argument("batching: lengthMultiple must be >= 1");
  if (lengths.empty()) return {};
  std::map<int64_t, int64_t> histogram;
  for (int64_t n : lengths) {
    if (n < 1) throw std::invalid_argument("batching: an example of length 0");
    ++histogram[(n + lengthMultiple - 1) / lengthMultiple * lengthMultiple];
  }
  std::vector<int64_t> len, prefix = {0};  // distinct lengths; examples up to each
  for (const auto& [l, c] : histogram) {
    len.push_back(l);
    prefix.push_back(prefix.back() + c);
  }
  const size_t m = len.size();
  const int64_t minCount =
      std::min<int64_t>(std::max<int64_t>(1, minPerBucket), static_cast<int64_t>(lengths.size()));
  const size_t K = std::min(static_cast<size_t>(numBuckets), m);
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  // cost[k][j]: least padded size of the j shortest lengths in k buckets, the last of length
  // len[j-1]; from[k][j]: where that last bucket starts.
  std::vector<std::vector<int64_t>> cost(K + 1, std::vector<int64_t>(m + 1, kNone));
  std::vector<std::vector<size_t>> from(K + 1, std::vector<size_t>(m + 1, 0));
  cost[0][0] = 0;
  for (size_t k = 1; k <= K; ++k)
    for (size_t j = 1; j <= m; ++j)
      for (size_t i = 0; i < j; ++i) {
        const int64_t members = prefix[j] - prefix[i];
        if (cost[k - 1][i] == kNone || members < minCount) continue;
        const int64_t c = cost[k - 1][i] + members * len[j - 1];
        if (c < cost[k][j]) {
          cost[k][j] = c;
          from[k][j] = i;
        }
      }
  size_t bestK = 1;  // one bucket always qualifies: it holds every example
  for (size_t k = 2; k <= K; ++k)
    if (cost[k][m] < cost[bestK][m]) bestK = k;
  std::vector<int64_t> out;
  for (size_t k = bestK, j = m; k > 0; j = from[k][j], --k) out.push_back(len[j - 1]);
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<BatchPlan> planBucketEpoch(const std::vector<std::vector<size_t>>& members,
                                       int64_t batchSize, bool dropPartial, uint64_t seed,
                                       uint64_t epoch) {
  if (batchSize < 1) throw std::invalid_argument("batching: batchSize must be >= 1");
  Rng rng(mixSeed(mixSeed(seed, 3), epoch));
  const auto B = static_cast<size_t>(batchSize);
  std::vector<BatchPlan> plans;
  for (size_t b = 0; b < members.size(); ++b) {
    std::vector<size_t> idx = members[b];
    shuffle(idx, rng);
    for (size_t at = 0; at < idx.size(); at += B) {
      const size_t end = std::min(idx.size(), at + B);
      if (end - at < B && dropPartial) break;
      plans.push_back({static_cast<int>(b),
                       {idx.begin() + static_cast<std::ptrdiff_t>(at),
                        idx.begin() + static_cast<std::ptrdiff_t>(end)}});
    }
  }
  shuffle(plans, rng);
  return plans;
}

LengthBuckets::LengthBuckets(const std::vector<int64_t>& lengths, const BatchingOptions& options,
                             std::vector<BucketDims> buckets, std::string_view task,
                             std::string_view tooShort)
    : task_(task),
      batchSize_(options.batchSize),
      dropPartial_(options.dropPartial),
      buckets_(std::move(buckets)) {
  if (batchSize_ < 1) throw std::invalid_argument("batching: batchSize must be >= 1");
  for (int64_t n : lengths)
    if (n < 1) throw std::invalid_argument(fmt::format("{} batching: {}", task_, tooShort));
  if (buckets_.empty())
    for (int64_t L : chooseLengthBuckets(lengths, options.numBuckets, options.lengthMultiple,
                                         dropPartial_ ? batchSize_ : 1))
      buckets_.push_back({{"batch", batchSize_}, {"length", L}});
  for (const BucketDims& b : buckets_) {
    const auto batch = b.find("batch"), length = b.find("length");
    if (length == b.end() || length->second < 1 ||
        (batch != b.end() && batch->second != batchSize_))
      throw std::invalid_argument(fmt::format(
          "{} batching: a bucket needs a length >= 1 and the batcher's batch size", task_));
    lengths_.push_back(length->second);
  }
  members_.resize(buckets_.size());
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int b = bucketFor(lengths[i]);
    if (b < 0)
      ++droppedTooLong_;
    else
      members_[static_cast<size_t>(b)].push_back(i);
  }
}

int LengthBuckets::bucketFor(int64_t n) const {
  int best = -1;
  for (size_t b = 0; b < lengths_.size(); ++b)
    if (n <= lengths_[b] && (best < 0 || lengths_[b] < lengths_[static_cast<size_t>(best)]))
      best = static_cast<int>(b);
  return best;
}

std::vector<BatchPlan> LengthBuckets::planEpoch(uint64_t seed, uint64_t epoch) const {
  return planBucketEpoch(members_, batchSize_, dropPartial_, seed, epoch);
}

FieldBatch LengthBuckets::startBatch(const BatchPlan& plan) const {
  if (plan.bucket < 0 || static_cast<size_t>(plan.bucket) >= buckets_.size() ||
      plan.examples.empty() || static_cast<int64_t>(plan.examples.size()) > batchSize_)
    throw std::invalid_argument(
        fmt::format("{} batching: a plan that does not belong to this batcher", task_));
  FieldBatch batch;
  batch.bucket = plan.bucket;
  batch.dims = buckets_[static_cast<size_t>(batch.bucket)];
  batch.examples = plan.examples;
  batch.rows = static_cast<int64_t>(plan.examples.size());
  return batch;
}

}  // namespace tgc::data
