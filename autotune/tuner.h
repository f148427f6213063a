#pragma once
// The tuner as a library: for each problem key of a kernel, enumerate its search space
// (autotune/space.h), compile the candidates in parallel (dropping what ptxas rejects or what
// spills), check each against the reference, time the survivors and merge each result into
// the tuning database (runtime/tuning_db.h) as soon as it is measured, and each config dropped
// after the space's constraints as a rejection (a re-run neither compiles nor measures it
// again); choose the winners and export their modules (autotune/export.h). Or, with prepare(), compile and check every candidate into a plan that
// tilec-measure times on a GPU machine without LLVM (measure/plan.h). `tilec autotune` is its
// command line.
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autotune/space.h"
#include "launch/launcher.h"
#include "templates/registry.h"
#include "measure/plan.h"
#include "runtime/tuning_db.h"

namespace tilec::autotune {

// Where the candidates are timed, and for which GPU arch they are checked and exported.
struct Target {
  std::string backend, device, cc;          // cc: the GPU's compute capability ("9.0"), else empty
  std::optional<std::string> ptxas_arch;    // empty: no ptxas check
  std::vector<std::string> export_archs;    // the GPU arch, plus "host" off the GPU
};

// How the tuner talks back: lines of the run's story (the CLI prints them unless --json),
// warnings, and whether the user asked it to stop (^C: it stops after the current step,
// keeping what it measured).
struct Reporter {
  std::function<void(const std::string&)> say = [](const std::string&) {};
  std::function<void(const std::string&)> warn = [](const std::string&) {};
  std::function<bool()> interrupted = [] { return false; };
};

// One problem key to tune: its --shape values, its key and its problem (inputs and reference;
// empty when only the sizes were checked).
// The names `t`'s search spaces may use (its parameters, shape and derived values, and `sm`),
// and its candidates of `space` for `shape` with t.derive's values given to the constraints.
// `sm` is the GPU arch the candidates compile for (80 for sm_80, 90 for sm_90; 0 when there is
// none), so a space can leave out what only costs on some arch.
SpaceNames space_names(const templates::KernelTemplate& t);
Enumeration enumerate_for(const templates::KernelTemplate& t, const SearchSpace& space, const Values& shape,
                          int64_t sm = 0);
// `sm` for a ptxas arch ("sm_90" or "sm_90a": 90); 0 for none.
int64_t sm_of(const std::optional<std::string>& arch);

struct KeyToTune {
  templates::ParamMap shape;
  rt::ProblemKey key;
  templates::Problem problem;
};

// Every --shape set as a key, with its problem made (and so checked) unless `problems` is
// false (prepare without the check: the GPU machine makes each problem, and large ones take
// minutes here).
std::vector<KeyToTune> make_keys(const templates::KernelTemplate& t, const std::vector<std::vector<std::string>>& shapes,
                                 uint64_t seed, bool problems = true);

struct TuneSettings {
  std::string db = "tuning.toml";   // the database measured and rejected configs are merged into
  bool force = false;               // compile and measure again what the database has (measured or rejected)
  measure::Shard shard;             // this run's share of every key's candidates
  unsigned jobs = 0;                // compile threads (0: every core)
  std::string export_dir;           // the winners' modules, card and database (empty: none)
  std::string compiler = "tilec";   // the program compiling them, recorded in the kernel card
};

// Where one candidate's compile went, in ms, summed over its kernels: the DSL build, the phases
// of codegen::CompilePhases (ptxas 0 without the ptxas arch), and the whole candidate.
struct CompileTime {
  double build_ms = 0, lower_ms = 0, optimize_ms = 0, codegen_ms = 0, ptxas_ms = 0, total_ms = 0;
};

struct TuneResult {
  size_t candidates = 0, rejected = 0, measured = 0, skipped = 0;
  size_t compiled = 0;        // candidates built (and compiled for the ptxas arch) by this run
  size_t rejected_before = 0; // of `rejected`, those the database records as rejected by an earlier run
  std::vector<CompileTime> compile_times; // each candidate this run compiled, in the order of the candidates
  std::vector<rt::TuningEntry> best;  // each key's exact winner, in key order
  std::vector<std::string> exported;  // manifests written under export_dir
  bool interrupted = false;
  // Keys that ended without any valid candidate (every one rejected, none measured before),
  // printed as in format_key; and why candidates were dropped, by kind (a reason with other
  // numbers is the same kind): (the first reason of the kind, count), most frequent first. A run with such keys failed: nothing is exported and the command exits 1.
  std::vector<std::string> failed_keys;
  std::vector<std::pair<std::string, size_t>> reasons;
};

// Tunes every key on `launcher` (the target's backend) into settings.db and exports the
// winners. UserError for a key no candidate fits.
TuneResult tune(const templates::KernelTemplate& t, const SearchSpace& space, std::vector<KeyToTune>& keys,
                const TuneSettings& settings, const Target& target, launch::Launcher& launcher,
                const Reporter& reporter);

struct PrepareSettings {
  std::filesystem::path dir;        // the new plan folder (built in DIR.partial, renamed when whole)
  std::string space_file;           // copied into the plan
  std::string arch = "sm_90";
  uint64_t seed = 1;
  bool check = true;                // run each candidate against its reference on the emulator
  unsigned jobs = 0;
};

// --prepare: every candidate of every key compiled for the GPU arch (ptxas's rejections and
// spills dropped) and for the emulator, each checked against its reference on the emulator,
// into a plan that tilec-measure times where the GPU is. Returns the plan written.
measure::Plan prepare(const templates::KernelTemplate& t, const SearchSpace& space, std::vector<KeyToTune>& keys,
                      const PrepareSettings& settings, const Reporter& reporter);

// The config `db_path` holds for `shape` on `device` (the nearest tuned key, by t's size
// fields), over `fallback`; `note` says how it was chosen. UserError for a database that
// cannot be read.
templates::ParamMap tuned_params(const templates::KernelTemplate& t, const std::string& db_path,
                               const templates::ParamMap& shape, const std::string& device,
                               const templates::ParamMap& fallback, std::string& note);

} // namespace tilec::autotune
