// Language modelling on plain text: reading, vocabularies, sequences, batches, and the
// built-in text.
//
// A sequence is a vector of ids; the model reads seq[0..n-1] ("tokens") and predicts
// seq[1..n] ("targets"), so a sequence of n + 1 ids gives n targets.
//   Packing::lines   each non-blank line is one sequence, bos + ids + eos. Lines whose
//                    sequence would be longer than maxTokens + 1 ids (maxTokens targets) are
//                    dropped, and the summary counts them. The validation split hashes the
//                    line with the seed, so equal lines land on the same side, whatever the
//                    file's order.
//   Packing::blocks  the whole text is one stream, bos line1 eos line2 eos ... lineN eos,
//                    cut into blocks of blockLength + 1 ids; consecutive blocks overlap by
//                    one id (block k is stream[k·L .. k·L + L]), so every id after the first
//                    is a target exactly once. The last block is shorter when the stream
//                    does not divide evenly (at least 2 ids). maxTokens is not used. The
//                    validation split is the last validFraction of the blocks (at least one
//                    and at most all but one, when 0 < validFraction < 1).
// The vocabulary comes from the training split only (for SentencePiece in blocks mode: the
// model is trained on the lines of the first 1 - validFraction of the text's characters).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/data/batching.h"
#include "runtime/data/field_batch.h"
#include "runtime/data/vocab.h"

namespace tgc::data {

struct LmOptions {
  TokenizerKind tokenizer = TokenizerKind::chars;
  bool lowercase = false;
  int64_t sentencePieceVocab = 2000;
  enum class Packing { lines, blocks } packing = Packing::lines;
  int64_t blockLength = 64;  // blocks: targets per block (blockLength + 1 ids)
  int64_t maxTokens = 128;   // lines: the most targets of a sequence; longer lines dropped
  // Validation share. 0: everything trains; 1 (or more): everything is validation, for
  // evaluating a stored vocabulary on new text (lmDataWithVocab).
  double validFraction = 0.05;
  uint64_t seed = 1;
  int64_t minCount = 1;  // rarer tokens become <unk> (chars, words)
  int64_t maxVocab = 0;  // at most this many ids in all, specials included (0: no limit)
};

// The text's non-blank lines, normalized (normalizeText). Each line must be UTF-8: an error
// names "<file>:<line>:<col>"; a file without a non-blank line is an error
// ("<file>: error: no text in the file"). parseTextLines reads text already in memory;
// `name` stands for the file in messages.
std::vector<std::string> readTextLines(const std::string& path);
std::vector<std::string> parseTextLines(std::string_view text, std::string_view name);

struct LmData {
  Vocab vocab;
  std::vector<std::vector<int64_t>> train, valid;  // sequences, as described above
  std::string summary;  // one line for logs: lines, sequences, dropped, vocabulary
};

// Lines (readTextLines, builtinText) to sequences, with a vocabulary of the training split
// (options.tokenizer, lowercase, minCount, maxVocab, sentencePieceVocab). Throws DataError
// when no training sequence is left.
LmData lmData(const std::vector<std::string>& lines, const LmOptions& options);

// The same with a stored vocabulary (a checkpoint's), whose tokenizer and lowercasing
// replace the options'; the splits are the ones lmData makes, so re-encoding the training
// text reproduces lmData(lines, options) (resuming). For evaluation on new text, pass
// validFraction = 1: every sequence is in `valid`. Tokens the vocabulary lacks become <unk>.
LmData lmDataWithVocab(const std::vector<std::string>& lines, const LmOptions& options,
                       Vocab vocab);

// Batches of sequences, bucketed by length. Fields, both i64 [batch, length]:
//   "tokens"   seq[0..n-1], padded with 0 (Vocab::kPad)
//   "targets"  seq[1..n],   padded with 0
// Buckets: BucketDims {"batch": batchSize, "length": L}, at most numBuckets lengths chosen by
// chooseLengthBuckets (lengthMultiple rounds them up); a sequence goes to the shortest bucket
// that holds its n. FieldBatch::tokens and weight are the real targets (sum of n). Rows that
// fill up the last batch of a bucket (dropPartial = false) repeat real rows' tokens (an all-pad
// row would attend to nothing) with all-pad targets, so they carry no weight.
class LmBatcher {
 public:
  // `buckets` fixes the shapes (e.g. a training batcher's, for validation with the same
  // compiled steps); empty: chosen from the data. Sequences that fit no bucket are left
  // out (droppedTooLong). Throws std::invalid_argument for a sequence of fewer than 2 ids, or
  // buckets whose "batch" is not batchSize.
  LmBatcher(std::vector<std::vector<int64_t>> seqs, BatchingOptions options,
            std::vector<BucketDims> buckets = {});

  const std::vector<BucketDims>& buckets() const { return buckets_.buckets(); }
  const std::vector<std::vector<int64_t>>& data() const { return seqs_; }
  const BatchingOptions& options() const { return options_; }
  int64_t droppedTooLong() const { return buckets_.droppedTooLong(); }
  // The shortest bucket whose length holds n targets, or -1.
  int bucketFor(int64_t n) const { return buckets_.bucketFor(n); }

  std::vector<BatchPlan> planEpoch(uint64_t seed, uint64_t epoch) const {
    return buckets_.planEpoch(seed, epoch);
  }
  FieldBatch makeBatch(const BatchPlan& plan) const;

 private:
  std::vector<std::vector<int64_t>> seqs_;
  BatchingOptions options_;
  LengthBuckets buckets_;  // by targets per sequence
};

// The built-in text: `lines` lines of lowercase English from a small grammar with a fixed
// vocabulary, so that a tiny character-level model learns it visibly. Each line is one of:
//   sentences   "the small cat sees a red ball."        (adjectives, nouns, verbs, places)
//   counting    "three four five six seven."            (3..7 consecutive numbers from 1..20)
//   arithmetic  "two plus three is five."               (0..9 plus/minus, results 0..18)
//   days        "after monday comes tuesday."  /  "today is friday, the ninth of may."
// The same (seed, lines) gives the same text everywhere (SplitMix64, rng.h).
std::vector<std::string> builtinText(uint64_t seed, int64_t lines);

}  // namespace tgc::data
