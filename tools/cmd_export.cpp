// `tgc export --format ctranslate2`: a translation checkpoint as a model directory another
// engine serves (runtime/train/export_ctranslate2.h).
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <string>

#include "runtime/train/checkpoint.h"
#include "runtime/train/export_ctranslate2.h"
#include "tools/commands.h"

namespace tgc::cli {
namespace {

struct ExportArgs {
  std::string format, checkpoint, model, out;
  bool force = false;
};

constexpr const char* kFooter = R"footer(
Formats:
  ctranslate2   a CTranslate2 model directory (pip install ctranslate2): model.bin with the
                weights in CTranslate2's layout, config.json, source_vocabulary.json and
                target_vocabulary.json (token strings), and tgc's own vocabularies with
                their tokenizers (tgc_source_vocab.json, tgc_target_vocab.json). The
                position table is the one tgc trained with. The model must have the
                parameters of models/transformer.tg's Transformer (any preset or --set
                sizes, relu, gelu, silu or swiglu, tied output or not) and no others.

CTranslate2 reads tokens, not text: tokenize the source as tgc does (characters for Chinese;
English words or the SentencePiece model in tgc_source_vocab.json) and join the target
tokens back (the tokens are the vocabulary's strings; <eos> ends a translation).

Examples:
  tgc export --format ctranslate2 --checkpoint runs/zh-en ct2-zh-en
  python3 -c "import ctranslate2; t = ctranslate2.Translator('ct2-zh-en');
              print(t.translate_batch([list('我爱你')])[0].hypotheses[0])"

The directory is written beside OUT and renamed into place, so a failed export leaves
nothing behind. Exit status: 0 on success; 1 with the reason on stderr (an unreadable
checkpoint, a parameter the layout lacks or does not have, OUT not empty without --force).
)footer";

int runExport(const ExportArgs& a) {
  std::string used;
  const train::Checkpoint c = train::loadLatestCheckpoint(a.checkpoint, &used);
  const train::CTranslate2Export r = train::exportCTranslate2(c, a.out, a.model, a.force);
  std::cout << fmt::format(
      "wrote {}: model.bin ({} variables, {:.1f} MiB; {} encoder and {} decoder layers, {} "
      "heads), vocabularies of {} and {} tokens, from {}\n",
      a.out, r.variables, static_cast<double>(r.bytes) / (1 << 20), r.encoderLayers,
      r.decoderLayers, r.heads, r.srcVocab, r.tgtVocab, used);
  return 0;
}

}  // namespace

void registerExport(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand("export", "Write a trained checkpoint in another engine's format");
  cmd->footer(kFooter);
  cmd->add_option("--format", a->format, "Output format")
      ->required()
      ->check(CLI::IsMember({"ctranslate2"}));
  cmd->add_option("-c,--checkpoint", a->checkpoint, "Run directory (its newest checkpoint) or checkpoint file")
      ->option_text("DIR")
      ->required();
  cmd->add_option("--model", a->model, "Model file, when it moved since training (default: the checkpoint's)")
      ->option_text("FILE");
  cmd->add_option("OUT", a->out, "Directory to write")->required();
  cmd->add_flag("--force", a->force, "Replace OUT when it exists and is not empty");
  cmd->callback([a] { runCommand("export", [&] { return runExport(*a); }); });
}

}  // namespace tgc::cli
