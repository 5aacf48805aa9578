#include "runtime/data/tensor_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <stdexcept>

#include "runtime/data/error.h"
#include "runtime/data/rng.h"
#include "runtime/safetensors.h"

namespace tgc::data {

namespace {

namespace fs = std::filesystem;

// The shape without axis 0.
Shape trailing(const Shape& s) { return Shape(s.begin() + 1, s.end()); }

size_t rowBytes(const Tensor& t) {
  size_t n = dtypeSize(t.dtype());
  for (size_t i = 1; i < t.shape().size(); ++i) n *= static_cast<size_t>(t.shape()[i]);
  return n;
}

// Every tensor has a row axis and the same number of rows; returns that number.
int64_t checkRows(const std::map<std::string, Tensor>& tensors, const std::string& source) {
  if (tensors.empty()) throw DataError(fmt::format("{}: error: no tensors in the file", source));
  const std::string* first = nullptr;
  int64_t rows = 0;
  for (const auto& [name, t] : tensors) {
    if (t.shape().empty())
      throw DataError(fmt::format(
          "{}: error: tensor '{}' is a scalar ({}); data tensors need axis 0 for the rows", source,
          name, t.type().str()));
    if (!first) {
      first = &name;
      rows = t.shape()[0];
    } else if (t.shape()[0] != rows) {
      throw DataError(fmt::format(
          "{}: error: tensor '{}' has {} rows ({}) but '{}' has {} ({}); every tensor needs "
          "the same length along axis 0",
          source, name, t.shape()[0], t.type().str(), *first, rows,
          tensors.at(*first).type().str()));
    }
  }
  return rows;
}

std::string summaryOf(const TensorData& d, size_t shards) {
  std::string types;
  for (const auto& [name, t] : d.tensors)
    types += fmt::format("{}{} {}", types.empty() ? "" : ", ", name, t.type().str());
  return fmt::format("tensors {}: {} rows{}; {}", d.source, d.rows,
                     shards > 1 ? fmt::format(" in {} shards", shards) : std::string(), types);
}

TensorFile readShard(const std::string& path) {
  try {
    return readSafetensors(path);
  } catch (const SafetensorsError& e) {
    throw DataError(e.what());
  }
}

}  // namespace

TensorData tensorDataOf(std::map<std::string, Tensor> tensors, std::string source) {
  TensorData d;
  d.rows = checkRows(tensors, source);
  if (d.rows == 0) throw DataError(fmt::format("{}: error: the tensors have no rows", source));
  d.tensors = std::move(tensors);
  d.source = std::move(source);
  d.summary = summaryOf(d, 1);
  return d;
}

TensorData readTensorData(const std::string& pathOrDir) {
  std::error_code ec;
  if (!fs::is_directory(pathOrDir, ec))
    return tensorDataOf(readShard(pathOrDir).tensors, pathOrDir);
  std::vector<fs::path> shards;
  for (const fs::directory_entry& e : fs::directory_iterator(pathOrDir, ec))
    if (e.path().extension() == ".safetensors" && e.is_regular_file(ec)) shards.push_back(e.path());
  if (ec)
    throw DataError(fmt::format("{}: error: cannot list the folder: {}", pathOrDir, ec.message()));
  if (shards.empty())
    throw DataError(fmt::format("{}: error: no *.safetensors files in the folder", pathOrDir));
  std::sort(shards.begin(), shards.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  std::vector<std::map<std::string, Tensor>> parts;
  parts.reserve(shards.size());
  const std::string first = shards[0].string();
  int64_t rows = 0;
  for (const fs::path& p : shards) {
    const std::string path = p.string();
    std::map<std::string, Tensor> t = readShard(path).tensors;
    rows += checkRows(t, path);
    if (!parts.empty()) {
      const auto& ref = parts.front();
      for (const auto& [name, r] : ref) {
        const auto it = t.find(name);
        if (it == t.end())
          throw DataError(
              fmt::format("{}: error: no tensor '{}' ({} in {}); every shard needs "
                          "the same tensors",
                          path, name, r.type().str(), first));
        if (it->second.dtype() != r.dtype() || trailing(it->second.shape()) != trailing(r.shape()))
          throw DataError(fmt::format(
              "{}: error: tensor '{}' is {} here but {} in {}; shards may differ only along "
              "axis 0",
              path, name, it->second.type().str(), r.type().str(), first));
      }
      for (const auto& [name, x] : t)
        if (!ref.count(name))
          throw DataError(
              fmt::format("{}: error: tensor '{}' ({}) is not in {}; every shard "
                          "needs the same tensors",
                          path, name, x.type().str(), first));
    }
    parts.push_back(std::move(t));
  }
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, r] : parts.front()) {
    Shape shape = r.shape();
    shape[0] = rows;
    Tensor all = Tensor::uninitialized(TensorType{r.dtype(), shape});
    auto* out = static_cast<unsigned char*>(all.data());
    for (const auto& part : parts) {
      const Tensor& t = part.at(name);
      if (t.nbytes()) std::memcpy(out, t.data(), t.nbytes());
      out += t.nbytes();
    }
    tensors.emplace(name, std::move(all));
  }
  parts.clear();
  TensorData d = tensorDataOf(std::move(tensors), pathOrDir);
  d.summary = summaryOf(d, shards.size());
  return d;
}

void checkTensorFields(const TensorData& data, const std::map<std::string, TensorType>& expected) {
  for (const auto& [name, want] : expected) {
    if (want.shape.empty())
      throw DataError(
          fmt::format("{}: error: input '{}' is a scalar ({}); a tensors field needs "
                      "axis 0 for the batch",
                      data.source, name, want.str()));
    const auto it = data.tensors.find(name);
    if (it == data.tensors.end()) {
      std::string names;
      for (const auto& [n, t] : data.tensors) names += (names.empty() ? "" : ", ") + n;
      throw DataError(fmt::format("{}: error: no tensor '{}' for its input {} (the file has {})",
                                  data.source, name, want.str(), names));
    }
    const TensorType& have = it->second.type();
    std::string why;
    if (have.dtype != want.dtype) {
      why = "the dtypes differ";
    } else if (have.shape.size() != want.shape.size()) {
      why = fmt::format("rank {}, not {}", have.shape.size(), want.shape.size());
    } else {
      for (size_t a = 1; a < want.shape.size() && why.empty(); ++a)
        if (have.shape[a] != want.shape[a])
          why = fmt::format("axis {} is {}, not {} (axis 0 is the batch and may differ)", a,
                            have.shape[a], want.shape[a]);
    }
    if (!why.empty())
      throw DataError(fmt::format("{}: error: tensor '{}' is {} but its input is {}: {}",
                                  data.source, name, have.str(), want.str(), why));
  }
}

TensorData selectRows(const TensorData& data, const std::vector<size_t>& rows) {
  TensorData d;
  d.source = data.source;
  d.rows = static_cast<int64_t>(rows.size());
  for (size_t r : rows)
    if (r >= static_cast<size_t>(data.rows))
      throw std::invalid_argument(fmt::format("tensor data: row {} of {}", r, data.rows));
  for (const auto& [name, t] : data.tensors) {
    Shape shape = t.shape();
    shape[0] = d.rows;
    Tensor out = Tensor::uninitialized(TensorType{t.dtype(), shape});
    const size_t n = rowBytes(t);
    const auto* src = static_cast<const unsigned char*>(t.data());
    auto* dst = static_cast<unsigned char*>(out.data());
    for (size_t i = 0; i < rows.size() && n; ++i) std::memcpy(dst + i * n, src + rows[i] * n, n);
    d.tensors.emplace(name, std::move(out));
  }
  d.summary = summaryOf(d, 1);
  return d;
}

TensorSplit splitTensorData(const TensorData& data, double validFraction, uint64_t seed) {
  const auto n = static_cast<size_t>(data.rows);
  size_t valid = 0;
  if (validFraction >= 1)
    valid = n;
  else if (validFraction > 0 && n > 1)
    valid = std::clamp<size_t>(
        static_cast<size_t>(std::llround(validFraction * static_cast<double>(n))), 1, n - 1);
  std::vector<size_t> perm(n);
  std::iota(perm.begin(), perm.end(), size_t{0});
  Rng rng(mixSeed(seed, 47));
  shuffle(perm, rng);
  std::vector<size_t> v(perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(valid));
  std::vector<size_t> t(perm.begin() + static_cast<std::ptrdiff_t>(valid), perm.end());
  std::sort(v.begin(), v.end());
  std::sort(t.begin(), t.end());
  TensorSplit s{selectRows(data, t), selectRows(data, v)};
  s.train.summary = fmt::format("{} ({} train, {} valid)", summaryOf(data, 1), t.size(), v.size());
  s.valid.summary = summaryOf(s.valid, 1);
  return s;
}

TensorBatcher::TensorBatcher(TensorData data, BatchingOptions options)
    : data_(std::move(data)), options_(options) {
  if (options_.batchSize < 1) throw std::invalid_argument("batching: batchSize must be >= 1");
  buckets_ = {{{"batch", options_.batchSize}}};
  members_.resize(1);
  members_[0].resize(static_cast<size_t>(data_.rows));
  std::iota(members_[0].begin(), members_[0].end(), size_t{0});
}

std::vector<BatchPlan> TensorBatcher::planEpoch(uint64_t seed, uint64_t epoch) const {
  return planBucketEpoch(members_, options_.batchSize, options_.dropPartial, seed, epoch);
}

FieldBatch TensorBatcher::makeBatch(const BatchPlan& plan) const {
  if (plan.bucket != 0 || plan.examples.empty() ||
      static_cast<int64_t>(plan.examples.size()) > options_.batchSize)
    throw std::invalid_argument("tensor batching: a plan that does not belong to this batcher");
  for (size_t r : plan.examples)
    if (r >= static_cast<size_t>(data_.rows))
      throw std::invalid_argument("tensor batching: a plan that does not belong to this batcher");
  const int64_t B = options_.batchSize;
  const size_t real = plan.examples.size();
  std::vector<size_t> rows(static_cast<size_t>(B));
  for (size_t r = 0; r < rows.size(); ++r) rows[r] = plan.examples[r % real];
  FieldBatch batch;
  batch.bucket = 0;
  batch.dims = buckets_[static_cast<size_t>(batch.bucket)];
  batch.examples = plan.examples;
  batch.rows = static_cast<int64_t>(real);
  batch.tokens = batch.rows;
  batch.weight = static_cast<double>(batch.rows);
  batch.fields = selectRows(data_, rows).tensors;
  return batch;
}

}  // namespace tgc::data
