#include "tools/commands.h"

namespace tilec::cli {

// Placeholder while `tilec bench` is being written: registered so the command list is fixed.
Action add_bench(CLI::App& app, Common&) {
  (void)app;
  return [] () -> int { throw UserError("tilec bench: not implemented yet"); };
}

} // namespace tilec::cli
