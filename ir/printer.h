// The IR's text form. print -> parse -> print gives the same text.
//
//   graph @name [B=16, S=64] {
//     %x = input() {role="param"} : f32[2,3]
//     %y = softmax(%x) {axis=0} : f32[2,3]
//     return %y
//   }
#pragma once

#include <string>

#include "ir/graph.h"

namespace tgc {

std::string printGraph(const Graph& g);
// One node as a line without indentation or newline.
std::string printNode(const Node& n);
// "%name", quoted ("%\"a b\"") when the name has characters outside [A-Za-z0-9_.].
std::string printValueRef(const Value& v);
bool isPlainName(const std::string& s);

}  // namespace tgc
