// Classification data: the TSV reader, labels and vocabularies, the split, ClassifyBatcher's
// batches, and the built-in set.
#include "runtime/data/classify_data.h"

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

std::vector<int64_t> row(const Tensor& t, int64_t r) {
  const int64_t n = t.shape()[1];
  return {t.as<int64_t>() + r * n, t.as<int64_t>() + (r + 1) * n};
}

class ClassifyTsv : public TempDirTest {};

TEST_F(ClassifyTsv, ReadsBothColumnOrders) {
  const std::string first =
      write("first.tsv", "pos\tA  fine\tday!\r\n\n neg \tNot good\xEF\xBC\x8C sadly.\n");
  const auto a = readClassifyTsv(first, LabelColumn::first);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].label, "pos");
  EXPECT_EQ(a[0].text, "A fine day!");  // the later tab is part of the text
  EXPECT_EQ(a[1].label, "neg");
  EXPECT_EQ(a[1].text, "Not good, sadly.");
  EXPECT_EQ(a[1].where, first + ":3");
  const auto b = parseClassifyTsv("one\ttwo\tlabel x\n", "m", LabelColumn::last);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].label, "label x");
  EXPECT_EQ(b[0].text, "one two");
  EXPECT_EQ(b[0].where, "m:1");
}

TEST_F(ClassifyTsv, BadLinesAreErrors) {
  const std::string noTab = write("notab.tsv", "pos\tgood\nno tab here\n");
  EXPECT_EQ(errorOf([&] { readClassifyTsv(noTab, LabelColumn::first); }),
            noTab + ":2: error: expected label<TAB>text, found no tab");
  EXPECT_EQ(errorOf([&] { readClassifyTsv(noTab, LabelColumn::last); }),
            noTab + ":2: error: expected text<TAB>label, found no tab");
  EXPECT_EQ(errorOf([&] { parseClassifyTsv("a\tb\n \ttext\n", "f", LabelColumn::first); }),
            "f:2: error: empty label");
  EXPECT_EQ(errorOf([&] { parseClassifyTsv("a\tb\nlabel\t  \n", "f", LabelColumn::first); }),
            "f:2: error: empty text");
  EXPECT_EQ(errorOf([&] { parseClassifyTsv("text\t\n", "f", LabelColumn::last); }),
            "f:1: error: empty label");
  EXPECT_EQ(errorOf([&] { parseClassifyTsv("a\tb\nc\td\xC3\n", "f", LabelColumn::first); }),
            "f:2:4: error: invalid UTF-8 (byte 0xC3)");
  const std::string blank = write("blank.tsv", "\n\n  \n");
  EXPECT_EQ(errorOf([&] { readClassifyTsv(blank, LabelColumn::first); }),
            blank + ": error: no examples in the file");
  const std::string empty = write("empty.tsv", "");
  EXPECT_EQ(errorOf([&] { readClassifyTsv(empty, LabelColumn::first); }),
            empty + ": error: no examples in the file");
  EXPECT_EQ(errorOf([&] { readClassifyTsv(path("none.tsv"), LabelColumn::first); }),
            path("none.tsv") + ": error: cannot open the classification TSV");
  EXPECT_THROW(readClassifyTsv(noTab, LabelColumn::first), DataError);
}

std::vector<LabeledText> examples(const std::vector<std::pair<std::string, std::string>>& v) {
  std::vector<LabeledText> out;
  for (size_t i = 0; i < v.size(); ++i)
    out.push_back({v[i].first, v[i].second, fmt::format("t.tsv:{}", i + 1)});
  return out;
}

TEST(ClassifyData, LabelsAndVocabulary) {
  ClassifyOptions o;
  o.validFraction = 0;
  const ClassifyData d = classifyData(
      examples({{"zeta", "The cat sat."}, {"alpha", "a DOG ran"}, {"mid", "the dog sat"}}), o);
  EXPECT_EQ(d.labels, (std::vector<std::string>{"alpha", "mid", "zeta"}));
  EXPECT_EQ(d.labelId("mid"), 1);
  EXPECT_EQ(errorOf([&] { d.labelId("other"); }),
            "error: label 'other' was not seen in training (labels: alpha, mid, zeta)");
  EXPECT_THROW(d.labelId("other"), DataError);
  ASSERT_EQ(d.train.size(), 3u);
  EXPECT_EQ(d.train[0].label, 2);
  EXPECT_EQ(d.train[0].where, "t.tsv:1");
  EXPECT_EQ(d.vocab.decode(d.train[0].ids), "the cat sat.");  // lowercased words, no bos/eos
  EXPECT_EQ(d.train[1].ids.size(), 3u);
  EXPECT_EQ(d.vocab.kind(), TokenizerKind::words);
  EXPECT_NE(d.summary.find("3 classes"), std::string::npos) << d.summary;
  // Characters, and truncation.
  o.tokenizer = TokenizerKind::chars;
  o.lowercase = false;
  o.maxTokens = 4;
  const ClassifyData c = classifyData(examples({{"x", "abcdef"}, {"y", "ab"}}), o);
  EXPECT_EQ(c.train[0].ids.size(), 4u);
  EXPECT_EQ(c.vocab.decode(c.train[0].ids), "abcd");
  EXPECT_EQ(c.vocab.id("e"), Vocab::kUnk);  // cut off before counting
  EXPECT_NE(c.summary.find("1 texts truncated to 4 tokens"), std::string::npos) << c.summary;
}

std::vector<LabeledText> numbered(int n, int classes) {
  std::vector<LabeledText> out;
  for (int i = 0; i < n; ++i)
    out.push_back({fmt::format("c{}", i % classes), fmt::format("text number {}", i),
                   fmt::format("f:{}", i + 1)});
  return out;
}

TEST(ClassifyData, SplitByTextAndUnseenLabels) {
  ClassifyOptions o;
  o.validFraction = 0.2;
  o.seed = 2;
  auto ex = numbered(1000, 4);
  // Duplicated texts fall on the same side.
  ex.push_back({"c1", "text number 7", "f:1001"});
  const ClassifyData d = classifyData(ex, o);
  EXPECT_EQ(d.train.size() + d.valid.size(), 1001u);
  EXPECT_GT(d.valid.size(), 150u);
  EXPECT_LT(d.valid.size(), 250u);
  std::set<std::string> valid;
  for (const auto& e : d.valid) valid.insert(d.vocab.decode(e.ids));
  for (const auto& e : d.train) EXPECT_FALSE(valid.count(d.vocab.decode(e.ids)));
  // A label only in validation: an error that names it and where it is.
  const auto* v = &d.valid.front();
  auto withRare = ex;
  withRare[std::stoul(v->where.substr(2)) - 1].label = "rare";
  const std::string msg = errorOf([&] { classifyData(withRare, o); });
  EXPECT_EQ(msg, v->where +
                     ": error: label 'rare' is in the validation split but not in "
                     "training (labels: c0, c1, c2, c3)");
  // Everything in validation: nothing to train on.
  o.validFraction = 1;
  EXPECT_THROW(classifyData(ex, o), DataError);
}

TEST(ClassifyData, WithVocabReproducesAndRefusesUnseenLabels) {
  ClassifyOptions o;
  const auto ex = numbered(300, 3);
  const ClassifyData d = classifyData(ex, o);
  const ClassifyData again = classifyDataWithVocab(ex, o, d.vocab, d.labels);
  ASSERT_EQ(again.train.size(), d.train.size());
  ASSERT_EQ(again.valid.size(), d.valid.size());
  for (size_t i = 0; i < d.train.size(); ++i) {
    EXPECT_EQ(again.train[i].ids, d.train[i].ids);
    EXPECT_EQ(again.train[i].label, d.train[i].label);
  }
  o.validFraction = 1;
  const ClassifyData eval =
      classifyDataWithVocab(examples({{"c2", "text number 12345"}}), o, d.vocab, d.labels);
  ASSERT_EQ(eval.valid.size(), 1u);
  EXPECT_TRUE(eval.train.empty());
  EXPECT_EQ(eval.valid[0].label, 2);
  EXPECT_EQ(errorOf([&] {
              classifyDataWithVocab(examples({{"c0", "a"}, {"new", "b"}}), o, d.vocab, d.labels);
            }),
            "t.tsv:2: error: label 'new' was not seen in training (labels: c0, c1, c2)");
  EXPECT_THROW(classifyDataWithVocab(ex, o, d.vocab, {"b", "a"}), DataError);
}

TEST(ClassifyBatcher, ShapesContentsAndFilling) {
  std::vector<LabeledIds> ex = {
      {{5, 6, 7}, 1, "a"}, {{8}, 0, "b"}, {{9, 9, 9, 9, 9}, 2, "c"}, {{4, 4}, 1, "d"}};
  BatchingOptions o;
  o.batchSize = 3;
  o.dropPartial = false;
  const ClassifyBatcher b(ex, o, {{{"batch", 3}, {"length", 3}}, {{"batch", 3}, {"length", 5}}});
  const FieldBatch batch = b.makeBatch({0, {0, 1}});
  const Tensor& tokens = batch.fields.at("tokens");
  const Tensor& labels = batch.fields.at("labels");
  EXPECT_EQ(tokens.type(), (TensorType{DType::i64, {3, 3}}));
  EXPECT_EQ(labels.type(), (TensorType{DType::i64, {3}}));
  EXPECT_EQ(row(tokens, 0), (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(row(tokens, 1), (std::vector<int64_t>{8, 0, 0}));
  EXPECT_EQ(row(tokens, 2), row(tokens, 0));  // a filler row repeats a real one
  EXPECT_EQ(labels.as<int64_t>()[0], 1);
  EXPECT_EQ(labels.as<int64_t>()[1], 0);
  EXPECT_EQ(labels.as<int64_t>()[2], 1);
  EXPECT_EQ(batch.rows, 2);
  EXPECT_EQ(batch.weight, 2.0);
  EXPECT_EQ(batch.tokens, 4);
  // Evaluation covers every example once.
  std::multiset<size_t> seen;
  for (const auto& p : b.planEpoch(1, 0)) seen.insert(p.examples.begin(), p.examples.end());
  EXPECT_EQ(seen, (std::multiset<size_t>{0, 1, 2, 3}));
  EXPECT_THROW(ClassifyBatcher({{{}, 0, "e"}}, o), std::invalid_argument);
  EXPECT_THROW(b.makeBatch({0, {2}}), std::invalid_argument);
}

TEST(ClassifyBatcher, EpochsAreDeterministic) {
  ClassifyOptions co;
  const ClassifyData d = classifyData(builtinClassification(1, 2000), co);
  BatchingOptions o;
  o.batchSize = 16;
  o.numBuckets = 3;
  const ClassifyBatcher b(d.train, o);
  ASSERT_GE(b.buckets().size(), 2u);
  auto key = [](const std::vector<BatchPlan>& ps) {
    std::vector<std::pair<int, std::vector<size_t>>> k;
    for (const auto& p : ps) k.emplace_back(p.bucket, p.examples);
    return k;
  };
  const auto e0 = b.planEpoch(3, 0);
  EXPECT_EQ(key(e0), key(b.planEpoch(3, 0)));
  EXPECT_NE(key(e0), key(b.planEpoch(3, 1)));
  for (const auto& p : e0) {
    const FieldBatch fb = b.makeBatch(p);
    EXPECT_EQ(fb.rows, 16);
    EXPECT_EQ(fb.dims, b.buckets()[static_cast<size_t>(p.bucket)]);
    EXPECT_EQ(fb.fields.at("tokens").shape()[1],
              b.buckets()[static_cast<size_t>(p.bucket)].at("length"));
    for (int64_t r = 0; r < 16; ++r)
      EXPECT_EQ(fb.fields.at("labels").as<int64_t>()[r],
                d.train[p.examples[static_cast<size_t>(r)]].label);
  }
}

TEST(BuiltinClassification, DeterministicAndBalanced) {
  const auto a = builtinClassification(1, 2000);
  ASSERT_EQ(a.size(), 2000u);
  auto same = [](const std::vector<LabeledText>& x, const std::vector<LabeledText>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].label != y[i].label || x[i].text != y[i].text) return false;
    return true;
  };
  EXPECT_TRUE(same(a, builtinClassification(1, 2000)));
  EXPECT_FALSE(same(a, builtinClassification(2, 2000)));
  std::map<std::string, int> perClass;
  size_t words = 0;
  for (const auto& e : a) {
    ++perClass[e.label];
    words += tokenizeWords(e.text).size();
    EXPECT_EQ(e.text.back(), '.');
  }
  EXPECT_EQ(perClass.size(), 4u);
  for (const auto& [label, n] : perClass) {
    EXPECT_GT(n, 400) << label;
    EXPECT_LT(n, 600) << label;
  }
  std::cout << "[ classify ] built-in set: " << a.size() << " sentences, " << words
            << " words; e.g. \"" << a[0].text << "\" (" << a[0].label << ")\n";
  EXPECT_EQ(a[0].where, "built-in:1");
}

// Bag-of-words separability, without a network: multinomial naive Bayes trained on the
// training split classifies the held-out sentences; no single word position decides.
TEST(BuiltinClassification, SeparableByABagOfWords) {
  ClassifyOptions o;
  o.validFraction = 0.2;
  const ClassifyData d = classifyData(builtinClassification(1, 4000), o);
  ASSERT_EQ(d.labels, (std::vector<std::string>{"food", "music", "sports", "weather"}));
  const size_t C = d.labels.size(), V = static_cast<size_t>(d.vocab.size());
  std::vector<std::vector<double>> count(C, std::vector<double>(V, 1.0));
  std::vector<double> total(C, static_cast<double>(V)), prior(C, 1.0);
  for (const auto& e : d.train) {
    const auto c = static_cast<size_t>(e.label);
    prior[c] += 1;
    for (int64_t id : e.ids) {
      count[c][static_cast<size_t>(id)] += 1;
      total[c] += 1;
    }
  }
  auto accuracy = [&](bool firstWordOnly) {
    int64_t right = 0;
    for (const auto& e : d.valid) {
      size_t best = 0;
      double bestScore = -1e300;
      for (size_t c = 0; c < C; ++c) {
        double s = std::log(prior[c]);
        for (size_t k = 0; k < e.ids.size() && (!firstWordOnly || k < 1); ++k)
          s += std::log(count[c][static_cast<size_t>(e.ids[k])] / total[c]);
        if (s > bestScore) bestScore = s, best = c;
      }
      right += static_cast<int64_t>(best) == e.label;
    }
    return static_cast<double>(right) / static_cast<double>(d.valid.size());
  };
  const double bag = accuracy(false), first = accuracy(true);
  std::cout << "[ classify ] " << d.summary << "\n[ classify ] held-out accuracy: naive Bayes "
            << bag << ", first word only " << first << "\n";
  EXPECT_GE(bag, 0.98);
  EXPECT_LT(first, 0.5);
}

}  // namespace
}  // namespace tgc::data
