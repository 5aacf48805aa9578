#include "tools/commands.h"

namespace tgc::cli {

void registerRun(CLI::App& app) { (void)app; }  // TODO(helper): implement

}  // namespace tgc::cli
