#include "runtime/data/batching.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <map>
#include <numeric>
#include <stdexcept>

#include "runtime/data/rng.h"
#include "runtime/data/vocab.h"

namespace tgc::data {

namespace {

int64_t roundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

int64_t len(const std::vector<int64_t>& v) { return static_cast<int64_t>(v.size()); }

}  // namespace

std::vector<BucketShape> chooseBuckets(const std::vector<EncodedPair>& data, int numBuckets,
                                       int64_t lengthMultiple, int64_t minPerBucket) {
  if (numBuckets < 1) throw std::invalid_argument("batching: numBuckets must be at least 1");
  if (lengthMultiple < 1) throw std::invalid_argument("batching: lengthMultiple must be >= 1");
  if (data.empty()) return {};
  // Per distinct source length: how many examples, and their longest target.
  std::map<int64_t, std::pair<int64_t, int64_t>> bySrc;  // src length -> (count, max tgt)
  for (const auto& e : data) {
    auto& [count, maxTgt] = bySrc[std::max<int64_t>(1, len(e.src))];
    ++count;
    maxTgt = std::max(maxTgt, len(e.tgt));
  }
  std::vector<int64_t> srcLen, count, maxTgt;
  for (const auto& [s, cm] : bySrc) {
    srcLen.push_back(s);
    count.push_back(cm.first);
    maxTgt.push_back(cm.second);
  }
  const size_t m = srcLen.size();
  const size_t K = std::min(static_cast<size_t>(numBuckets), m);
  auto shapeOf = [&](size_t i, size_t j) {  // distinct lengths i..j
    int64_t t = 0;
    for (size_t k = i; k <= j; ++k) t = std::max(t, maxTgt[k]);
    return BucketShape{roundUp(srcLen[j], lengthMultiple), roundUp(t + 1, lengthMultiple)};
  };
  // best[k][j]: the fewest entries (B-independent: per example S + T) covering lengths
  // 0..j-1 with k buckets, each holding at least minPerBucket examples (the whole data when
  // there are fewer).
  const int64_t minCount = std::min<int64_t>(minPerBucket, static_cast<int64_t>(data.size()));
  constexpr int64_t kInf = INT64_MAX / 4;
  std::vector<std::vector<int64_t>> best(K + 1, std::vector<int64_t>(m + 1, kInf));
  std::vector<std::vector<size_t>> from(K + 1, std::vector<size_t>(m + 1, 0));
  best[0][0] = 0;
  for (size_t k = 1; k <= K; ++k)
    for (size_t j = 1; j <= m; ++j) {
      int64_t n = 0;
      for (size_t i = j; i-- > 0;) {  // the last bucket holds lengths i..j-1
        n += count[i];
        if (n < minCount || best[k - 1][i] >= kInf) continue;
        const BucketShape s = shapeOf(i, j - 1);
        const int64_t cost = best[k - 1][i] + n * (s.srcLen + s.tgtLen);
        if (cost < best[k][j]) best[k][j] = cost, from[k][j] = i;
      }
    }
  size_t bestK = 1;
  for (size_t k = 1; k <= K; ++k)
    if (best[k][m] < best[bestK][m]) bestK = k;
  std::vector<BucketShape> shapes;
  for (size_t k = bestK, j = m; k > 0; --k) {
    const size_t i = from[k][j];
    shapes.push_back(shapeOf(i, j - 1));
    j = i;
  }
  std::reverse(shapes.begin(), shapes.end());
  return shapes;
}

Batcher::Batcher(std::vector<EncodedPair> data, BatchingOptions options,
                 std::vector<BucketShape> buckets)
    : data_(std::move(data)), options_(options), buckets_(std::move(buckets)) {
  if (options_.batchSize < 1) throw std::invalid_argument("batching: batchSize must be >= 1");
  if (buckets_.empty())
    buckets_ = chooseBuckets(data_, options_.numBuckets, options_.lengthMultiple,
                             options_.dropPartial ? options_.batchSize : 1);
  members_.resize(buckets_.size());
  for (size_t i = 0; i < data_.size(); ++i) {
    const int b = bucketFor(len(data_[i].src), len(data_[i].tgt));
    if (b < 0)
      ++droppedTooLong_;
    else
      members_[static_cast<size_t>(b)].push_back(i);
  }
}

int Batcher::bucketFor(int64_t srcLen, int64_t tgtLen) const {
  int best = -1;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const BucketShape& s = buckets_[b];
    if (srcLen > s.srcLen || tgtLen + 1 > s.tgtLen) continue;
    if (best < 0 || s.srcLen * s.tgtLen < buckets_[static_cast<size_t>(best)].srcLen *
                                              buckets_[static_cast<size_t>(best)].tgtLen)
      best = static_cast<int>(b);
  }
  return best;
}

std::vector<BatchPlan> Batcher::planEpoch(uint64_t seed, uint64_t epoch) const {
  Rng rng(mixSeed(mixSeed(seed, 3), epoch));
  const auto B = static_cast<size_t>(options_.batchSize);
  std::vector<BatchPlan> plans;
  for (size_t b = 0; b < members_.size(); ++b) {
    std::vector<size_t> idx = members_[b];
    shuffle(idx, rng);
    for (size_t at = 0; at < idx.size(); at += B) {
      const size_t end = std::min(idx.size(), at + B);
      if (end - at < B && options_.dropPartial) break;
      plans.push_back({static_cast<int>(b), {idx.begin() + static_cast<std::ptrdiff_t>(at),
                                             idx.begin() + static_cast<std::ptrdiff_t>(end)}});
    }
  }
  shuffle(plans, rng);
  return plans;
}

Batch Batcher::makeBatch(const BatchPlan& plan) const {
  if (plan.bucket < 0 || static_cast<size_t>(plan.bucket) >= buckets_.size() ||
      plan.examples.empty() ||
      static_cast<int64_t>(plan.examples.size()) > options_.batchSize)
    throw std::invalid_argument("batching: a plan that does not belong to this batcher");
  const BucketShape& shape = buckets_[static_cast<size_t>(plan.bucket)];
  const int64_t B = options_.batchSize, S = shape.srcLen, T = shape.tgtLen;
  Batch batch;
  batch.bucket = plan.bucket;
  batch.examples = plan.examples;
  batch.rows = static_cast<int64_t>(plan.examples.size());
  batch.src = Tensor(TensorType{DType::i64, {B, S}});  // zero-filled: Vocab::kPad
  batch.tgtIn = Tensor(TensorType{DType::i64, {B, T}});
  batch.tgtOut = Tensor(TensorType{DType::i64, {B, T}});
  int64_t* src = batch.src.as<int64_t>();
  int64_t* tin = batch.tgtIn.as<int64_t>();
  int64_t* tout = batch.tgtOut.as<int64_t>();
  for (int64_t r = 0; r < B; ++r) {
    // Rows past the real ones repeat them: an all-pad row would attend to nothing.
    const EncodedPair& e = data_.at(plan.examples[static_cast<size_t>(r % batch.rows)]);
    if (len(e.src) > S || len(e.tgt) + 1 > T)
      throw std::invalid_argument("batching: an example longer than its bucket");
    std::copy(e.src.begin(), e.src.end(), src + r * S);
    tin[r * T] = Vocab::kBos;
    std::copy(e.tgt.begin(), e.tgt.end(), tin + r * T + 1);
    std::copy(e.tgt.begin(), e.tgt.end(), tout + r * T);
    tout[r * T + len(e.tgt)] = Vocab::kEos;
    if (r < batch.rows) {
      batch.srcTokens += len(e.src);
      batch.tgtTokens += len(e.tgt) + 1;
    }
  }
  return batch;
}

double Batcher::paddingFraction(const std::vector<BatchPlan>& plans) const {
  int64_t slots = 0, real = 0;
  for (const BatchPlan& p : plans) {
    const BucketShape& s = buckets_.at(static_cast<size_t>(p.bucket));
    slots += options_.batchSize * (s.srcLen + s.tgtLen);
    for (size_t i : p.examples) real += len(data_[i].src) + len(data_[i].tgt) + 1;
  }
  return slots == 0 ? 0.0 : 1.0 - static_cast<double>(real) / static_cast<double>(slots);
}

Tensor sourceTensor(const std::vector<std::vector<int64_t>>& sources, int64_t batchSize,
                    int64_t srcLen, bool repeatLast) {
  if (static_cast<int64_t>(sources.size()) > batchSize)
    throw std::invalid_argument(
        fmt::format("batching: {} sources for a batch of {}", sources.size(), batchSize));
  Tensor t(TensorType{DType::i64, {batchSize, srcLen}});
  int64_t* p = t.as<int64_t>();
  for (int64_t r = 0; r < batchSize; ++r) {
    if (sources.empty() || (r >= static_cast<int64_t>(sources.size()) && !repeatLast)) break;
    const auto& s = sources[std::min(static_cast<size_t>(r), sources.size() - 1)];
    if (len(s) > srcLen)
      throw std::invalid_argument(
          fmt::format("batching: a source of {} tokens for length {}", s.size(), srcLen));
    std::copy(s.begin(), s.end(), p + r * srcLen);
  }
  return t;
}

}  // namespace tgc::data
