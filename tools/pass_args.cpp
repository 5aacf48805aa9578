#include "tools/pass_args.h"

namespace tgc::cli {

void addPassManagerArgs(CLI::App* cmd, PassManagerOptions& pm) {
  cmd->add_flag("--print-after-all", pm.print_after_all, "Print the IR after every pass run");
  cmd->add_option("--print-after", pm.print_after, "Print the IR after this pass (repeatable)")
      ->allow_extra_args(false)
      ->delimiter(',')
      ->type_name("NAME");
  cmd->add_flag("--print-changed", pm.print_changed,
                "Print the IR only after passes that changed it");
  cmd->add_option("--dump-dir", pm.dump_dir, "Write the IR after each pass into this directory")
      ->type_name("DIR");
  cmd->add_option("--stop-after", pm.stop_after, "Stop the pipeline after this pass")
      ->type_name("NAME");
  cmd->add_flag("--time-passes", pm.time_passes, "Print wall time per pass to stderr");
}

}  // namespace tgc::cli
