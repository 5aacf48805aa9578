#include "tools/commands.h"

namespace tgc::cli {

void registerOpt(CLI::App& app) { (void)app; }  // TODO(helper): implement

}  // namespace tgc::cli
