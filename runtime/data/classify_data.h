// Text classification: labeled TSV, vocabularies and label ids, batches, the built-in set.
//
// A file has one example per line, `label<TAB>text` (LabelColumn::first: the label is before
// the first tab, the text the rest) or `text<TAB>label` (LabelColumn::last: the label is after
// the last tab). Both are normalized (normalizeText: a tab inside the text becomes a space).
// Labels are mapped to ids in sorted order (id = index in ClassifyData::labels) and travel
// with a checkpoint; texts longer than maxTokens tokens are cut to their first maxTokens
// (the summary counts them). The validation split hashes the text with the seed, so equal
// texts land on the same side, whatever the file's order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/data/batching.h"
#include "runtime/data/field_batch.h"
#include "runtime/data/vocab.h"

namespace tgc::data {

enum class LabelColumn { first, last };

struct LabeledText {
  std::string label, text;  // normalized
  std::string where;        // "file:line"
};

// Errors (DataError) name "<file>:<line>": a line without a tab ("expected label<TAB>text,
// found no tab"), invalid UTF-8 (with the column), an empty label, an empty text; a file
// without an example is "<file>: error: no examples in the file". Blank lines are skipped.
std::vector<LabeledText> readClassifyTsv(const std::string& path, LabelColumn column);
std::vector<LabeledText> parseClassifyTsv(std::string_view text, std::string_view name,
                                          LabelColumn column);

struct ClassifyOptions {
  TokenizerKind tokenizer = TokenizerKind::words;
  bool lowercase = true;
  int64_t maxTokens = 128;  // longer texts are truncated
  // Validation share; 1 (or more) puts every example in `valid` (evaluation on new data).
  double validFraction = 0.1;
  uint64_t seed = 1;
  int64_t minCount = 1;  // rarer tokens become <unk> (chars, words)
  int64_t maxVocab = 0;  // at most this many ids in all, specials included (0: no limit)
  int64_t sentencePieceVocab = 2000;
};

struct LabeledIds {
  std::vector<int64_t> ids;  // token ids, no bos or eos; at least one
  int64_t label = 0;
  std::string where;
};

struct ClassifyData {
  Vocab vocab;
  std::vector<std::string> labels;  // sorted, id = index
  std::vector<LabeledIds> train, valid;
  std::string summary;  // one line for logs: sizes, classes, truncations, vocabulary
  // The id of a label; throws DataError naming the label and the known ones when unseen:
  // "error: label 'x' was not seen in training (labels: a, b, c)".
  int64_t labelId(const std::string& label) const;
};

// Vocabulary and labels from the training split. A validation example whose label training
// never saw is an error naming it and where it is; so is a split without training examples.
ClassifyData classifyData(const std::vector<LabeledText>& examples, const ClassifyOptions& options);

// The same split and encoding with a stored vocabulary and label list (a checkpoint's;
// `labels` sorted and distinct), whose tokenizer and lowercasing replace the options'. A
// label not in `labels` is an error naming it and where it is. For evaluation on new data,
// pass validFraction = 1.
ClassifyData classifyDataWithVocab(const std::vector<LabeledText>& examples,
                                   const ClassifyOptions& options, Vocab vocab,
                                   std::vector<std::string> labels);

// Batches bucketed by length. Fields:
//   "tokens"  i64 [batch, length]  token ids, padded with 0 (Vocab::kPad), no bos or eos
//   "labels"  i64 [batch]          label ids
// Buckets: BucketDims {"batch": batchSize, "length": L}, at most numBuckets lengths chosen by
// chooseLengthBuckets. FieldBatch::tokens counts real tokens, weight the real rows. Rows that
// fill up the last batch of a bucket (dropPartial = false) repeat real rows (tokens and
// label); only the first `rows` count.
class ClassifyBatcher {
 public:
  // `buckets` fixes the shapes (empty: chosen from the data); examples that fit none are
  // left out (droppedTooLong). Throws std::invalid_argument for an example without tokens or
  // buckets whose "batch" is not batchSize.
  ClassifyBatcher(std::vector<LabeledIds> examples, BatchingOptions options,
                  std::vector<BucketDims> buckets = {});

  const std::vector<BucketDims>& buckets() const { return buckets_.buckets(); }
  const std::vector<LabeledIds>& data() const { return examples_; }
  const BatchingOptions& options() const { return options_; }
  int64_t droppedTooLong() const { return buckets_.droppedTooLong(); }
  // The shortest bucket that holds them, or -1.
  int bucketFor(int64_t tokens) const { return buckets_.bucketFor(tokens); }

  std::vector<BatchPlan> planEpoch(uint64_t seed, uint64_t epoch) const {
    return buckets_.planEpoch(seed, epoch);
  }
  FieldBatch makeBatch(const BatchPlan& plan) const;

 private:
  std::vector<LabeledIds> examples_;
  BatchingOptions options_;
  LengthBuckets buckets_;
};

// The built-in set: n short English sentences in 4 classes, "food", "music", "sports",
// "weather" (drawn uniformly). Each sentence has 2 or 3 words from its class's pool of 15 and
// at most one from another class's, among filler shared by all classes
// ("yesterday my sister talked about the rain and the fog near the pizza."): a bag of words
// separates the classes linearly, no single position or word does. Deterministic in the
// seed; `where` is "built-in:<i>".
std::vector<LabeledText> builtinClassification(uint64_t seed, int64_t n);

}  // namespace tgc::data
