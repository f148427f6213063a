#pragma once
// The `tilec` subcommands. Each registers its options on the CLI11 app and
// returns the action to run once parsing succeeded.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "codegen/compile.h"
#include "templates/registry.h"

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
Action add_compile(CLI::App& app, Common& common);

// Code-generation options from a template's parameters (num_warps) and the flags.
codegen::CompileOptions compile_options(const templates::ParamMap& params, const std::string& arch,
                                        const std::string& target);

// Prints a human line (suppressed under --json, whose only stdout line is the object).
void say(const Common& c, const std::string& line);

} // namespace tilec::cli
