// The tensors task: safetensors files and shard folders, checks against the graph's inputs,
// the split and TensorBatcher's batches.
#include "runtime/data/tensor_data.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "runtime/data/error.h"
#include "runtime/safetensors.h"
#include "tests/data/temp_dir.h"

namespace tgc::data {
namespace {

// f32 [rows, 3] with x[r][c] = 10·(first + r) + c, i64 [rows] with y[r] = first + r.
TensorFile rowsFile(int64_t first, int64_t rows) {
  TensorFile f;
  Tensor x(TensorType{DType::f32, {rows, 3}}), y(TensorType{DType::i64, {rows}});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < 3; ++c) x.setF(r * 3 + c, static_cast<double>(10 * (first + r) + c));
    y.setI(r, first + r);
  }
  f.tensors.emplace("x", std::move(x));
  f.tensors.emplace("y", std::move(y));
  return f;
}

class TensorFiles : public TempDirTest {
 protected:
  std::string save(const std::string& name, const TensorFile& f) {
    const std::string p = path(name);
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    writeSafetensors(p, f);
    return p;
  }
};

TEST_F(TensorFiles, ReadsAFile) {
  const std::string p = save("d.safetensors", rowsFile(0, 5));
  const TensorData d = readTensorData(p);
  EXPECT_EQ(d.rows, 5);
  EXPECT_EQ(d.source, p);
  ASSERT_EQ(d.tensors.size(), 2u);
  EXPECT_EQ(d.tensors.at("x").type(), (TensorType{DType::f32, {5, 3}}));
  EXPECT_EQ(d.tensors.at("y").getI(4), 4);
  EXPECT_EQ(d.summary, "tensors " + p + ": 5 rows; x f32[5,3], y i64[5]");
}

// Shards in file-name order, concatenated along axis 0; other files are ignored.
TEST_F(TensorFiles, ReadsShardsInNameOrder) {
  save("shards/b.safetensors", rowsFile(2, 3));
  save("shards/a.safetensors", rowsFile(0, 2));
  save("shards/c.safetensors", rowsFile(5, 0));  // an empty shard is fine
  write("shards/README.txt", "not a shard");
  const TensorData d = readTensorData(path("shards"));
  EXPECT_EQ(d.rows, 5);
  for (int64_t r = 0; r < 5; ++r) {
    EXPECT_EQ(d.tensors.at("y").getI(r), r);
    EXPECT_EQ(d.tensors.at("x").getF(r * 3 + 2), 10.0 * static_cast<double>(r) + 2);
  }
  EXPECT_NE(d.summary.find("5 rows in 3 shards"), std::string::npos) << d.summary;
}

TEST_F(TensorFiles, ShardsThatDisagreeAreErrors) {
  const std::string a = save("s1/a.safetensors", rowsFile(0, 2));
  TensorFile missing = rowsFile(2, 2);
  missing.tensors.erase("y");
  const std::string b = save("s1/b.safetensors", missing);
  EXPECT_EQ(errorOf([&] { readTensorData(path("s1")); }), b + ": error: no tensor 'y' (i64[2] in " +
                                                              a +
                                                              "); every shard needs the same "
                                                              "tensors");

  save("s2/a.safetensors", rowsFile(0, 2));
  TensorFile extra = rowsFile(2, 2);
  extra.tensors.emplace("z", Tensor(TensorType{DType::f32, {2}}));
  const std::string e = save("s2/b.safetensors", extra);
  EXPECT_EQ(errorOf([&] { readTensorData(path("s2")); }),
            e + ": error: tensor 'z' (f32[2]) is not in " + path("s2/a.safetensors") +
                "; every shard needs the same tensors");

  save("s3/a.safetensors", rowsFile(0, 2));
  TensorFile dtype = rowsFile(2, 2);
  dtype.tensors.at("y") = Tensor(TensorType{DType::i32, {2}});
  const std::string t = save("s3/b.safetensors", dtype);
  EXPECT_EQ(errorOf([&] { readTensorData(path("s3")); }),
            t + ": error: tensor 'y' is i32[2] here but i64[2] in " + path("s3/a.safetensors") +
                "; shards may differ only along axis 0");

  save("s4/a.safetensors", rowsFile(0, 2));
  TensorFile shape = rowsFile(2, 4);
  shape.tensors.at("x") = Tensor(TensorType{DType::f32, {4, 4}});
  const std::string s = save("s4/b.safetensors", shape);
  EXPECT_EQ(errorOf([&] { readTensorData(path("s4")); }),
            s + ": error: tensor 'x' is f32[4,4] here but f32[2,3] in " + path("s4/a.safetensors") +
                "; shards may differ only along axis 0");
  EXPECT_THROW(readTensorData(path("s4")), DataError);
}

TEST_F(TensorFiles, BadFilesAreErrors) {
  TensorFile rows = rowsFile(0, 3);
  rows.tensors.at("y") = Tensor(TensorType{DType::i64, {4}});
  const std::string r = save("rows.safetensors", rows);
  EXPECT_EQ(errorOf([&] { readTensorData(r); }),
            r + ": error: tensor 'y' has 4 rows (i64[4]) but 'x' has 3 (f32[3,3]); every tensor "
                "needs the same length along axis 0");
  TensorFile scalar;
  scalar.tensors.emplace("s", Tensor(TensorType{DType::f32, {}}));
  const std::string sc = save("scalar.safetensors", scalar);
  EXPECT_EQ(errorOf([&] { readTensorData(sc); }),
            sc + ": error: tensor 's' is a scalar (f32[]); data tensors need axis 0 for the rows");
  const std::string none = save("none.safetensors", TensorFile{});
  EXPECT_EQ(errorOf([&] { readTensorData(none); }), none + ": error: no tensors in the file");
  const std::string zero = save("zero.safetensors", rowsFile(0, 0));
  EXPECT_EQ(errorOf([&] { readTensorData(zero); }), zero + ": error: the tensors have no rows");
  std::filesystem::create_directories(path("empty"));
  EXPECT_EQ(errorOf([&] { readTensorData(path("empty")); }),
            path("empty") + ": error: no *.safetensors files in the folder");
  EXPECT_THROW(readTensorData(path("missing.safetensors")), DataError);

  // Corrupt and truncated files: the safetensors reader's reason, as a DataError.
  const std::string good = encodeSafetensors(rowsFile(0, 4));
  const std::string cut = write("cut.safetensors", good.substr(0, good.size() - 5));
  const std::string cutMsg = errorOf([&] { readTensorData(cut); });
  EXPECT_EQ(cutMsg.rfind(cut + ": error: invalid safetensors file: ", 0), 0u) << cutMsg;
  EXPECT_THROW(readTensorData(cut), DataError);
  const std::string tiny = write("tiny.safetensors", "abc");
  EXPECT_EQ(errorOf([&] { readTensorData(tiny); }).rfind(tiny + ": error: invalid safetensors", 0),
            0u);
  std::string garbled = good;
  garbled[10] = '\x01';  // inside the JSON header
  const std::string g = write("garbled.safetensors", garbled);
  EXPECT_EQ(errorOf([&] { readTensorData(g); }).rfind(g + ": error: invalid safetensors", 0), 0u)
      << errorOf([&] { readTensorData(g); });
  // In a folder, the bad shard is named.
  save("mixed/a.safetensors", rowsFile(0, 2));
  const std::string bad = write("mixed/b.safetensors", good.substr(0, 20));
  EXPECT_EQ(errorOf([&] { readTensorData(path("mixed")); }).rfind(bad + ": error: ", 0), 0u);
}

TEST(TensorFields, CheckedAgainstTheInputs) {
  const TensorData d = tensorDataOf(rowsFile(0, 10).tensors, "d.safetensors");
  // Axis 0 is the batch: any value; tensors no input asks for are fine.
  EXPECT_NO_THROW(checkTensorFields(d, {{"x", TensorType{DType::f32, {16, 3}}}}));
  EXPECT_NO_THROW(checkTensorFields(
      d, {{"x", TensorType{DType::f32, {4, 3}}}, {"y", TensorType{DType::i64, {4}}}}));
  EXPECT_EQ(errorOf([&] {
              checkTensorFields(d, {{"mask", TensorType{DType::f32, {16, 3}}}});
            }),
            "d.safetensors: error: no tensor 'mask' for its input f32[16,3] (the file has x, y)");
  EXPECT_EQ(errorOf([&] {
              checkTensorFields(d, {{"y", TensorType{DType::i32, {16}}}});
            }),
            "d.safetensors: error: tensor 'y' is i64[10] but its input is i32[16]: the dtypes "
            "differ");
  EXPECT_EQ(errorOf([&] {
              checkTensorFields(d, {{"x", TensorType{DType::f32, {16, 3, 1}}}});
            }),
            "d.safetensors: error: tensor 'x' is f32[10,3] but its input is f32[16,3,1]: rank 2, "
            "not 3");
  EXPECT_EQ(errorOf([&] {
              checkTensorFields(d, {{"x", TensorType{DType::f32, {16, 4}}}});
            }),
            "d.safetensors: error: tensor 'x' is f32[10,3] but its input is f32[16,4]: axis 1 is "
            "3, not 4 (axis 0 is the batch and may differ)");
  EXPECT_THROW(checkTensorFields(d, {{"x", TensorType{DType::f32, {}}}}), DataError);
}

TEST(TensorSplit, SeededAndDisjoint) {
  const TensorData d = tensorDataOf(rowsFile(0, 100).tensors, "d");
  const TensorSplit s = splitTensorData(d, 0.2, 7);
  EXPECT_EQ(s.train.rows, 80);
  EXPECT_EQ(s.valid.rows, 20);
  std::set<int64_t> ids;
  std::vector<int64_t> v;
  for (const TensorData* part : {&s.train, &s.valid}) {
    int64_t last = -1;
    for (int64_t r = 0; r < part->rows; ++r) {
      const int64_t y = part->tensors.at("y").getI(r);
      EXPECT_GT(y, last);  // the file's order is kept
      last = y;
      EXPECT_TRUE(ids.insert(y).second);
      EXPECT_EQ(part->tensors.at("x").getF(r * 3 + 1), 10.0 * static_cast<double>(y) + 1);
      if (part == &s.valid) v.push_back(y);
    }
  }
  EXPECT_EQ(ids.size(), 100u);
  const TensorSplit again = splitTensorData(d, 0.2, 7);
  EXPECT_TRUE(again.valid.tensors.at("y").bitwiseEqual(s.valid.tensors.at("y")));
  EXPECT_FALSE(
      splitTensorData(d, 0.2, 8).valid.tensors.at("y").bitwiseEqual(s.valid.tensors.at("y")));
  EXPECT_EQ(splitTensorData(d, 0, 7).valid.rows, 0);
  EXPECT_EQ(splitTensorData(d, 0.001, 7).valid.rows, 1);
  EXPECT_EQ(splitTensorData(d, 1, 7).train.rows, 0);
}

TEST(TensorBatcher, BatchesOfRows) {
  BatchingOptions o;
  o.batchSize = 4;
  const TensorBatcher b(tensorDataOf(rowsFile(0, 10).tensors, "d"), o);
  ASSERT_EQ(b.buckets().size(), 1u);
  EXPECT_EQ(b.buckets()[0], (BucketDims{{"batch", 4}}));
  const auto e0 = b.planEpoch(1, 0);
  ASSERT_EQ(e0.size(), 2u);  // 10 rows: 2 whole batches, 2 rows sit out
  std::set<size_t> seen;
  for (const auto& p : e0) {
    const FieldBatch fb = b.makeBatch(p);
    EXPECT_EQ(fb.fields.at("x").type(), (TensorType{DType::f32, {4, 3}}));
    EXPECT_EQ(fb.fields.at("y").type(), (TensorType{DType::i64, {4}}));
    EXPECT_EQ(fb.rows, 4);
    EXPECT_EQ(fb.dims, (BucketDims{{"batch", 4}}));
    EXPECT_EQ(fb.weight, 4.0);
    for (int64_t r = 0; r < 4; ++r) {
      const size_t i = p.examples[static_cast<size_t>(r)];
      EXPECT_EQ(fb.fields.at("y").getI(r), static_cast<int64_t>(i));
      EXPECT_EQ(fb.fields.at("x").getF(r * 3), 10.0 * static_cast<double>(i));
      seen.insert(i);
    }
  }
  EXPECT_EQ(seen.size(), 8u);
  auto key = [](const std::vector<BatchPlan>& ps) {
    std::vector<std::vector<size_t>> k;
    for (const auto& p : ps) k.push_back(p.examples);
    return k;
  };
  EXPECT_EQ(key(e0), key(b.planEpoch(1, 0)));
  EXPECT_NE(key(e0), key(b.planEpoch(1, 1)));
  EXPECT_NE(key(e0), key(b.planEpoch(2, 0)));
  // Evaluation: every row once; the last batch repeats real rows, which carry no weight.
  o.dropPartial = false;
  const TensorBatcher eval(tensorDataOf(rowsFile(0, 10).tensors, "d"), o);
  const auto plans = eval.planEpoch(0, 0);
  ASSERT_EQ(plans.size(), 3u);
  double weight = 0;
  for (const auto& p : plans) {
    const FieldBatch fb = eval.makeBatch(p);
    weight += fb.weight;
    if (fb.rows == 2) {
      EXPECT_EQ(fb.fields.at("y").getI(2), fb.fields.at("y").getI(0));
      EXPECT_EQ(fb.fields.at("y").getI(3), fb.fields.at("y").getI(1));
    }
  }
  EXPECT_EQ(weight, 10.0);
  EXPECT_THROW(eval.makeBatch({0, {10}}), std::invalid_argument);
  EXPECT_THROW(eval.makeBatch({1, {0}}), std::invalid_argument);
}

}  // namespace
}  // namespace tgc::data
