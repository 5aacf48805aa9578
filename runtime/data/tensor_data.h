// The tensors task: a safetensors file, or a folder of shards, whose tensors are named after
// the graph's data inputs. Axis 0 of every tensor is the row (example) axis; batches take
// rows, shuffled per epoch from the seed. This feeds any model: float features, masks,
// integer targets.
//
// Reading goes through tgc_runtime's safetensors reader (runtime/safetensors.h), which
// refuses a corrupt or truncated file with its reason; tgc_data links tgc_runtime for it
// (tgc_runtime links no tgc_data, and neither links LLVM). Every error is a DataError that
// names the file and, where one is at fault, the tensor and both types.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/tensor.h"
#include "runtime/data/batching.h"
#include "runtime/data/field_batch.h"

namespace tgc::data {

struct TensorData {
  std::map<std::string, Tensor> tensors;  // every one has `rows` along axis 0
  int64_t rows = 0;
  std::string summary;  // one line for logs: rows, shards, each tensor's type
  std::string source;   // the file or folder, for messages
};

// A safetensors file, or a folder whose `*.safetensors` files (sorted by file name; other
// files and subfolders are ignored) are shards concatenated along axis 0. Every shard must
// hold the same tensor names with the same dtypes and trailing shapes (the error names the
// shard, the tensor and both types), every tensor of a file the same number of rows (rank 0
// is refused), and there must be at least one row. The file's metadata is not used.
TensorData readTensorData(const std::string& pathOrDir);

// Tensors already in memory (tests, generated data), checked as readTensorData checks a
// file; `source` names them in messages.
TensorData tensorDataOf(std::map<std::string, Tensor> tensors, std::string source);

// Checks the tensors against the graph inputs they feed, by name: a missing tensor, a dtype,
// a rank or a dim after axis 0 that differs is a DataError naming the tensor and both types,
// e.g. "data.safetensors: error: tensor 'x' is f32[100,4] but its input is f32[16,3]: axis 1
// is 4, not 3 (axis 0 is the batch and may differ)". Axis 0 of each expected type is the
// batch and is not compared; tensors no input asks for are fine (they are not fed).
void checkTensorFields(const TensorData& data, const std::map<std::string, TensorType>& expected);

// The rows `rows` of every tensor, in that order (indices < data.rows).
TensorData selectRows(const TensorData& data, const std::vector<size_t>& rows);

struct TensorSplit {
  TensorData train, valid;
};

// A seeded permutation of the rows picks round(validFraction · rows) validation rows (at
// least one and at most all but one when 0 < validFraction < 1; none at 0; all at 1); each
// split keeps the file's row order.
TensorSplit splitTensorData(const TensorData& data, double validFraction, uint64_t seed);

// Batches of rows: one bucket, BucketDims {"batch": batchSize}; every tensor is a field of
// shape [batchSize, trailing dims...]. FieldBatch::tokens and weight are the real rows; the
// rows that fill up the last batch (dropPartial = false) repeat real rows. numBuckets and
// lengthMultiple are not used. With dropPartial and fewer rows than a batch, an epoch is
// empty.
class TensorBatcher {
 public:
  TensorBatcher(TensorData data, BatchingOptions options);

  const std::vector<BucketDims>& buckets() const { return buckets_; }
  const TensorData& data() const { return data_; }
  const BatchingOptions& options() const { return options_; }

  std::vector<BatchPlan> planEpoch(uint64_t seed, uint64_t epoch) const;
  FieldBatch makeBatch(const BatchPlan& plan) const;

 private:
  TensorData data_;
  BatchingOptions options_;
  std::vector<BucketDims> buckets_;
  std::vector<std::vector<size_t>> members_;  // one bucket: every row
};

}  // namespace tgc::data
