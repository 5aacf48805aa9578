// Errors in data files (corpora, vocabularies): "<file>:<line>: error: <reason>".
#pragma once

#include "ir/diagnostic.h"

namespace tgc::data {

struct DataError : ParseError {
  using ParseError::ParseError;
};

}  // namespace tgc::data
