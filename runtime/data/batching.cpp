#include "runtime/data/batching.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <numeric>
#include <stdexcept>

#include "runtime/data/rng.h"
#include "runtime/data/vocab.h"

namespace tgc::data {

namespace {

int64_t roundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

int64_t len(const std::vector<int64_t>& v) { return static_cast<int64_t>(v.size()); }

}  // namespace

namespace {

// Examples per (source length, target length + 1), the lengths rounded up.
using LengthHistogram = std::map<std::pair<int64_t, int64_t>, int64_t>;

bool byShape(const BucketShape& a, const BucketShape& b) {
  return std::pair(a.srcLen, a.tgtLen) < std::pair(b.srcLen, b.tgtLen);
}

// The padded size (entries of src and tgt per example, summed) when every example goes to
// the smallest bucket that holds it, as Batcher::bucketFor assigns them; nullopt when a
// bucket would get fewer than minCount examples or one holds none of them.
std::optional<int64_t> paddedSize(std::vector<BucketShape> buckets, const LengthHistogram& h,
                                  int64_t minCount) {
  std::sort(buckets.begin(), buckets.end(), byShape);  // the order the Batcher keeps
  std::vector<int64_t> count(buckets.size(), 0);
  int64_t size = 0;
  for (const auto& [len, n] : h) {
    size_t best = buckets.size();
    for (size_t b = 0; b < buckets.size(); ++b) {
      if (len.first > buckets[b].srcLen || len.second > buckets[b].tgtLen) continue;
      if (best == buckets.size() || buckets[b].srcLen * buckets[b].tgtLen <
                                        buckets[best].srcLen * buckets[best].tgtLen)
        best = b;
    }
    if (best == buckets.size()) return std::nullopt;
    count[best] += n;
    size += n * (buckets[best].srcLen + buckets[best].tgtLen);
  }
  for (int64_t c : count)
    if (c < minCount) return std::nullopt;
  return size;
}

}  // namespace

std::vector<BucketShape> chooseBuckets(const std::vector<EncodedPair>& data, int numBuckets,
                                       int64_t lengthMultiple, int64_t minPerBucket) {
  if (numBuckets < 1) throw std::invalid_argument("batching: numBuckets must be at least 1");
  if (lengthMultiple < 1) throw std::invalid_argument("batching: lengthMultiple must be >= 1");
  if (data.empty()) return {};
  LengthHistogram h;
  std::set<int64_t> srcLens, tgtLens;
  for (const auto& e : data) {
    const int64_t s = roundUp(std::max<int64_t>(1, len(e.src)), lengthMultiple);
    const int64_t t = roundUp(len(e.tgt) + 1, lengthMultiple);
    ++h[{s, t}];
    srcLens.insert(s);
    tgtLens.insert(t);
  }
  const int64_t minCount = std::min<int64_t>(minPerBucket, static_cast<int64_t>(data.size()));
  // Greedy: start from the one bucket that holds everything, then add the shape that
  // shrinks the padded size most, as long as one does and buckets remain.
  std::vector<BucketShape> buckets = {{*srcLens.rbegin(), *tgtLens.rbegin()}};
  int64_t size = *paddedSize(buckets, h, 1);
  while (static_cast<int>(buckets.size()) < numBuckets) {
    std::optional<std::pair<int64_t, BucketShape>> best;
    for (int64_t S : srcLens)
      for (int64_t T : tgtLens) {
        const BucketShape cand{S, T};
        if (std::find(buckets.begin(), buckets.end(), cand) != buckets.end()) continue;
        std::vector<BucketShape> trial = buckets;
        trial.push_back(cand);
        const auto padded = paddedSize(trial, h, minCount);
        if (padded && *padded < size && (!best || *padded < best->first)) best = {*padded, cand};
      }
    if (!best) break;
    size = best->first;
    buckets.push_back(best->second);
  }
  std::sort(buckets.begin(), buckets.end(), byShape);
  return buckets;
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
