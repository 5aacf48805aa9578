// lint: the classic Transformer bugs, found in the graph as the front end lowers it (before
// any pass), each of which trains without complaint and quietly gives a worse model:
//
//   normalized-twice         a softmax or log_softmax output goes (through views and casts)
//                            into log_softmax or softmax_cross_entropy, which normalize again
//   causal-cross-attention   a causal mask on attention whose keys come from another
//                            sequence than its queries (other graph inputs, or another length)
//   attention-scale          scores scaled by 1/sqrt(n) with n neither the head size (q's last
//                            dim) nor 1, or multiplied by sqrt(head size)
//   missing-padding-mask     keys over the positions of a sequence whose embedding declares a
//                            pad id, attended without a mask computed from it; a causal mask
//                            exempts the attention (with the padding at the end, no real
//                            token's query reaches a pad key)
//
// The front end finds two more while lowering (frontend/source_map.h's ModelWarning):
// unused-value and dropout-in-inference.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace tgc {

struct LintFinding {
  std::string name;                 // the warning's name, for --no-warn=NAME
  const Node* node = nullptr;       // where it is reported
  std::string message;              // the one-line reason
  std::string fix;                  // the one-line fix
  const Node* related = nullptr;    // another node the reason mentions, or null
  std::string relatedNote;          // what `related` is
};

// The names lintGraph and the front end report, for checking --no-warn.
const std::vector<std::string>& lintWarningNames();

std::vector<LintFinding> lintGraph(const Graph& g);

}  // namespace tgc
