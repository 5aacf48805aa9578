// Corrupt input is refused with a DataError, never a crash or another exception: random
// byte mutations of a good vocabulary file and of a good corpus.
#include <gtest/gtest.h>

#include "runtime/data/corpus.h"
#include "runtime/data/error.h"
#include "runtime/data/rng.h"
#include "runtime/data/vocab.h"

namespace tgc::data {
namespace {

// Flips, inserts or deletes a few random bytes.
std::string mutate(std::string s, Rng& rng) {
  const int edits = 1 + static_cast<int>(rng.below(4));
  for (int e = 0; e < edits; ++e) {
    const size_t at = s.empty() ? 0 : static_cast<size_t>(rng.below(s.size()));
    switch (rng.below(3)) {
      case 0:
        if (!s.empty()) s[at] = static_cast<char>(rng.below(256));
        break;
      case 1: s.insert(at, 1, static_cast<char>(rng.below(256))); break;
      default:
        if (!s.empty()) s.erase(at, 1 + static_cast<size_t>(rng.below(8)));
        break;
    }
  }
  return s;
}

TEST(Robustness, MutatedVocabularies) {
  const std::string good =
      Vocab::build(TokenizerKind::words, true, {{"the", "cat", "."}, {"a", "dog", "!"}}).toJson();
  Rng rng(1);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::string bad = mutate(good, rng);
    try {
      const Vocab v = Vocab::fromJson(bad, "m.json");
      ++accepted;  // a harmless edit (whitespace, a token's letter): still a valid vocabulary
      EXPECT_GE(v.size(), Vocab::kNumSpecial);
    } catch (const DataError&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 1000);
  std::cout << "[ mutated  ] vocabularies: " << refused << " refused, " << accepted
            << " still valid\n";
}

TEST(Robustness, MutatedCorpora) {
  const std::string good =
      "Hi.\t你好。\tCC-BY\nWho are you?\t你是谁？\nI have 3 books.\t我有３本书。\n";
  Rng rng(2);
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::string bad = mutate(good, rng);
    try {
      CorpusOptions o;
      o.validFraction = 0.5;
      const PreparedCorpus p = prepareCorpus(parseTsvCorpus(bad, "m.tsv"), o);
      EXPECT_LE(p.train.size() + p.valid.size(), 4u);
    } catch (const DataError& e) {
      ++refused;
      EXPECT_EQ(std::string(e.what()).rfind("m.tsv:", 0), 0u) << e.what();
    }
  }
  EXPECT_GT(refused, 300);
}

}  // namespace
}  // namespace tgc::data
