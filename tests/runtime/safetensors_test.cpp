#include "runtime/safetensors.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "tests/tools/subprocess.h"

namespace tgc {
namespace {

using testing::TempDir;
using StringMap = std::map<std::string, std::string>;

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return s;
}

// A file from a literal header and data section.
std::string rawFile(std::string_view header, std::string_view data = "") {
  return le64(header.size()) + std::string(header) + std::string(data);
}

// Random bytes in every element (so NaN payloads, subnormals and signed zeros are covered);
// bool elements are 0 or 1.
Tensor patterned(TensorType type, uint64_t seed) {
  Tensor t(std::move(type));
  std::mt19937_64 rng(seed);
  auto* p = static_cast<unsigned char*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i)
    p[i] = static_cast<unsigned char>(t.dtype() == DType::boolean ? rng() & 1 : rng() & 0xFF);
  return t;
}

// Decoding `bytes` must fail with a SafetensorsError naming the source and containing `needle`.
void expectInvalid(std::string_view bytes, std::string_view needle) {
  try {
    decodeSafetensors(bytes, "bad.safetensors");
    ADD_FAILURE() << "decoded without error; expected: " << needle;
  } catch (const SafetensorsError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("bad.safetensors: error: invalid safetensors file: "), std::string::npos)
        << msg;
    EXPECT_NE(msg.find(needle), std::string::npos)
        << "message: " << msg << "\nexpected: " << needle;
  }
}

void expectSameFile(const TensorFile& a, const TensorFile& b) {
  EXPECT_EQ(a.metadata, b.metadata);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    auto it = b.tensors.find(name);
    ASSERT_NE(it, b.tensors.end()) << name;
    EXPECT_TRUE(t.bitwiseEqual(it->second))
        << name << ": " << t.type().str() << " vs " << it->second.type().str();
  }
}

TensorFile everyDType() {
  TensorFile f;
  uint64_t seed = 1;
  for (DType d : kAllDTypes) {
    std::string n(dtypeName(d));
    f.tensors.emplace(n + ".matrix", patterned({d, {3, 5}}, seed++));
    f.tensors.emplace(n + ".scalar", patterned({d, {}}, seed++));
    f.tensors.emplace(n + ".empty", patterned({d, {2, 0, 4}}, seed++));
    f.tensors.emplace(n + ".odd", patterned({d, {7}}, seed++));  // leaves later tensors unaligned
  }
  return f;
}

TEST(SafetensorsTest, DTypeNamesRoundTrip) {
  for (DType d : kAllDTypes) EXPECT_EQ(parseSafetensorsDType(safetensorsDTypeName(d)), d);
  EXPECT_EQ(safetensorsDTypeName(DType::boolean), "BOOL");
  EXPECT_EQ(safetensorsDTypeName(DType::bf16), "BF16");
  EXPECT_FALSE(parseSafetensorsDType("U8"));
  EXPECT_FALSE(parseSafetensorsDType("f32"));  // the format's names are upper case
}

TEST(SafetensorsTest, InMemoryRoundTripIsBitwiseForEveryDType) {
  TensorFile f = everyDType();
  f.metadata = {
      {"step", "1200"}, {"config", "{\"d_model\": 512}"}, {"empty", ""}, {"unicode", "三千零五"}};
  TensorFile g = decodeSafetensors(encodeSafetensors(f));
  expectSameFile(f, g);
  EXPECT_EQ(g.tensors.at("f32.scalar").shape(), Shape{});
  EXPECT_EQ(g.tensors.at("i64.empty").shape(), (Shape{2, 0, 4}));
  // Encoding is canonical: the same content gives the same bytes.
  EXPECT_EQ(encodeSafetensors(f), encodeSafetensors(g));
}

TEST(SafetensorsTest, EmptyFileHasOnlyAHeader) {
  std::string bytes = encodeSafetensors({});
  EXPECT_EQ(bytes, le64(8) + "{}      ");
  TensorFile g = decodeSafetensors(bytes);
  EXPECT_TRUE(g.tensors.empty());
  EXPECT_TRUE(g.metadata.empty());
}

TEST(SafetensorsTest, LayoutIsPaddedSortedAndContiguous) {
  TensorFile f;
  f.tensors.emplace("zeta", Tensor({DType::f32, {2}}, {1.0, 2.0}));
  f.tensors.emplace("alpha", Tensor({DType::boolean, {3}}, {1, 0, 1}));
  f.tensors.emplace("mid", Tensor({DType::i64, {}}, {-5}));
  f.metadata["k"] = "v";
  std::string bytes = encodeSafetensors(f);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find_last_not_of(' ') + 1, header.find(' ', header.rfind('}')));
  auto h = nlohmann::json::parse(header);
  EXPECT_EQ(h["__metadata__"], nlohmann::json({{"k", "v"}}));
  EXPECT_EQ(h["alpha"]["dtype"], "BOOL");
  EXPECT_EQ(h["alpha"]["shape"], nlohmann::json({3}));
  EXPECT_EQ(h["alpha"]["data_offsets"], nlohmann::json({0, 3}));
  EXPECT_EQ(h["mid"]["data_offsets"], nlohmann::json({3, 11}));
  EXPECT_EQ(h["zeta"]["data_offsets"], nlohmann::json({11, 19}));
  EXPECT_EQ(bytes.size(), 8 + n + 19);
  // The data section: 1,0,1 then -5 as i64 then 1.0f, 2.0f, all little-endian.
  std::string data = bytes.substr(8 + n);
  EXPECT_EQ(data.substr(0, 3), std::string("\x01\x00\x01", 3));
  EXPECT_EQ(data.substr(3, 8), std::string("\xfb\xff\xff\xff\xff\xff\xff\xff", 8));
  EXPECT_EQ(data.substr(11, 8), std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8));
}

TEST(SafetensorsTest, ReadsOtherWritersLayouts) {
  // Data in an order other than by name, a zero-size tensor sharing an offset, no padding,
  // fields in another order, extra whitespace: all valid.
  std::string header =
      R"({ "b": {"shape": [2], "dtype": "I32", "data_offsets": [0, 8]},
           "e": {"dtype": "F64", "shape": [0], "data_offsets": [8, 8]},
           "a": {"data_offsets": [8, 10], "dtype": "F16", "shape": []},
           "__metadata__": {"format": "pt"} })";
  std::string data("\x07\x00\x00\x00\xfe\xff\xff\xff\x00\x3c", 10);
  TensorFile f = decodeSafetensors(rawFile(header, data));
  ASSERT_EQ(f.tensors.size(), 3u);
  EXPECT_EQ(f.tensors.at("b").getI(0), 7);
  EXPECT_EQ(f.tensors.at("b").getI(1), -2);
  EXPECT_EQ(f.tensors.at("a").getF(0), 1.0);
  EXPECT_EQ(f.tensors.at("e").numel(), 0);
  EXPECT_EQ(f.metadata.at("format"), "pt");
}

TEST(SafetensorsTest, RefusesShortFiles) {
  expectInvalid("", "the file is 0 bytes, shorter than the 8-byte header length");
  expectInvalid(std::string("\x02\x00\x00", 3), "the file is 3 bytes");
}

TEST(SafetensorsTest, RefusesHeaderLengthBeyondTheFile) {
  expectInvalid(le64(50) + "{}", "header length 50 runs past the end of the file (2 bytes");
  expectInvalid(le64(~0ull), "is larger than the limit of 100000000 bytes");
  expectInvalid(le64(100'000'001) + "{}", "header length 100000001 is larger than the limit");
}

TEST(SafetensorsTest, RefusesHeadersThatAreNotJsonObjects) {
  expectInvalid(rawFile(""), "header is not valid JSON");
  expectInvalid(rawFile("{\"a\": "), "header is not valid JSON");
  expectInvalid(rawFile("{} trailing"), "header is not valid JSON");
  expectInvalid(rawFile("\xff\xfe{}"), "header is not valid JSON");
  // The bytes the parser quotes are escaped: no control bytes or broken UTF-8 in a message.
  expectInvalid(rawFile("{\"a\":\x93\x01}"), "last read: '\"a\":\\x93'");
  expectInvalid(rawFile("[1, 2]"), "header is JSON array, not an object");
  expectInvalid(rawFile("\"x\""), "header is JSON string, not an object");
  // Deep nesting is refused as a non-object without exhausting the stack.
  expectInvalid(rawFile(std::string(200000, '[') + std::string(200000, ']')),
                "header is JSON array");
}

TEST(SafetensorsTest, RefusesBadEntries) {
  expectInvalid(rawFile(R"({"a": 3})"), "tensor 'a': entry is number, expected an object");
  expectInvalid(rawFile(R"({"a": {"dtype": "F32", "shape": []}})"),
                "tensor 'a': missing field 'data_offsets'");
  expectInvalid(rawFile(R"({"a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4],
                              "offsets": 1}})",
                        "\0\0\0\0"),
                "tensor 'a': unknown field 'offsets'");
  expectInvalid(rawFile(R"({"a": {"dtype": 1, "shape": [], "data_offsets": [0, 4]}})"),
                "tensor 'a': dtype is number, expected a string");
  expectInvalid(rawFile(R"({"a": {"dtype": "F32", "shape": 3, "data_offsets": [0, 4]}})"),
                "tensor 'a': shape is number, expected an array");
}

TEST(SafetensorsTest, RefusesUnknownDTypes) {
  expectInvalid(
      rawFile(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})", "x"),
      "tensor 'w': unsupported dtype 'U8' (tgc reads F32, F64, BF16, F16, I32, I64, BOOL)");
  expectInvalid(rawFile(R"({"w": {"dtype": "f32", "shape": [1], "data_offsets": [0, 4]}})"),
                "unsupported dtype 'f32'");
}

TEST(SafetensorsTest, RefusesBadShapes) {
  expectInvalid(rawFile(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}})"),
                "tensor 'w': shape [-1] has an entry that is not a non-negative integer");
  expectInvalid(rawFile(R"({"w": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}})"),
                "shape [2.0] has an entry that is not a non-negative integer");
  expectInvalid(rawFile(R"({"w": {"dtype": "F32", "shape": ["2"], "data_offsets": [0, 8]}})"),
                "not a non-negative integer");
  expectInvalid(
      rawFile(R"({"w": {"dtype": "F32", "shape": [9223372036854775808], "data_offsets": [0, 0]}})"),
      "not a non-negative integer");
  // 2^62 * 4 elements overflow int64; 2^61 * 2 elements fit but not as F32 bytes.
  expectInvalid(
      rawFile(
          R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}})"),
      "tensor 'w': shape [4611686018427387904,4] has too many elements");
  expectInvalid(
      rawFile(
          R"({"w": {"dtype": "F32", "shape": [2305843009213693952, 2], "data_offsets": [0, 0]}})"),
      "has too many bytes");
}

TEST(SafetensorsTest, RefusesOffsetsThatDoNotMatchTheType) {
  expectInvalid(rawFile(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 8]}})",
                        std::string(8, '\0')),
                "tensor 'w': data_offsets [0,8] span 8 bytes but F32 [2,3] needs 24");
  expectInvalid(rawFile(R"({"w": {"dtype": "F32", "shape": [], "data_offsets": [4, 0]}})"),
                "data_offsets [4,0] end before they begin");
  expectInvalid(rawFile(R"({"w": {"dtype": "F32", "shape": [], "data_offsets": [0]}})"),
                "data_offsets [0] is not a pair [begin, end]");
  expectInvalid(rawFile(R"({"w": {"dtype": "F32", "shape": [], "data_offsets": [-4, 0]}})"),
                "data_offsets [-4,0] are not non-negative integers");
}

TEST(SafetensorsTest, RefusesOffsetsOutOfBounds) {
  expectInvalid(rawFile(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                        std::string(4, '\0')),
                "tensor 'w': data_offsets [0,8] run past the end of the data section (4 bytes)");
  // A header that lies about sizes far beyond the file is refused before allocating anything.
  expectInvalid(rawFile(R"({"w": {"dtype": "F64", "shape": [1000000000],
                               "data_offsets": [0, 8000000000]}})"),
                "run past the end of the data section (0 bytes)");
}

TEST(SafetensorsTest, RefusesOverlapsAndGaps) {
  std::string data(12, '\0');
  expectInvalid(rawFile(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                            "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                        data),
                "tensor 'b' at bytes [4, 12) overlaps tensor 'a' at [0, 8)");
  expectInvalid(rawFile(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                            "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                        std::string(8, '\0')),
                "overlaps tensor");
  // A zero-size tensor placed inside another one.
  expectInvalid(rawFile(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                            "z": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}})",
                        std::string(8, '\0')),
                "tensor 'z' at bytes [4, 4) overlaps tensor 'a'");
  expectInvalid(rawFile(R"({"a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},
                            "b": {"dtype": "F32", "shape": [], "data_offsets": [8, 12]}})",
                        data),
                "bytes [4, 8) of the data section belong to no tensor");
  expectInvalid(rawFile(R"({"a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}})", data),
                "bytes [4, 12) at the end of the data section belong to no tensor");
  expectInvalid(rawFile("{}", "x"), "bytes [0, 1) at the end of the data section");
}

TEST(SafetensorsTest, RefusesDuplicateNames) {
  expectInvalid(rawFile(R"({"a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},
                            "a": {"dtype": "F32", "shape": [], "data_offsets": [4, 8]}})",
                        std::string(8, '\0')),
                "duplicate tensor name 'a'");
  expectInvalid(rawFile(R"({"a": {"dtype": "F32", "dtype": "F64", "shape": [],
                                  "data_offsets": [0, 4]}})",
                        std::string(4, '\0')),
                "duplicate key 'dtype' in the header");
  expectInvalid(rawFile(R"({"__metadata__": {"k": "1", "k": "2"}})"), "duplicate key 'k'");
}

TEST(SafetensorsTest, RefusesMetadataThatIsNotStringToString) {
  expectInvalid(rawFile(R"({"__metadata__": ["a"]})"),
                "__metadata__ is array, expected an object of strings");
  expectInvalid(rawFile(R"({"__metadata__": {"step": 12}})"),
                "__metadata__ value for 'step' is number, expected a string");
  expectInvalid(rawFile(R"({"__metadata__": {"nested": {"a": "b"}}})"),
                "__metadata__ value for 'nested' is object");
}

TEST(SafetensorsTest, EveryTruncationIsRefused) {
  TensorFile f = everyDType();
  f.metadata["step"] = "3";
  std::string bytes = encodeSafetensors(f);
  for (size_t len = 0; len < bytes.size(); ++len)
    EXPECT_THROW(decodeSafetensors(std::string_view(bytes).substr(0, len)), SafetensorsError)
        << "prefix of " << len << " bytes";
}

TEST(SafetensorsTest, CorruptedBytesNeverCrash) {
  TensorFile f;
  f.tensors.emplace("w", patterned({DType::f16, {2, 3}}, 7));
  f.tensors.emplace("b", patterned({DType::i64, {2}}, 8));
  f.metadata["m"] = "x";
  const std::string good = encodeSafetensors(f);
  int refused = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (unsigned char x : {0x01, 0x20, 0x80, 0xFF}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ x);
      try {
        decodeSafetensors(bad);
      } catch (const SafetensorsError&) {
        ++refused;
      }  // any other exception type fails the test
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(SafetensorsTest, WriterRefusesNamesItCannotEncode) {
  TensorFile f;
  f.tensors.emplace("__metadata__", Tensor({DType::f32, {}}));
  EXPECT_THROW(
      {
        try {
          encodeSafetensors(f);
        } catch (const SafetensorsError& e) {
          EXPECT_NE(std::string(e.what()).find("'__metadata__' is reserved"), std::string::npos);
          throw;
        }
      },
      SafetensorsError);
  TensorFile g;
  g.tensors.emplace("bad\xff", Tensor({DType::f32, {}}));
  EXPECT_THROW(encodeSafetensors(g), SafetensorsError);
  TensorFile h;
  h.metadata["k"] = "\xc3";
  EXPECT_THROW(encodeSafetensors(h), SafetensorsError);
}

TEST(SafetensorsFileTest, RoundTripLeavesOnlyTheFile) {
  TempDir dir;
  TensorFile f = everyDType();
  f.metadata["step"] = "7";
  const std::string path = dir.file("model.safetensors");
  writeSafetensors(path, f);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"model.safetensors"});
  expectSameFile(f, readSafetensors(path));
  // The file holds exactly the in-memory encoding.
  EXPECT_EQ(testing::readWholeFile(path), encodeSafetensors(f));

  // Overwriting replaces the content.
  TensorFile g;
  g.tensors.emplace("only", Tensor({DType::i32, {2}}, {3, 4}));
  writeSafetensors(path, g);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"model.safetensors"});
  expectSameFile(g, readSafetensors(path));
}

TEST(SafetensorsFileTest, FailedWriteKeepsTheOldFileAndNoTemporary) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  TensorFile f;
  f.tensors.emplace("w", Tensor({DType::f32, {2}}, {1.5, -2}));
  writeSafetensors(path, f);
  const std::string before = testing::readWholeFile(path);

  TensorFile bad;
  bad.tensors.emplace("w", Tensor({DType::f32, {3}}));
  bad.tensors.emplace("\xfe", Tensor({DType::f32, {}}));
  EXPECT_THROW(writeSafetensors(path, bad), SafetensorsError);
  EXPECT_EQ(testing::readWholeFile(path), before);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"ckpt.safetensors"});

  // The target is a non-empty directory: the rename fails, the temporary is removed.
  std::filesystem::create_directory(dir.file("sub"));
  testing::writeWholeFile(dir.file("sub/keep"), "x");
  try {
    writeSafetensors(dir.file("sub"), f);
    ADD_FAILURE() << "writing over a directory succeeded";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("sub") + ": error: cannot rename"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"ckpt.safetensors", "sub"}));
}

// A write that fails half way (the file-size limit stops it) leaves the old file intact.
// Runs in a child process so the limit does not affect the test runner.
[[noreturn]] void writeUnderFileSizeLimit(const std::string& path, const TensorFile& f) {
  ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG
  struct rlimit lim {};
  lim.rlim_cur = lim.rlim_max = 1 << 20;  // 1 MiB
  ::setrlimit(RLIMIT_FSIZE, &lim);
  int code = 3;
  try {
    writeSafetensors(path, f);
  } catch (const SafetensorsError& e) {
    code = std::string(e.what()).find("cannot write") != std::string::npos ? 0 : 4;
  }
  std::_Exit(code);
}

TEST(SafetensorsFileTest, WriteFailingMidwayDoesNotClobber) {
  TempDir dir;
  const std::string path = dir.file("big.safetensors");
  TensorFile small;
  small.tensors.emplace("w", Tensor({DType::f32, {4}}, {1, 2, 3, 4}));
  writeSafetensors(path, small);
  const std::string before = testing::readWholeFile(path);
  TensorFile big;
  big.tensors.emplace("w", patterned({DType::f32, {1 << 20}}, 3));  // 4 MiB

  EXPECT_EXIT(writeUnderFileSizeLimit(path, big), ::testing::ExitedWithCode(0), "");
  EXPECT_EQ(testing::readWholeFile(path), before);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"big.safetensors"});
}

TEST(SafetensorsFileTest, ReadErrorsNameTheFile) {
  TempDir dir;
  try {
    readSafetensors(dir.file("missing.safetensors"));
    ADD_FAILURE();
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()),
              dir.file("missing.safetensors") + ": error: cannot open: No such file or directory");
  }
  try {
    readSafetensors(dir.path());
    ADD_FAILURE();
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()), dir.path() + ": error: cannot read: not a regular file");
  }
  try {
    writeSafetensors(dir.file("no/such/dir/x.safetensors"), {});
    ADD_FAILURE();
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos);
  }
}

TEST(SafetensorsFileTest, TruncatedFileIsRefused) {
  TempDir dir;
  TensorFile f;
  f.tensors.emplace("w", patterned({DType::f64, {16}}, 5));
  std::string bytes = encodeSafetensors(f);
  const std::string path = dir.write("cut.safetensors", bytes.substr(0, bytes.size() - 5));
  try {
    readSafetensors(path);
    ADD_FAILURE();
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(
        std::string(e.what()),
        path +
            ": error: invalid safetensors file: tensor 'w': data_offsets [0,128] run past the "
            "end of the data section (123 bytes)");
  }
  const std::string tiny = dir.write("tiny.safetensors", "abc");
  EXPECT_THROW(readSafetensors(tiny), SafetensorsError);
}

// Interoperability with the reference implementation (pip package `safetensors`), when present.
constexpr const char* kPythonInterop = R"PY(
import json, sys
import numpy as np
import safetensors
import safetensors.numpy as stnp

src, dst = sys.argv[1], sys.argv[2]
report = {"tensors": {}}
with open(src, "rb") as fh:
    for name, t in safetensors.deserialize(fh.read()):
        report["tensors"][name] = {"dtype": t["dtype"], "shape": list(t["shape"]),
                                   "hex": bytes(t["data"]).hex()}
with safetensors.safe_open(src, framework="numpy") as f:
    report["metadata"] = f.metadata() or {}
    report["f32_values"] = [float(v) for v in f.get_tensor("f32").ravel()]

stnp.save_file({
    "a_f32": np.arange(6, dtype=np.float32).reshape(2, 3) * np.float32(0.5) - np.float32(1),
    "b_i64": np.array([-(2**40), 7, 2**62], dtype=np.int64),
    "c_f16": np.array([1.5, -2.25, 65504], dtype=np.float16),
    "d_bool": np.array([[True, False], [False, True]]),
    "e_f64": np.array(3.25),
    "f_i32": np.zeros((0, 4), dtype=np.int32),
    "g_f64": np.array([0.1, -1e300]),
}, dst, metadata={"step": "42", "note": "written by python"})
print(json.dumps(report))
)PY";

std::string hexOf(const Tensor& t) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  const auto* p = static_cast<const unsigned char*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) {
    s += kDigits[p[i] >> 4];
    s += kDigits[p[i] & 15];
  }
  return s;
}

TEST(SafetensorsInteropTest, PythonReadsOursAndWeReadPythons) {
  bool have_python = false;
  try {
    have_python =
        testing::runProcess({"python3", "-c", "import safetensors.numpy, numpy"}).exit_code == 0;
  } catch (const std::exception&) {
  }
  if (!have_python)
    GTEST_SKIP() << "python3 with the safetensors and numpy packages is not available "
                    "(pip install safetensors numpy) : interop with the reference not checked";

  TempDir dir;
  TensorFile ours = everyDType();
  ours.tensors.emplace("f32", Tensor({DType::f32, {2, 3}}, {-1, -0.75, -0.5, 0.25, 1e-3, 3e38}));
  ours.metadata = {{"step", "9"}, {"text", "三千零五"}};
  const std::string src = dir.file("ours.safetensors"), dst = dir.file("theirs.safetensors");
  writeSafetensors(src, ours);
  const std::string script = dir.write("interop.py", kPythonInterop);
  auto r = testing::runProcess({"python3", script, src, dst});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  // The reference parser accepted our file and sees the same names, types and bytes.
  auto report = nlohmann::json::parse(r.out);
  ASSERT_EQ(report["tensors"].size(), ours.tensors.size());
  for (const auto& [name, t] : ours.tensors) {
    const auto& e = report["tensors"][name];
    EXPECT_EQ(e["dtype"], safetensorsDTypeName(t.dtype())) << name;
    EXPECT_EQ(e["shape"].get<Shape>(), t.shape()) << name;
    EXPECT_EQ(e["hex"], hexOf(t)) << name;
  }
  EXPECT_EQ(report["metadata"].get<StringMap>(), ours.metadata);
  EXPECT_EQ(report["f32_values"].get<std::vector<double>>(), ours.tensors.at("f32").toDoubles());

  // And we read what the reference wrote.
  TensorFile theirs = readSafetensors(dst);
  EXPECT_EQ(theirs.metadata, (StringMap{{"step", "42"}, {"note", "written by python"}}));
  ASSERT_EQ(theirs.tensors.size(), 7u);
  EXPECT_EQ(theirs.tensors.at("a_f32").type(), (TensorType{DType::f32, {2, 3}}));
  EXPECT_EQ(theirs.tensors.at("a_f32").toDoubles(),
            (std::vector<double>{-1, -0.5, 0, 0.5, 1, 1.5}));
  const Tensor& i64 = theirs.tensors.at("b_i64");
  EXPECT_EQ(i64.dtype(), DType::i64);
  EXPECT_EQ(i64.getI(0), -(int64_t{1} << 40));
  EXPECT_EQ(i64.getI(1), 7);
  EXPECT_EQ(i64.getI(2), int64_t{1} << 62);
  EXPECT_EQ(theirs.tensors.at("c_f16").toDoubles(), (std::vector<double>{1.5, -2.25, 65504}));
  EXPECT_EQ(theirs.tensors.at("d_bool").type(), (TensorType{DType::boolean, {2, 2}}));
  EXPECT_EQ(theirs.tensors.at("d_bool").toDoubles(), (std::vector<double>{1, 0, 0, 1}));
  EXPECT_EQ(theirs.tensors.at("e_f64").type(), (TensorType{DType::f64, {}}));
  EXPECT_EQ(theirs.tensors.at("e_f64").getF(0), 3.25);
  EXPECT_EQ(theirs.tensors.at("f_i32").type(), (TensorType{DType::i32, {0, 4}}));
  EXPECT_EQ(theirs.tensors.at("g_f64").toDoubles(), (std::vector<double>{0.1, -1e300}));
  // What we write back from their file is again readable by them (checked above) and equal.
  expectSameFile(theirs, decodeSafetensors(encodeSafetensors(theirs)));
}

}  // namespace
}  // namespace tgc
