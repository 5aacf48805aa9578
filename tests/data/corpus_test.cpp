// Corpora: TSV and aligned files, UTF-8 errors, normalization, filtering, the split.
#include "runtime/data/corpus.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "runtime/data/error.h"
#include "tests/data/tatoeba_path.h"

namespace tgc::data {
namespace {

using Tokens = std::vector<std::string>;
namespace fs = std::filesystem;

// A file in a fresh temporary directory, removed with the fixture.
class CorpusFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("tgc_corpus_test_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }
  fs::path dir_;
};

// tatoeba.org's layout, with a byte-order mark, CRLF, a blank line, full-width punctuation.
const std::string kTsv =
    "\xEF\xBB\xBFHi.\t\xE4\xBD\xA0\xE5\xA5\xBD\xE3\x80\x82\tCC-BY 2.0 (France) #1\r\n"
    "Stop!\t住手！\tCC-BY #2\n"
    "\n"
    "Who are you?\t你是谁？\n"
    "I have 3 books, Tom.\t我有３本书，汤姆。\tCC-BY #4\n";

TEST_F(CorpusFiles, ReadsTatoebaTsv) {
  const auto pairs = readTsvCorpus(write("c.tsv", kTsv));
  ASSERT_EQ(pairs.size(), 4u);
  EXPECT_EQ(pairs[0].en, "Hi.");
  EXPECT_EQ(pairs[0].zh, "你好.");
  EXPECT_EQ(pairs[1].zh, "住手!");
  EXPECT_EQ(pairs[2].en, "Who are you?");
  EXPECT_EQ(pairs[2].zh, "你是谁?");
  EXPECT_EQ(pairs[2].where, (dir_ / "c.tsv").string() + ":4");
  EXPECT_EQ(pairs[3].zh, "我有3本书,汤姆.");
}

TEST_F(CorpusFiles, InvalidUtf8NamesFileLineAndColumn) {
  const std::string path = write("bad.tsv", "Hi.\t你好。\nBye.\t再\xFF见\n");
  try {
    readTsvCorpus(path);
    FAIL() << "invalid UTF-8 accepted";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), path + ":2:9: error: invalid UTF-8 (byte 0xFF)");
  }
  // A sequence cut short at the end of the file, in an aligned pair.
  const std::string en = write("a.en", "one\ntwo\n");
  const std::string zh = write("a.zh", "一\n\xE4\xBA");
  EXPECT_THROW(
      {
        try {
          readAlignedCorpus(en, zh);
        } catch (const DataError& e) {
          EXPECT_EQ(std::string(e.what()), zh + ":2:1: error: invalid UTF-8 (byte 0xE4)");
          throw;
        }
      },
      DataError);
}

TEST_F(CorpusFiles, MalformedTsvAndMissingFiles) {
  const std::string path = write("notab.tsv", "Hi.\t你好。\nno tab here\n");
  try {
    readTsvCorpus(path);
    FAIL() << "a line without a tab accepted";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ":2: error: expected English<TAB>Chinese, found no tab");
  }
  EXPECT_THROW(readTsvCorpus((dir_ / "missing.tsv").string()), DataError);
  auto message = [](auto&& read) {
    try {
      read();
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string empty = write("empty.tsv", "\n\n");
  EXPECT_EQ(message([&] { readTsvCorpus(empty); }),
            empty + ": error: no sentence pairs in the file");
  EXPECT_EQ(message([&] { readTsvCorpus(dir_.string()); }),
            dir_.string() + ": error: is a directory, not a corpus file");
  const std::string none = write("none.en", "");
  EXPECT_EQ(message([&] { readAlignedCorpus(none, write("none.zh", "")); }),
            none + ": error: no lines in the file");
}

TEST_F(CorpusFiles, ReadsAlignedPairs) {
  const auto pairs = readAlignedCorpus(write("p.en", "One.\r\nTwo!\n"), write("p.zh", "一。\n二！"));
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[1].en, "Two!");
  EXPECT_EQ(pairs[1].zh, "二!");
  const std::string en = write("q.en", "a\nb\nc\n"), zh = write("q.zh", "一\n二\n");
  try {
    readAlignedCorpus(en, zh);
    FAIL() << "unaligned files accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("2 lines, but " + en + " has 3"), std::string::npos)
        << e.what();
  }
}

TEST(Corpus, PrepareBothDirections) {
  const auto pairs = parseTsvCorpus(kTsv, "c.tsv");
  CorpusOptions o;
  o.validFraction = 0;
  const PreparedCorpus zhEn = prepareCorpus(pairs, o);
  ASSERT_EQ(zhEn.train.size(), 4u);
  EXPECT_EQ(zhEn.train[3].src, (Tokens{"我", "有", "3", "本", "书", ",", "汤", "姆", "."}));
  EXPECT_EQ(zhEn.train[3].tgt, (Tokens{"i", "have", "3", "books", ",", "tom", "."}));
  EXPECT_EQ(zhEn.train[3].tgtText, "i have 3 books, tom.");

  o.source = Language::en;
  o.lowercaseEnglish = false;
  const PreparedCorpus enZh = prepareCorpus(pairs, o);
  EXPECT_EQ(enZh.train[0].src, (Tokens{"Hi", "."}));
  EXPECT_EQ(enZh.train[0].tgt, (Tokens{"你", "好", "."}));
  EXPECT_EQ(enZh.train[0].srcText, "Hi.");
}

TEST(Corpus, FiltersEmptyAndLongPairs) {
  const auto pairs =
      parseTsvCorpus("a b c d e\t一二三\n\t空\nHi.\t嗨。\nx\t一二三四五六七八九十\n", "f.tsv");
  CorpusOptions o;
  o.validFraction = 0;
  o.maxSourceTokens = 5;
  o.maxTargetTokens = 4;
  const PreparedCorpus p = prepareCorpus(pairs, o);
  EXPECT_EQ(p.droppedEmpty, 1);
  EXPECT_EQ(p.droppedLong, 2);  // 10 source characters; 5 target words
  ASSERT_EQ(p.train.size(), 1u);
  EXPECT_EQ(p.train[0].tgtText, "hi.");
}

// The split depends on the seed and the source sentence only: the same sentence always lands
// on the same side, whatever the file order.
TEST(Corpus, ValidationSplitBySourceSentence) {
  std::string tsv;
  for (int i = 0; i < 2000; ++i) {
    tsv += fmt::format("sentence {}\t句子{}\n", i % 1000, i % 1000);  // each source twice
  }
  const auto pairs = parseTsvCorpus(tsv, "s.tsv");
  CorpusOptions o;
  o.validFraction = 0.1;
  o.seed = 3;
  const PreparedCorpus a = prepareCorpus(pairs, o);
  EXPECT_EQ(a.train.size() + a.valid.size(), 2000u);
  EXPECT_GT(a.valid.size(), 140u);  // 200 expected
  EXPECT_LT(a.valid.size(), 260u);
  std::set<std::string> valid;
  for (const auto& p : a.valid) valid.insert(p.srcText);
  for (const auto& p : a.train) EXPECT_FALSE(valid.count(p.srcText)) << p.srcText;

  std::vector<SentencePair> reversed(pairs.rbegin(), pairs.rend());
  std::set<std::string> validReversed;
  for (const auto& p : prepareCorpus(reversed, o).valid) validReversed.insert(p.srcText);
  EXPECT_EQ(valid, validReversed);

  o.seed = 4;
  std::set<std::string> otherSeed;
  for (const auto& p : prepareCorpus(pairs, o).valid) otherSeed.insert(p.srcText);
  EXPECT_NE(valid, otherSeed);
}

TEST(Corpus, VocabulariesAndIds) {
  CorpusOptions o;
  o.validFraction = 0;
  const PreparedCorpus p = prepareCorpus(parseTsvCorpus(kTsv, "c.tsv"), o);
  const Vocab src = buildSourceVocab(p.train, o), tgt = buildTargetVocab(p.train, o);
  EXPECT_EQ(src.kind(), TokenizerKind::chars);
  EXPECT_EQ(tgt.kind(), TokenizerKind::words);
  EXPECT_TRUE(tgt.lowercase());
  const auto encoded = encodePairs(p.train, src, tgt);
  ASSERT_EQ(encoded.size(), 4u);
  EXPECT_EQ(tgt.decode(encoded[3].tgt), "i have 3 books, tom.");
  EXPECT_EQ(src.decode(encoded[3].src), "我有3本书,汤姆.");
  for (const auto& e : encoded)
    for (int64_t id : e.src) EXPECT_NE(id, Vocab::kUnk);
}

TEST(Corpus, NumeralsInTheSameForm) {
  const auto t = tokenizeNumerals({numeralExample(42'000'042, true)});
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].src, (Tokens{"四", "千", "二", "百", "万", "零", "四", "十", "二"}));
  EXPECT_EQ(t[0].tgt, (Tokens{"forty-two", "million", "forty-two"}));
}

// The real Tatoeba corpus, where the machine has it (the project does not copy it in).
TEST(Corpus, TatoebaCmnEng) {
  const std::string path = tatoebaPath();
  if (!fs::exists(path)) GTEST_SKIP() << path << " not present";
  const auto pairs = readTsvCorpus(path);
  EXPECT_GT(pairs.size(), 20'000u);
  CorpusOptions o;
  const PreparedCorpus p = prepareCorpus(pairs, o);
  const Vocab src = buildSourceVocab(p.train, o), tgt = buildTargetVocab(p.train, o);
  std::cout << "[ tatoeba  ] " << pairs.size() << " pairs: " << p.train.size() << " train, "
            << p.valid.size() << " valid, " << p.droppedEmpty << " empty, " << p.droppedLong
            << " too long; vocabularies " << src.size() << " zh characters, " << tgt.size()
            << " en words\n";
  EXPECT_NEAR(static_cast<double>(p.valid.size()) / static_cast<double>(pairs.size()), 0.05, 0.01);
  EXPECT_EQ(p.train[0].srcText, "嗨.");
  EXPECT_EQ(p.train[0].tgtText, "hi.");
  // No full-width forms are left.
  for (const auto& t : p.train)
    for (const auto& c : t.src) ASSERT_FALSE(c == "，" || c == "？" || c == "！" || c == "。") << t.where;
}

}  // namespace
}  // namespace tgc::data
