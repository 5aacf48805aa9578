// Batches of token ids with static shapes, grouped by length to keep padding low.
//
// Each bucket has one shape (S, T), so a training step compiled for it is reused for every
// batch of that bucket. A batch holds i64 tensors
//   src    [B, S]  source ids,            padded with 0 (Vocab::kPad)
//   tgtIn  [B, T]  bos + target ids,      padded with 0
//   tgtOut [B, T]  target ids + eos,      padded with 0
// with T = (longest target in the bucket) + 1. An epoch's order is a pure function of
// (seed, epoch), so a resumed run sees exactly the batches the interrupted one would have.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/tensor.h"
#include "runtime/data/corpus.h"

namespace tgc::data {

struct BucketShape {
  int64_t srcLen = 0;  // S
  int64_t tgtLen = 0;  // T: target tokens + 1 (bos in tgtIn, eos in tgtOut)
  friend bool operator==(const BucketShape&, const BucketShape&) = default;
};

struct BatchingOptions {
  int64_t batchSize = 64;  // B, the same for every bucket
  int numBuckets = 4;      // for chooseBuckets
  int64_t lengthMultiple = 1;  // round S and T up to a multiple of this
  // true (training): a bucket's leftover examples (fewer than B) sit out this epoch; the
  // next epoch's shuffle leaves out others. false (evaluation): the last batch of a bucket
  // is filled up by repeating its own examples, and Batch::rows counts the real ones.
  bool dropPartial = true;
};

// Which examples form one batch, in row order.
struct BatchPlan {
  int bucket = 0;
  std::vector<size_t> examples;  // indices into the data; the batch's real rows
};

struct Batch {
  int bucket = 0;
  Tensor src, tgtIn, tgtOut;
  std::vector<size_t> examples;  // data index of each real row
  int64_t rows = 0;              // real rows (the first `rows` of B)
  int64_t srcTokens = 0, tgtTokens = 0;  // real (non-pad) entries in src and tgtOut
};

// At most numBuckets shapes (S, T) that keep the padded size of the data small, chosen
// greedily: from the one bucket that holds everything, add the shape (among the data's
// source and target lengths) that shrinks the padded size most, with examples assigned as
// Batcher::bucketFor does. Every bucket keeps at least minPerBucket examples, so that with
// whole batches only no bucket is left without one.
std::vector<BucketShape> chooseBuckets(const std::vector<EncodedPair>& data, int numBuckets,
                                       int64_t lengthMultiple = 1, int64_t minPerBucket = 1);

class Batcher {
 public:
  // Buckets chosen from the data when `buckets` is empty. Examples that fit no bucket are
  // left out (droppedTooLong).
  Batcher(std::vector<EncodedPair> data, BatchingOptions options,
          std::vector<BucketShape> buckets = {});

  const std::vector<BucketShape>& buckets() const { return buckets_; }
  const std::vector<EncodedPair>& data() const { return data_; }
  int64_t droppedTooLong() const { return droppedTooLong_; }
  // The smallest bucket (by S·T) that holds a source and a target of these lengths, or -1.
  int bucketFor(int64_t srcLen, int64_t tgtLen) const;

  // The batches of one epoch, shuffled within buckets and then across them. Bucket
  // membership is fixed, so every epoch has the same number of batches.
  std::vector<BatchPlan> planEpoch(uint64_t seed, uint64_t epoch) const;
  Batch makeBatch(const BatchPlan& plan) const;

  // Padding entries / all entries over src and tgtOut of a plan's batches.
  double paddingFraction(const std::vector<BatchPlan>& plans) const;

 private:
  std::vector<EncodedPair> data_;
  BatchingOptions options_;
  std::vector<BucketShape> buckets_;
  std::vector<std::vector<size_t>> members_;  // example indices per bucket
  int64_t droppedTooLong_ = 0;
};

// Source rows for inference, [B, S] padded with 0; rows beyond sources.size() stay padding
// unless `repeatLast` fills them with copies of the last source (never all-pad rows).
Tensor sourceTensor(const std::vector<std::vector<int64_t>>& sources, int64_t batchSize,
                    int64_t srcLen, bool repeatLast = true);

}  // namespace tgc::data
