#pragma once
// The `tilec` subcommands. Each registers its options on the CLI11 app and
// returns the action to run once parsing succeeded.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace tilec::cli {

// DESIGN.md's exit codes.
enum ExitCode : int { kOk = 0, kFailed = 1, kBadInput = 2, kBackendUnavailable = 3 };

// Options every command shares.
struct Common {
  bool json = false;
};

using Action = std::function<int()>;

Action add_list(CLI::App& app, Common& common);
Action add_ir(CLI::App& app, Common& common);
Action add_run(CLI::App& app, Common& common);

// Prints a human line (suppressed under --json, whose only stdout line is the object).
void say(const Common& c, const std::string& line);

} // namespace tilec::cli
