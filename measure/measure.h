#pragma once
// Checking and timing configs of a kernel without the compiler: what `tilec autotune`,
// `tilec bench`, `tilec-measure` (a plan's candidates, measure/plan.h) and gpu_bench share.
// No LLVM here: a GPU machine without it builds this (TILEC_RUNTIME_ONLY=ON).
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launch/launcher.h"
#include "templates/registry.h"
#include "measure/plan.h"

namespace tilec::measure {

// One config of `t` on problem `p` (run on `path`, empty: the default) checked against the
// reference with the problem's tolerances and, when correct, timed: `warmup` untimed runs,
// then `repeats` timed ones (kernel time where the backend measures it, else wall time).
// The outputs are put back as the problem made them. `rejected` says why it is unusable.
struct Measurement {
  std::string rejected;
  std::vector<double> times;
  launch::LaunchStats last; // of the last timed run
  templates::Comparison cmp;
  // The check run moved more than the kernel's traffic budget allows (templates::traffic_error);
  // not a rejection: the result is right.
  std::string traffic_error;
};
Measurement measure_problem(const templates::KernelTemplate& t, const std::string& path,
                            const templates::ParamMap& params, templates::Problem& p, launch::Launcher& launcher,
                            int warmup, int repeats);

double median(std::vector<double> v);

// A tuning database entry for a measured config (median, min, max, GB/s, counted bytes).
rt::TuningEntry tuning_entry(const rt::TuningEntry& slot, const templates::ParamMap& config, const Measurement& m,
                             const templates::Problem& p);

// The --shape values of a problem key (choices by name) for `t`; UserError on a name or
// choice `t` does not declare.
templates::ParamMap shape_of_key(const templates::KernelTemplate& t, const rt::ProblemKey& key);

// A launcher over the modules in `dir` (each kernel of a run found by name among the folder's
// manifests), on the GPU when `gpu` (BackendUnavailable without one), else on the emulator.
std::unique_ptr<launch::Launcher> folder_launcher(const std::filesystem::path& dir, bool gpu,
                                                   const std::string& backend);

// How `tilec-measure` runs a plan.
struct MeasureOptions {
  std::filesystem::path plan_dir;
  std::string backend = "cuda"; // cuda | emulate
  Shard shard;
  std::string db = "tuning.toml";
  std::optional<int> warmup, repeats; // default: the plan's
};

struct MeasureSummary {
  std::string device, backend;
  size_t candidates = 0, measured = 0, rejected = 0;
  std::vector<std::string> failures; // candidate: why (wrong results, failed launches)
};

// Checks that every candidate of the shard has its modules for the backend (a missing or
// corrupt module is a PlanError listing each, before anything runs), then checks each against
// the reference (inputs made on the host from the plan's seeds) and times it, merging each
// result into opts.db as soon as it is measured. `progress` gets one line per candidate.
MeasureSummary measure_plan(const MeasureOptions& opts, const std::function<void(const std::string&)>& progress);

// The fastest measured candidate of each of the plan's problems in a database (entries of the
// plan's kernel whose key is the problem's and whose config is a candidate's):
// what scripts/gpu_check.sh runs again on the same inputs as its peers. A problem with none
// measured is left out.
struct Winner {
  size_t problem = 0;
  const PlanCandidate* candidate = nullptr;
  rt::TuningEntry entry;
};
// Per problem, the fastest candidate measured with `backend` (cuda or emulate: times from
// different devices are not compared).
std::vector<Winner> plan_winners(const Plan& plan, const rt::TuningDb& db, const std::string& backend);

} // namespace tilec::measure
