#pragma once
// A measurement plan (`tilec autotune … --prepare DIR`): every candidate of a search space,
// compiled and checked where the compiler is, to be timed by `tilec-measure` where the GPU is
// (no LLVM there). The folder is self-contained:
//
//   DIR/plan.toml                     this file's format (below)
//   DIR/space.toml                    a copy of the search space
//   DIR/modules/<arch>/p<P>/c<I>/     the GPU modules of candidate I of problem P (manifests,
//                                     PTX, cubin; several when a run launches several kernels)
//   DIR/modules/host/p<P>/c<I>/       the same candidate for the CPU emulator
//
// plan.toml:
//
//   version = 1
//   kernel = "paged_attention"
//   arch = "sm_90"
//   compiler = "tilec 0.9.0"
//   created_at = "2026-12-02T10:00:00Z"
//   space = "space.toml"
//   warmup = 1                        # untimed runs after the check
//   repeats = 3                       # timed runs per candidate
//   problems = 1                      # counts, checked when read: a truncated plan is refused
//   candidates = 2
//
//   [[problem]]                       # one tuning key: its inputs are made from these, not stored
//   key = { batch = 2, ctx = 256, dtype = "f16", ... }   # --shape values, choices by name
//   seed = 1
//
//   [[candidate]]
//   problem = 0                       # index into [[problem]]
//   index = 0                         # position in the space's order for that problem
//   config = { block_n = 32, head_group = 2, num_warps = 4, ... }   # every template parameter
//   modules = "p0/c0"
//   registers = 96                    # optional: the most any of its kernels uses (ptxas)
//   checked = true                    # checked against the reference on the emulator
//   max_abs_err = 1.2e-07             # optional: that check's error
//
//   [[rejected]]                      # candidates dropped while preparing, and why
//   problem = 0
//   config = { ... }
//   reason = "spills on sm_90 (8 bytes stored, 8 loaded)"
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "abi/error.h"
#include "templates/registry.h"
#include "runtime/tuning_db.h"

namespace tilec::measure {

// A plan that cannot be read, is truncated, or whose modules are missing or corrupt; the
// message names the file (and line:column where there is one).
class PlanError : public rt::ManifestError {
public:
  using rt::ManifestError::ManifestError;
};

struct PlanProblem {
  rt::ProblemKey key;
  uint64_t seed = 1;
};

struct PlanCandidate {
  size_t problem = 0;
  size_t index = 0;
  templates::ParamMap config;
  std::string modules; // relative to modules/<arch>/
  std::optional<int> registers;
  bool checked = false;
  std::optional<double> max_abs_err;
};

struct PlanRejected {
  size_t problem = 0;
  templates::ParamMap config;
  std::string reason;
};

struct Plan {
  std::string kernel, arch, compiler, created_at;
  std::string space = "space.toml";
  int warmup = 1, repeats = 3;
  std::vector<PlanProblem> problems;
  std::vector<PlanCandidate> candidates;
  std::vector<PlanRejected> rejected;
};

constexpr const char* kPlanFile = "plan.toml";

// plan.toml's text.
std::string format_plan(const Plan& plan);
// Parses plan.toml's text; PlanError naming `source`:line:column on anything malformed, and
// when the counts disagree with what the file holds (a truncated plan).
Plan parse_plan(std::string_view text, const std::string& source);
// Writes DIR/plan.toml (atomically: a temporary file renamed into place).
void write_plan(const std::filesystem::path& dir, const Plan& plan);
// Reads DIR/plan.toml.
Plan read_plan(const std::filesystem::path& dir);

// The folder of a candidate's modules for `arch` ("sm_90", or "host" for the emulator).
std::filesystem::path candidate_dir(const std::filesystem::path& plan_dir, const std::string& arch,
                                    const PlanCandidate& c);
// Why the modules of `c` for `arch` cannot run (a missing folder, manifest or code file; a
// code file whose size or checksum differs from its manifest's); empty when they can.
std::string check_candidate_modules(const std::filesystem::path& plan_dir, const std::string& arch,
                                    const PlanCandidate& c);

// This run's share of a list measured by N machines: "I/N" takes positions I-1, I-1+N, ...
struct Shard {
  size_t index = 0, count = 1;
  bool takes(size_t position) const { return position % count == index; }
  bool whole() const { return count == 1; }
};
// Parses "I/N" (1 <= I <= N); an empty string is the whole list. UserError naming `flag`.
Shard parse_shard(const std::string& text, const std::string& flag = "--shard");

} // namespace tilec::measure
