#pragma once
// The `tilec` subcommands. Each registers its options on the CLI11 app and
// returns the action to run once parsing succeeded.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "codegen/compile.h"
#include "runtime/tuning_db.h"
#include "launch/launcher.h"
#include "templates/registry.h"
#include "measure/measure.h"

namespace tilec::cli {

// The CLI's exit codes.
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
Action add_autotune(CLI::App& app, Common& common);
Action add_bench(CLI::App& app, Common& common); // cmd_bench.cpp
Action add_fuzz(CLI::App& app, Common& common);  // cmd_fuzz.cpp
Action add_db(CLI::App& app, Common& common);    // cmd_db.cpp: db merge, db show

// The launcher of the backend `requested` resolves to (`backend` gets its name);
// BackendUnavailable (exit 3) when this machine or build cannot run it. In cmd_run.cpp.
std::unique_ptr<launch::Launcher> backend_launcher(const std::string& requested, std::string& backend);

// The params `--tuned DB` selects for a problem of `t` with these --shape values on
// `backend`'s device: the exact key, else the nearest by t.size_fields, else `fallback`;
// says which (cmd_autotune.cpp).
templates::ParamMap tuned_params(const Common& common, const templates::KernelTemplate& t, const std::string& db,
                               const templates::ParamMap& shape, const std::string& backend,
                               const templates::ParamMap& fallback);

// Checking and timing one config (measure/measure.h), shared with tilec-measure.
using measure::Measurement;
using measure::measure_problem;

// For --seed (an unsigned option, which CLI11 would wrap a negative value around).
inline const CLI::Validator kSeedCheck(
    [](std::string& v) {
      return !v.empty() && v[0] == '-' ? "must be a non-negative integer, got " + v : std::string();
    },
    "SEED");

// Prints a human line (suppressed under --json, whose only stdout line is the object).
void say(const Common& c, const std::string& line);

// The name this program was started as ("tilec", or a user's own CLI built with
// tilec_add_kernels): what its messages begin with and its hints name.
const std::string& program_name();

} // namespace tilec::cli
