#include "tools/commands.h"

namespace tilec::cli {

// Placeholder while `tilec fuzz` is being written: registered so the command list is fixed.
Action add_fuzz(CLI::App& app, Common&) {
  (void)app;
  return [] () -> int { throw UserError("tilec fuzz: not implemented yet"); };
}

} // namespace tilec::cli
