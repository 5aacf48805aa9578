// Where the tests look for the Tatoeba cmn-eng corpus: $TGC_TATOEBA, else the checkout's
// sibling ../shared/data/tatoeba-cmn-eng/cmn.txt. The project does not copy it in, so tests
// that need it skip visibly without it.
#pragma once

#include <cstdlib>
#include <string>

inline std::string tatoebaPath() {
  if (const char* p = std::getenv("TGC_TATOEBA"); p && *p) return p;
  return std::string(TGC_SOURCE_DIR) + "/../shared/data/tatoeba-cmn-eng/cmn.txt";
}
