// Language modelling data: the text reader, sequences (lines and blocks), the split, the
// vocabulary, LmBatcher's batches, and the built-in text.
#include "runtime/data/lm_data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>
#include <set>

#include "runtime/data/error.h"
#include "runtime/data/text.h"
#include "tests/data/temp_dir.h"

namespace tgc::data {
namespace {

using Seqs = std::vector<std::vector<int64_t>>;

std::vector<int64_t> row(const Tensor& t, int64_t r) {
  const int64_t n = t.shape()[1];
  return {t.as<int64_t>() + r * n, t.as<int64_t>() + (r + 1) * n};
}

class LmText : public TempDirTest {};

TEST_F(LmText, ReadsNormalizedNonBlankLines) {
  const std::string p = write(
      "t.txt", "\xEF\xBB\xBFHello,  world!\r\n\n   \nfull\xEF\xBC\x8Cwidth\xEF\xBC\x81\nlast");
  EXPECT_EQ(readTextLines(p), (std::vector<std::string>{"Hello, world!", "full,width!", "last"}));
  EXPECT_EQ(parseTextLines("a\n\nb\n", "m"), (std::vector<std::string>{"a", "b"}));
}

TEST_F(LmText, BadFilesAreErrors) {
  const std::string bad = write("bad.txt", "fine\nbro\xFFken\n");
  EXPECT_EQ(errorOf([&] { readTextLines(bad); }), bad + ":2:4: error: invalid UTF-8 (byte 0xFF)");
  const std::string blank = write("blank.txt", "\n  \n\r\n");
  EXPECT_EQ(errorOf([&] { readTextLines(blank); }), blank + ": error: no text in the file");
  const std::string empty = write("empty.txt", "");
  EXPECT_EQ(errorOf([&] { readTextLines(empty); }), empty + ": error: no text in the file");
  EXPECT_EQ(errorOf([&] { parseTextLines("", "mem"); }), "mem: error: no text in the file");
  EXPECT_EQ(errorOf([&] { readTextLines(path("missing.txt")); }),
            path("missing.txt") + ": error: cannot open the text");
  EXPECT_EQ(errorOf([&] { readTextLines(dir_.string()); }),
            dir_.string() + ": error: is a directory, not a text file");
  EXPECT_THROW(readTextLines(bad), DataError);
}

TEST(LmData, LinesAreBosIdsEos) {
  LmOptions o;
  o.validFraction = 0;
  o.maxTokens = 4;  // at most 4 targets: 3 characters and eos
  const LmData d = lmData({"abc", "ab", "abcd", "b"}, o);
  EXPECT_EQ(d.vocab.kind(), TokenizerKind::chars);
  ASSERT_EQ(d.train.size(), 3u);  // "abcd" needs 5 targets
  EXPECT_TRUE(d.valid.empty());
  const int64_t a = d.vocab.id("a"), b = d.vocab.id("b"), c = d.vocab.id("c");
  EXPECT_EQ(d.train[0], (std::vector<int64_t>{Vocab::kBos, a, b, c, Vocab::kEos}));
  EXPECT_EQ(d.train[2], (std::vector<int64_t>{Vocab::kBos, b, Vocab::kEos}));
  EXPECT_EQ(d.vocab.decode(d.train[0]), "abc");
  EXPECT_NE(d.summary.find("1 over 4 tokens dropped"), std::string::npos) << d.summary;
  EXPECT_EQ(d.vocab.id("d"), Vocab::kUnk);  // only in the dropped line
  // Words, lowercased.
  o.tokenizer = TokenizerKind::words;
  o.lowercase = true;
  o.maxTokens = 128;
  const LmData w = lmData({"The cat sat.", "the CAT."}, o);
  EXPECT_EQ(w.vocab.decode(w.train[0]), "the cat sat.");
  EXPECT_EQ(w.train[1].size(), 5u);  // bos the cat . eos
}

TEST(LmData, NothingLeftToTrainIsAnError) {
  LmOptions o;
  o.validFraction = 0;
  o.maxTokens = 2;
  EXPECT_THROW(lmData({"long line"}, o), DataError);
  EXPECT_THROW(lmData({}, o), DataError);
}

// The split hashes the line: equal lines on the same side, whatever the order.
TEST(LmData, ValidationSplitByLine) {
  std::vector<std::string> lines;
  for (int i = 0; i < 2000; ++i) lines.push_back(fmt::format("line {}", i % 1000));
  LmOptions o;
  o.validFraction = 0.1;
  o.seed = 5;
  const LmData d = lmData(lines, o);
  EXPECT_EQ(d.train.size() + d.valid.size(), 2000u);
  EXPECT_GT(d.valid.size(), 140u);
  EXPECT_LT(d.valid.size(), 260u);
  std::set<std::string> valid, train;
  for (const auto& s : d.valid) valid.insert(d.vocab.decode(s));
  for (const auto& s : d.train) train.insert(d.vocab.decode(s));
  for (const auto& s : train) EXPECT_FALSE(valid.count(s)) << s;
  std::vector<std::string> reversed(lines.rbegin(), lines.rend());
  std::set<std::string> validReversed;
  const LmData r = lmData(reversed, o);
  for (const auto& s : r.valid) validReversed.insert(r.vocab.decode(s));
  EXPECT_EQ(valid, validReversed);
  o.seed = 6;
  std::set<std::string> other;
  const LmData s6 = lmData(lines, o);
  for (const auto& s : s6.valid) other.insert(s6.vocab.decode(s));
  EXPECT_NE(valid, other);
}

// Tokens seen only in validation lines are not in the vocabulary.
TEST(LmData, VocabularyFromTheTrainingSplitOnly) {
  std::vector<std::string> lines;
  for (int i = 0; i < 400; ++i) lines.push_back(fmt::format("ab {}", i));
  LmOptions o;
  o.validFraction = 0.2;
  o.tokenizer = TokenizerKind::words;
  const LmData d = lmData(lines, o);
  ASSERT_FALSE(d.valid.empty());
  int64_t unk = 0;
  for (const auto& s : d.valid) unk += std::count(s.begin(), s.end(), Vocab::kUnk);
  EXPECT_EQ(unk, static_cast<int64_t>(d.valid.size()));  // each valid line's number
  for (const auto& s : d.train) EXPECT_EQ(std::count(s.begin(), s.end(), Vocab::kUnk), 0);
  EXPECT_EQ(d.vocab.size(), Vocab::kNumSpecial + 1 + static_cast<int64_t>(d.train.size()));
  EXPECT_NE(d.summary.find("<unk> in valid"), std::string::npos) << d.summary;
  // minCount and maxVocab.
  o.validFraction = 0;
  o.minCount = 2;
  EXPECT_EQ(lmData(lines, o).vocab.size(), Vocab::kNumSpecial + 1);  // "ab"
  o.minCount = 1;
  o.maxVocab = 10;
  EXPECT_EQ(lmData(lines, o).vocab.size(), 10);
}

// Blocks: one stream, bos line eos line eos ..., cut with one id of overlap.
TEST(LmData, BlocksOverlapByOneId) {
  LmOptions o;
  o.packing = LmOptions::Packing::blocks;
  o.blockLength = 4;
  o.validFraction = 0.25;
  const std::vector<std::string> lines = {"abc", "de", "fghij", "k"};
  const LmData d = lmData(lines, o);
  // Stream: bos a b c eos d e eos f g h i j eos k eos = 16 ids, 15 targets: 4 blocks.
  Seqs all = d.train;
  all.insert(all.end(), d.valid.begin(), d.valid.end());
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(d.valid.size(), 1u);  // the last quarter
  std::vector<int64_t> stream = all[0];
  for (size_t k = 1; k < all.size(); ++k) {
    EXPECT_EQ(all[k].front(), all[k - 1].back()) << "block " << k;
    stream.insert(stream.end(), all[k].begin() + 1, all[k].end());
  }
  for (size_t k = 0; k + 1 < all.size(); ++k) EXPECT_EQ(all[k].size(), 5u);
  EXPECT_EQ(all.back().size(), 4u);  // the rest: j eos k eos
  ASSERT_EQ(stream.size(), 16u);
  EXPECT_EQ(stream.front(), Vocab::kBos);
  EXPECT_EQ(stream[4], Vocab::kEos);
  EXPECT_EQ(stream.back(), Vocab::kEos);
  std::string text;
  for (int64_t id : stream)
    text += id == Vocab::kBos ? "^" : id == Vocab::kEos ? "$" : d.vocab.token(id);
  EXPECT_EQ(text, "^abc$de$fghij$<unk>$");  // "k" is only in the validation block
  // Every id after the first is a target exactly once.
  int64_t targets = 0;
  for (const auto& b : all) targets += static_cast<int64_t>(b.size()) - 1;
  EXPECT_EQ(targets, 15);
  // The vocabulary saw the training blocks only: "k" is in the validation block alone.
  EXPECT_EQ(d.vocab.id("k"), Vocab::kUnk);
  EXPECT_NE(d.vocab.id("j"), Vocab::kUnk);  // in block 3 (training)
  EXPECT_NE(d.summary.find("4 blocks of 4 targets"), std::string::npos) << d.summary;
}

TEST(LmData, BlocksSplitRule) {
  LmOptions o;
  o.packing = LmOptions::Packing::blocks;
  o.blockLength = 2;
  const std::vector<std::string> lines = {"abcdefghijklmnopqrst"};  // 22 ids, 11 blocks
  o.validFraction = 0.05;
  EXPECT_EQ(lmData(lines, o).valid.size(), 1u);  // at least one
  o.validFraction = 0.3;
  EXPECT_EQ(lmData(lines, o).valid.size(), 3u);
  o.validFraction = 0.99;
  EXPECT_EQ(lmData(lines, o).train.size(), 1u);  // at least one trains
  o.validFraction = 0;
  EXPECT_EQ(lmData(lines, o).valid.size(), 0u);
  o.validFraction = 0.5;
  o.blockLength = 100;  // one short block: it trains
  const LmData one = lmData(lines, o);
  ASSERT_EQ(one.train.size(), 1u);
  EXPECT_EQ(one.train[0].size(), 22u);
  EXPECT_TRUE(one.valid.empty());
}

// A stored vocabulary reproduces lmData's splits (resuming), or takes new text whole.
TEST(LmData, WithVocabReproducesTheSplits) {
  const auto lines = builtinText(3, 500);
  for (auto packing : {LmOptions::Packing::lines, LmOptions::Packing::blocks}) {
    LmOptions o;
    o.packing = packing;
    o.validFraction = 0.1;
    const LmData d = lmData(lines, o);
    const LmData again = lmDataWithVocab(lines, o, d.vocab);
    EXPECT_EQ(again.train, d.train);
    EXPECT_EQ(again.valid, d.valid);
    EXPECT_EQ(again.vocab, d.vocab);
    LmOptions eval = o;
    eval.validFraction = 1;
    eval.tokenizer = TokenizerKind::words;  // the vocabulary's tokenizer wins
    const LmData e = lmDataWithVocab({"one two three.", "!!"}, eval, d.vocab);
    EXPECT_TRUE(e.train.empty());
    ASSERT_FALSE(e.valid.empty());
    EXPECT_EQ(d.vocab.decode(e.valid[0]).substr(0, 5), "one t");
    bool unk = false;
    for (const auto& s : e.valid) unk |= std::count(s.begin(), s.end(), Vocab::kUnk) > 0;
    EXPECT_TRUE(unk);  // "!" is not in the built-in text
  }
}

TEST(LmData, SentencePiece) {
  if (!Vocab::sentencePieceAvailable()) GTEST_SKIP() << "built without SentencePiece";
  LmOptions o;
  o.tokenizer = TokenizerKind::sentencepiece;
  o.sentencePieceVocab = 400;
  o.validFraction = 0.1;
  const auto lines = builtinText(1, 800);
  for (auto packing : {LmOptions::Packing::lines, LmOptions::Packing::blocks}) {
    o.packing = packing;
    const LmData d = lmData(lines, o);
    EXPECT_EQ(d.vocab.kind(), TokenizerKind::sentencepiece);
    EXPECT_LE(d.vocab.size(), 400);
    EXPECT_FALSE(d.train.empty());
    EXPECT_FALSE(d.valid.empty());
    const LmData again = lmDataWithVocab(lines, o, d.vocab);
    EXPECT_EQ(again.train, d.train);
    EXPECT_EQ(again.valid, d.valid);
    if (packing == LmOptions::Packing::lines) {
      EXPECT_EQ(d.vocab.decode(d.train[0]), lines[0]);
    }
  }
}

TEST(LmBatcher, TargetsAreTokensShiftedByOne) {
  const Seqs seqs = {{1, 5, 6, 7, 2}, {1, 8, 2}, {1, 9, 9, 2}, {1, 4, 4, 4, 4, 4, 2}};
  BatchingOptions o;
  o.batchSize = 2;
  o.dropPartial = false;
  const LmBatcher b(seqs, o, {{{"batch", 2}, {"length", 4}}, {{"length", 6}}});
  EXPECT_EQ(b.bucketFor(3), 0);
  EXPECT_EQ(b.bucketFor(5), 1);
  EXPECT_EQ(b.bucketFor(7), -1);
  BatchPlan plan{0, {0, 1}};
  const FieldBatch batch = b.makeBatch(plan);
  ASSERT_EQ(batch.fields.size(), 2u);
  const Tensor& tokens = batch.fields.at("tokens");
  const Tensor& targets = batch.fields.at("targets");
  EXPECT_EQ(tokens.type(), (TensorType{DType::i64, {2, 4}}));
  EXPECT_EQ(targets.type(), (TensorType{DType::i64, {2, 4}}));
  EXPECT_EQ(row(tokens, 0), (std::vector<int64_t>{1, 5, 6, 7}));
  EXPECT_EQ(row(targets, 0), (std::vector<int64_t>{5, 6, 7, 2}));
  EXPECT_EQ(row(tokens, 1), (std::vector<int64_t>{1, 8, 0, 0}));
  EXPECT_EQ(row(targets, 1), (std::vector<int64_t>{8, 2, 0, 0}));
  EXPECT_EQ(batch.rows, 2);
  EXPECT_EQ(batch.tokens, 6);
  EXPECT_EQ(batch.weight, 6.0);
  EXPECT_EQ(batch.examples, (std::vector<size_t>{0, 1}));
  // A partial batch: the filler row repeats the tokens, its targets are all pad.
  const FieldBatch part = b.makeBatch({1, {3}});
  EXPECT_EQ(part.fields.at("tokens").type(), (TensorType{DType::i64, {2, 6}}));
  EXPECT_EQ(row(part.fields.at("tokens"), 1), row(part.fields.at("tokens"), 0));
  EXPECT_EQ(row(part.fields.at("targets"), 0), (std::vector<int64_t>{4, 4, 4, 4, 4, 2}));
  EXPECT_EQ(row(part.fields.at("targets"), 1), (std::vector<int64_t>(6, 0)));
  EXPECT_EQ(part.rows, 1);
  EXPECT_EQ(part.weight, 6.0);
  EXPECT_THROW(b.makeBatch({2, {0}}), std::invalid_argument);
  EXPECT_THROW(b.makeBatch({0, {3}}), std::invalid_argument);  // longer than the bucket
  EXPECT_THROW(LmBatcher({{1}}, o), std::invalid_argument);
  EXPECT_THROW(LmBatcher(seqs, o, {{{"batch", 3}, {"length", 4}}}), std::invalid_argument);
}

TEST(LmBatcher, EpochsAndBuckets) {
  LmOptions lo;
  lo.validFraction = 0.1;
  const LmData d = lmData(builtinText(1, 3000), lo);
  BatchingOptions o;
  o.batchSize = 32;
  o.numBuckets = 4;
  const LmBatcher train(d.train, o);
  ASSERT_GT(train.buckets().size(), 1u);
  ASSERT_LE(train.buckets().size(), 4u);
  for (const auto& dims : train.buckets()) {
    EXPECT_EQ(dims.size(), 2u);
    EXPECT_EQ(dims.at("batch"), 32);
  }
  const auto e0 = train.planEpoch(7, 0);
  std::set<size_t> seen;
  for (const auto& p : e0) {
    EXPECT_EQ(p.examples.size(), 32u);
    const FieldBatch fb = train.makeBatch(p);
    EXPECT_EQ(fb.bucket, p.bucket);
    EXPECT_EQ(fb.dims, train.buckets()[static_cast<size_t>(p.bucket)]);
    const int64_t L = train.buckets()[static_cast<size_t>(p.bucket)].at("length");
    EXPECT_EQ(fb.fields.at("tokens").shape(), (Shape{32, L}));
    for (size_t i : p.examples) EXPECT_TRUE(seen.insert(i).second);
    // Targets are the tokens shifted by one, row by row, wherever they are not padding.
    const Tensor& tk = fb.fields.at("tokens");
    const Tensor& tg = fb.fields.at("targets");
    for (int64_t r = 0; r < 32; ++r)
      for (int64_t c = 0; c + 1 < L; ++c)
        if (tg.as<int64_t>()[r * L + c] != Vocab::kEos && tg.as<int64_t>()[r * L + c] != 0) {
          EXPECT_EQ(tg.as<int64_t>()[r * L + c], tk.as<int64_t>()[r * L + c + 1]);
        }
  }
  EXPECT_GT(seen.size(), d.train.size() - 32 * train.buckets().size());
  auto key = [](const std::vector<BatchPlan>& ps) {
    std::vector<std::pair<int, std::vector<size_t>>> k;
    for (const auto& p : ps) k.emplace_back(p.bucket, p.examples);
    return k;
  };
  EXPECT_EQ(key(e0), key(train.planEpoch(7, 0)));
  EXPECT_NE(key(e0), key(train.planEpoch(7, 1)));
  EXPECT_NE(key(e0), key(train.planEpoch(8, 0)));
  // Validation on the training buckets, every sequence once; weights sum to the targets.
  o.dropPartial = false;
  const LmBatcher valid(d.valid, o, train.buckets());
  EXPECT_EQ(valid.buckets(), train.buckets());
  double weight = 0;
  std::set<size_t> all;
  for (const auto& p : valid.planEpoch(0, 0)) {
    weight += valid.makeBatch(p).weight;
    all.insert(p.examples.begin(), p.examples.end());
  }
  EXPECT_EQ(all.size() + static_cast<size_t>(valid.droppedTooLong()), d.valid.size());
  int64_t targets = 0;
  for (size_t i : all) targets += static_cast<int64_t>(d.valid[i].size()) - 1;
  EXPECT_EQ(weight, static_cast<double>(targets));
}

TEST(BuiltinText, DeterministicAndShaped) {
  const auto a = builtinText(1, 4000);
  ASSERT_EQ(a.size(), 4000u);
  EXPECT_EQ(a, builtinText(1, 4000));
  EXPECT_NE(a, builtinText(2, 4000));
  EXPECT_EQ(std::vector<std::string>(a.begin(), a.begin() + 100), builtinText(1, 100));
  std::set<char> chars;
  std::map<std::string, int> kinds;
  size_t total = 0, longest = 0;
  for (const auto& l : a) {
    chars.insert(l.begin(), l.end());
    total += l.size();
    longest = std::max(longest, l.size());
    EXPECT_EQ(l.back(), '.');
    EXPECT_EQ(normalizeText(l), l);
    if (l.find(" plus ") != std::string::npos || l.find(" minus ") != std::string::npos)
      ++kinds["arithmetic"];
    else if (l.find("day") != std::string::npos)
      ++kinds["days"];
    else if (l.rfind("the ", 0) == 0)
      ++kinds["sentence"];
    else
      ++kinds["counting"];
  }
  std::cout << "[ text     ] built-in text: " << a.size() << " lines, " << total
            << " characters (longest line " << longest << "), " << chars.size() << " distinct; "
            << kinds["sentence"] << " sentences, " << kinds["counting"] << " counting, "
            << kinds["arithmetic"] << " arithmetic, " << kinds["days"] << " days\n";
  EXPECT_LE(chars.size(), 30u);  // a-z less a few, space, '.', ',', '-'
  for (char c : chars)
    EXPECT_TRUE((c >= 'a' && c <= 'z') || c == ' ' || c == '.' || c == ',' || c == '-') << c;
  for (const char* k : {"sentence", "counting", "arithmetic", "days"}) EXPECT_GT(kinds[k], 400);
  EXPECT_LT(longest, 64u);
  EXPECT_NE(std::find(a.begin(), a.end(), "two plus three is five."), a.end());
  EXPECT_TRUE(builtinText(1, 0).empty());
}

// How learnable the built-in text is, without a network: a character n-gram model with
// Witten-Bell interpolation, trained on the training lines, on the held-out lines
// (characters and eos, as the LM is measured). A tiny transformer should get below it.
double ngramPerplexity(const LmData& d, size_t order) {
  std::map<std::vector<int64_t>, std::map<int64_t, int64_t>> counts;
  for (const auto& s : d.train)
    for (size_t i = 1; i < s.size(); ++i)
      for (size_t k = 0; k < order && k <= i - 1; ++k)
        ++counts[std::vector<int64_t>(s.begin() + static_cast<std::ptrdiff_t>(i - 1 - k),
                                      s.begin() + static_cast<std::ptrdiff_t>(i))][s[i]];
  const double V = static_cast<double>(d.vocab.size());
  double logp = 0;
  int64_t n = 0;
  for (const auto& s : d.valid)
    for (size_t i = 1; i < s.size(); ++i) {
      double p = 1.0 / V;
      for (size_t k = 0; k < order && k <= i - 1; ++k) {
        const auto it =
            counts.find(std::vector<int64_t>(s.begin() + static_cast<std::ptrdiff_t>(i - 1 - k),
                                             s.begin() + static_cast<std::ptrdiff_t>(i)));
        if (it == counts.end()) break;
        double total = 0;
        for (const auto& [c, m] : it->second) total += static_cast<double>(m);
        const double types = static_cast<double>(it->second.size());
        const auto hit = it->second.find(s[i]);
        const double c = hit == it->second.end() ? 0 : static_cast<double>(hit->second);
        p = (c + types * p) / (total + types);
      }
      logp += std::log(p);
      ++n;
    }
  return std::exp(-logp / static_cast<double>(n));
}

TEST(BuiltinText, LearnableByACharacterModel) {
  LmOptions o;
  o.validFraction = 0.05;
  const LmData d = lmData(builtinText(1, 4000), o);
  const double p3 = ngramPerplexity(d, 3), p8 = ngramPerplexity(d, 8), p12 = ngramPerplexity(d, 12);
  std::cout << "[ text     ] " << d.summary << "\n[ text     ] held-out character perplexity "
            << "of n-gram models: 3-gram " << p3 << ", 8-gram " << p8 << ", 12-gram " << p12
            << "\n";
  EXPECT_LT(p8, 2.0);
  EXPECT_LT(p8, p3);
}

}  // namespace
}  // namespace tgc::data
