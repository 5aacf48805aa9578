// A run's files besides checkpoints: the loss curve as CSV and as an SVG plot.
//
//   loss.csv   step,update,loss,grad_norm,lr,tokens    one row per batch (deterministic:
//              a resumed run writes the same file as an uninterrupted one)
//   valid.csv  step,loss,exact_match,bleu,perplexity,accuracy   one row per validation
//   loss.svg   training loss (and its moving average) and validation loss over steps, with
//              the task's metric on a second axis (exact match for the built-in task, BLEU
//              for a corpus, perplexity, accuracy)
#pragma once

#include <string>
#include <vector>

#include "runtime/train/checkpoint.h"

namespace tgc::train {

std::string lossCsv(const std::vector<HistoryRow>& history);
std::string validCsv(const std::vector<ValidRow>& valid);
// `metric` (exact_match, bleu, perplexity, accuracy, or "" for none) is the right axis.
std::string lossSvg(const std::vector<HistoryRow>& history, const std::vector<ValidRow>& valid,
                    const std::string& title, const std::string& metric = "exact_match");

// Writes loss.csv, valid.csv and loss.svg into `dir` (each through a temporary + rename).
void writeReports(const std::string& dir, const std::vector<HistoryRow>& history,
                  const std::vector<ValidRow>& valid, const std::string& title,
                  const std::string& metric = "exact_match");

}  // namespace tgc::train
