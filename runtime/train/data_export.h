// The data of a training run written out for another implementation (bench/tatoeba_bleu.py
// trains PyTorch on exactly what tgc trains on): both vocabularies with their tokenizers,
// the training pairs as the batcher holds them, the bucket shapes, the batch order of the
// first epochs, and the validation split with its texts.
//
// JSON, one object:
//   {"format": "tgc-data-export", "version": 1, "data": <DataSpec>, "seed": 1,
//    "batch_size": 64, "buckets": [[S, T], ...], "length_cap": N,
//    "src_vocab": <Vocab JSON>, "tgt_vocab": <Vocab JSON>,
//    "train": {"src": [[ids]...], "tgt": [[ids]...]},        // without bos/eos
//    "epochs": [[[bucket, [example, ...]], ...], ...],      // Batcher::planEpoch(seed, e)
//    "valid": {"src": [[ids]...], "tgt": [[ids]...], "src_text": [...], "tgt_text": [...]}}
// A batch is built as Batcher::makeBatch does: src padded to S, tgt_in = bos + tgt and
// tgt_out = tgt + eos padded to T, pad id 0.
//
// The lm task (bench/gpt_lm.py) writes the same kind of object with its own fields:
//   {"format": "tgc-data-export", "version": 1, "task": "lm", "data": <DataSpec>, "seed": 1,
//    "batch_size": 64, "buckets": [L, ...], "vocab": <Vocab JSON>, "pad": 0, "bos": 1,
//    "eos": 2, "train": [[ids]...],                            // whole sequences, bos..eos
//    "epochs": [[[bucket, [example, ...]], ...], ...],      // LmBatcher::planEpoch(seed, e)
//    "valid": [[ids]...]}
// and a batch is built as LmBatcher::makeBatch does: row r holds sequence s = examples[r],
// tokens = s[0..n-1] and targets = s[1..n] padded with 0 to the bucket's length L.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/data/batching.h"
#include "runtime/data/dataset.h"
#include "runtime/data/lm_data.h"
#include "runtime/train/spec.h"

namespace tgc::train {

struct DataExportInfo {
  DataSpec spec;
  uint64_t seed = 1;
  int64_t batchSize = 64;  // the batcher's
  int64_t epochs = 0;     // batch plans of epochs 0..epochs-1
  int64_t lengthCap = 0;  // DecodeOptions::lengthCap of the run
};

std::string dataExportJson(const data::TranslationData& d, const data::Batcher& train,
                           const DataExportInfo& info);

// The lm task's export (above): its data and training batcher.
std::string lmDataExportJson(const data::LmData& d, const data::LmBatcher& train,
                             const DataExportInfo& info);

// Writes `text` to `path` atomically (temporary file, then rename).
void writeExportFile(const std::string& path, const std::string& text);

// Written atomically (temporary file, then rename), so a reader never sees half a file.
void writeDataExport(const std::string& path, const data::TranslationData& d,
                     const data::Batcher& train, const DataExportInfo& info);

}  // namespace tgc::train
