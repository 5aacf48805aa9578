// The batch every task's batcher makes: tensors by task field name, with the task dims of its
// bucket. The trainer feeds fields to graph inputs and dims to named dims through the
// model's `bind` declaration (docs/language.md), so it needs to know nothing else of a task.
//
// Every batcher (LmBatcher, ClassifyBatcher, TensorBatcher) has
//   const std::vector<BucketDims>& buckets() const;    // one compiled step per bucket
//   std::vector<BatchPlan> planEpoch(uint64_t seed, uint64_t epoch) const;
//   FieldBatch makeBatch(const BatchPlan&) const;
// An epoch's order is a pure function of (seed, epoch): examples are shuffled within their
// bucket, cut into batches, and the batches shuffled across buckets (as Batcher does), so a
// resumed run sees exactly the batches the interrupted one would have.
// BatchingOptions::dropPartial = true (training): a bucket's leftover examples (fewer than a
// batch) sit out the epoch, and the next epoch's shuffle leaves out others. false
// (evaluation): every example is in one batch, and the last batch of a bucket is filled with
// rows that carry no weight (see each batcher); `rows` counts the real ones.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ir/tensor.h"
#include "runtime/data/batching.h"

namespace tgc::data {

// The task dims of one bucket: "batch", "length", ... (each task's table in docs/language.md).
using BucketDims = std::map<std::string, int64_t>;

struct FieldBatch {
  int bucket = 0;                        // index into the batcher's buckets()
  std::map<std::string, Tensor> fields;  // by task field name
  std::vector<size_t> examples;          // data index of each real row
  int64_t rows = 0;                      // real rows (the first `rows` of the batch)
  int64_t tokens = 0;                    // real (non-pad) input tokens, or rows for tensors
  // What the loss averages over: real target tokens (lm), real rows (classification,
  // tensors). Weight-averaged losses over batches give the split's mean loss.
  double weight = 0;
  // The task dims of the batch's shape (buckets()[bucket]), which set the graph's named dims.
  BucketDims dims;
};

// At most numBuckets lengths for examples of these lengths (each rounded up to a multiple of
// lengthMultiple), ascending, the last the longest example's: chosen by dynamic programming
// to minimize the padded size (sum over examples of the length of the shortest bucket that
// holds it), every bucket holding at least min(minPerBucket, examples) examples; of equal
// sizes the fewer buckets. Empty for no examples. Lengths must be >= 1.
std::vector<int64_t> chooseLengthBuckets(const std::vector<int64_t>& lengths, int numBuckets,
                                         int64_t lengthMultiple = 1, int64_t minPerBucket = 1);

// The batches of one epoch over examples grouped into buckets (members[b]: data indices of
// bucket b), as every batcher plans them: shuffled within buckets, cut into batches of
// batchSize (the last partial one dropped or kept, by dropPartial), shuffled across buckets.
std::vector<BatchPlan> planBucketEpoch(const std::vector<std::vector<size_t>>& members,
                                       int64_t batchSize, bool dropPartial, uint64_t seed,
                                       uint64_t epoch);

// The length buckets of the token batchers (LmBatcher, ClassifyBatcher): BucketDims
// {"batch": batchSize, "length": L}, given or chosen by chooseLengthBuckets from the
// examples' lengths, each example in the shortest bucket that holds it, and their epochs.
class LengthBuckets {
 public:
  // lengths[i]: the length of example i. `buckets` fixes the shapes (empty: at most
  // options.numBuckets chosen from the lengths, with options.lengthMultiple, every one
  // holding at least a batch when options.dropPartial); examples that fit none are left out
  // (droppedTooLong). Throws std::invalid_argument for batchSize < 1, a length below 1
  // ("<task> batching: <tooShort>"), or a bucket without a length >= 1 or whose "batch" is
  // not batchSize ("<task> batching: a bucket needs ...").
  LengthBuckets(const std::vector<int64_t>& lengths, const BatchingOptions& options,
                std::vector<BucketDims> buckets, std::string_view task,
                std::string_view tooShort);

  const std::vector<BucketDims>& buckets() const { return buckets_; }
  int64_t droppedTooLong() const { return droppedTooLong_; }
  int64_t length(int bucket) const { return lengths_.at(static_cast<size_t>(bucket)); }
  int bucketFor(int64_t n) const;  // the shortest bucket whose length holds n, or -1

  std::vector<BatchPlan> planEpoch(uint64_t seed, uint64_t epoch) const;

  // The batch of a plan with what every batcher sets (bucket, dims, examples, rows), its
  // fields and counts left to the batcher. Throws std::invalid_argument ("<task> batching: a
  // plan that does not belong to this batcher") for a bucket out of range, no examples or
  // more than a batch of them.
  FieldBatch startBatch(const BatchPlan& plan) const;

 private:
  std::string task_;
  int64_t batchSize_ = 1;
  bool dropPartial_ = true;
  std::vector<BucketDims> buckets_;
  std::vector<int64_t> lengths_;              // "length" of each bucket
  std::vector<std::vector<size_t>> members_;  // example indices per bucket
  int64_t droppedTooLong_ = 0;
};

}  // namespace tgc::data
