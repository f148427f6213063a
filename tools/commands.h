#pragma once
// The `tilec` subcommands. Each registers its options on the CLI11 app and
// returns the action to run once parsing succeeded.
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "codegen/compile.h"
#include "runtime/tuning_db.h"
#include "kernels/launcher.h"
#include "kernels/paged_attention.h"
#include "kernels/registry.h"

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
Action add_autotune(CLI::App& app, Common& common);
Action add_bench(CLI::App& app, Common& common); // cmd_bench.cpp
Action add_fuzz(CLI::App& app, Common& common);  // cmd_fuzz.cpp

// The launcher of the backend `requested` resolves to (`backend` gets its name);
// BackendUnavailable (exit 3) when this machine or build cannot run it. In cmd_run.cpp.
std::unique_ptr<kernels::Launcher> backend_launcher(const std::string& requested, std::string& backend);

// `tilec run paged_attention --tuned DB`: the config runtime/tuning_db.h selects for this
// problem (`shape` from --shape, or the shapes of `in` when `from_files`) on `backend`'s
// device, else `fallback`; says which (cmd_autotune.cpp).
kernels::PagedAttentionConfig tuned_paged_attention_config(const Common& common, const std::string& db,
                                                             const kernels::ParamMap& shape,
                                                             const kernels::PagedAttentionInputs& in,
                                                             bool from_files, const std::string& backend,
                                                             const kernels::PagedAttentionConfig& fallback);

// The problem key of the tuning database: the --shape values, choices by name (cmd_autotune.cpp).
rt::ProblemKey problem_key(const kernels::KernelTemplate& t, const kernels::ParamMap& shape);

// One way of computing paged attention: the fused kernel with a config, or the decomposition.
using PagedAttentionRun =
    std::function<interp::Buffer(const kernels::PagedAttentionInputs& in, kernels::Launcher& launcher)>;
PagedAttentionRun fused_run(const kernels::PagedAttentionConfig& cfg);

// `run` checked against `want` (the reference) with `tilec run`'s tolerances and, when correct,
// timed: `warmup` untimed runs, then `repeats` timed ones (kernel time where the backend
// measures it, else wall time). `rejected` says why it is unusable.
struct Measurement {
  std::string rejected;
  std::vector<double> times;
  kernels::LaunchStats last; // of the last timed run
  kernels::Comparison cmp;
};
Measurement measure_paged_attention(const kernels::PagedAttentionInputs& in, const interp::Buffer& want,
                                    const PagedAttentionRun& run, kernels::Launcher& launcher, int warmup,
                                    int repeats);

// Code-generation options from a template's parameters (num_warps) and the flags.
codegen::CompileOptions compile_options(const kernels::ParamMap& params, const std::string& arch,
                                        const std::string& target);

// For --seed (an unsigned option, which CLI11 would wrap a negative value around).
inline const CLI::Validator kSeedCheck(
    [](std::string& v) {
      return !v.empty() && v[0] == '-' ? "must be a non-negative integer, got " + v : std::string();
    },
    "SEED");

// Prints a human line (suppressed under --json, whose only stdout line is the object).
void say(const Common& c, const std::string& line);

} // namespace tilec::cli
