// `tgc export --format ctranslate2`: a translation checkpoint as a CTranslate2 model directory,
// so that a model trained with tgc can be served by CTranslate2 (pip install ctranslate2).
//
//   OUT/model.bin                 CTranslate2's binary format (version 6, spec
//                                 "TransformerSpec" revision 7): every variable by name,
//                                 weights [out, in] (tgc keeps [in, out]), Q/K/V fused
//   OUT/config.json               special tokens (tgc's <bos>, <eos>, <unk>), LayerNorm epsilon
//   OUT/source_vocabulary.json    token strings by id
//   OUT/target_vocabulary.json
//   OUT/tgc_source_vocab.json     tgc's vocabularies with their tokenizers (characters,
//   OUT/tgc_target_vocab.json     words, or the SentencePiece model), to turn text into tokens
//
// The model must have the parameters of the library Transformer (models/transformer.tg:
// post-LN encoder and decoder layers of nn.tg, relu, gelu, silu or swiglu FFNs, biases or
// none, a tied or separate output projection) and no others. The position table written is
// the paper's interleaved sin/cos table that tgc adds (CTranslate2's default table puts
// sines and cosines in two halves, which would change every output).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/train/checkpoint.h"

namespace tgc::train {

struct CTranslate2Export {
  int64_t variables = 0;  // in model.bin
  int64_t bytes = 0;      // of model.bin
  int64_t srcVocab = 0, tgtVocab = 0;
  int encoderLayers = 0, decoderLayers = 0, heads = 0;
};

// Writes the model directory `out` for checkpoint `c` (its parameters' moving averages where
// kept; `modelPath` replaces the checkpoint's model file when non-empty). The directory is
// written beside `out` and renamed into place, so a failure leaves nothing; an existing
// non-empty `out` is refused unless `force`. Throws std::runtime_error saying why when the
// checkpoint is not a translation model of the Transformer's layout (the parameter that is
// missing, of another shape, or that CTranslate2 would not run).
CTranslate2Export exportCTranslate2(const Checkpoint& c, const std::string& out,
                                    const std::string& modelPath = "", bool force = false);

}  // namespace tgc::train
