#pragma once
// The tuning database (docs/ARCHITECTURE.md "File formats"): what `tilec autotune`
// measured, keyed by kernel, device (name and compute capability), backend and problem
// key, one entry per (key, config), so adding a config never discards earlier results.
// A host program reads it and selects a config without the compiler (no LLVM here).
//
//   version = 1
//
//   [[entry]]
//   kernel = "paged_attention"
//   device = "NVIDIA H100 80GB HBM3"   # "cpu-emulator" / "cpu-interpreter" off the GPU
//   compute_capability = "9.0"          # "" off the GPU
//   backend = "cuda"                    # cuda | emulate | interpret
//   key = { batch = 2, ctx = 256, dtype = "f32", head_dim = 64, hkv = 2, hq = 8, ... }
//   config = { block_n = 32, head_group = 4, num_splits = 1, num_warps = 4 }
//   median_ms = 0.0123
//   min_ms = 0.0119
//   max_ms = 0.0131
//   repeats = 5
//   gbps = 812.5                        # ideal bytes / median time
//   ideal_bytes = 1056800
//   bytes_loaded = 1100000              # optional: when the backend counts bytes
//   bytes_stored = 8192
//   unique_bytes = 1090000
//   max_abs_err = 2.4e-07
//   measured_at = "2025-01-01T12:00:00Z"
//
// Configs the tuner dropped after the search space's constraints (which cost nothing to
// recompute), so that a re-run neither compiles nor measures them again. A file that holds
// any says version = 2 (a reader of version 1 refuses it by its version); one without is
// written as version 1, as before.
//
//   [[rejected]]
//   kernel = "matmul"
//   device = "cpu-emulator"
//   compute_capability = ""
//   backend = "emulate"
//   key = { dtype = "f32", k = 50, m = 100, n = 75 }
//   config = { block_k = 32, block_m = 64, block_n = 64, num_warps = 4 }
//   stage = "compile"                   # build | compile | run
//   arch = "sm_90"                      # the GPU arch it was compiled for ("compile"), else ""
//   reason = "kernel 'matmul' needs 264192 bytes of shared memory per block; ..."
//   compiler = "tilec 0.1.0"
//   rejected_at = "2025-01-01T12:00:00Z"
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "abi/error.h"

namespace tilec::rt {

// A database that cannot be read or parsed, or an entry missing a field; the message
// names the file and line:column.
class TuningDbError : public ManifestError {
public:
  using ManifestError::ManifestError;
};

using KeyValue = std::variant<int64_t, std::string>;
using ProblemKey = std::map<std::string, KeyValue>;
using TunedConfig = std::map<std::string, int64_t>;

std::string format_key(const ProblemKey& key);      // "batch=2 ctx=256 dtype=f32"
std::string format_config(const TunedConfig& cfg); // "block_n=32 num_warps=4"
// Parses "k=v k=v" (integers where they parse as such, else strings); TuningDbError if malformed.
ProblemKey parse_key(std::string_view text);

struct TuningEntry {
  std::string kernel, device, compute_capability, backend;
  ProblemKey key;
  TunedConfig config;
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int64_t repeats = 0;
  std::optional<double> gbps;
  std::optional<int64_t> ideal_bytes, bytes_loaded, bytes_stored, unique_bytes;
  std::optional<double> max_abs_err;
  std::string measured_at;

  // Whether `o` measures the same thing (everything but the measurements).
  bool same_slot(const TuningEntry& o) const;
};

// A config the tuner dropped before it could be measured, and why: the template refused it
// ("build"), it failed to compile for `arch` or spills there ("compile"), or it failed or gave a
// wrong result on the backend ("run").
struct TuningRejection {
  std::string kernel, device, compute_capability, backend;
  ProblemKey key;
  TunedConfig config;
  std::string stage;       // build | compile | run
  std::string arch;        // the GPU arch of a "compile" rejection; empty otherwise
  std::string reason;      // one line
  std::string compiler;    // "tilec 0.1.0": a rejection by another version is tried again
  std::string rejected_at;

  // The same (kernel, device, backend, key, config) as `e`.
  bool same_config(const TuningEntry& e) const;
  // The same config, rejected for the same arch.
  bool same_slot(const TuningRejection& o) const;
};

struct TuningDb {
  std::vector<TuningEntry> entries;
  std::vector<TuningRejection> rejections;

  // Adds `newer`'s entries and rejections, replacing those of the same slot; the newer verdict
  // on a config wins (a measurement removes its rejections, a rejection its measurement).
  void merge(const TuningDb& newer);
  const TuningEntry* find(const TuningEntry& slot) const;
  // The rejection that applies to `slot`'s config for a run compiling for `arch` ("" when it
  // does not compile for a GPU) with `compiler`: one of another stage, or of the compile
  // stage for that arch, recorded by that compiler.
  const TuningRejection* find_rejection(const TuningEntry& slot, const std::string& arch,
                                        const std::string& compiler) const;
};

// Parses a database; TuningDbError naming `source`:line:column on anything malformed.
TuningDb parse_tuning_db(std::string_view text, const std::string& source);
// Reads `path`; a missing file is an empty database.
TuningDb read_tuning_db(const std::string& path);
std::string format_tuning_db(const TuningDb& db);
// Writes `db` to `path`, replacing it atomically (temporary file, fsync, rename); no lock
// and no merge with what is there (merge_into_file does both).
void write_tuning_db(const std::string& path, const TuningDb& db);

// Under an exclusive flock on `path`.lock: reads what is on disk now, merges `add`
// over it and replaces the file atomically (temporary file, fsync, rename), so
// concurrent writers lose nothing. A file on disk that does not parse is moved aside
// to `path`.corrupt-<timestamp> and `warning` says so. Returns the merged database.
TuningDb merge_into_file(const std::string& path, const TuningDb& add, std::string* warning = nullptr);

// Now as "2026-01-01T12:00:00Z" (UTC): what measured_at and a plan's created_at record.
std::string utc_now();

// The device name tilec uses for a CPU backend ("cpu-emulator", "cpu-interpreter").
std::string host_device_name(const std::string& backend);

// Size fields whose values fall into buckets, by the buckets' upper bounds in increasing order:
// {"sq", {1, 4, 16, 128}} is 1, 2-4, 5-16, 17-128 and above 128. A tuned key serves a nearer
// one only from the same bucket (paged attention: decode and prefill never share a winner).
using SizeBuckets = std::map<std::string, std::vector<int64_t>>;
// The bucket of `v` in field `field` (the index of the first bound >= v; the bound count when
// above all); -1 when the field has no buckets or `v` is not an integer.
int size_bucket(const SizeBuckets& buckets, const std::string& field, const KeyValue& v);

struct Selection {
  TuningEntry entry;   // the fastest measured config of the chosen key
  std::string rule;    // "exact", "nearest"
  std::string note;    // one line saying what was chosen and why
};

// Selects a config for `kernel` on `device` and problem `key`:
//  1. entries of that device (if it has none, of other devices of its kind, with a note: a GPU
//     never gets a CPU backend's entries ("cpu-emulator", "cpu-interpreter"), nor the reverse);
//  2. an entry with exactly `key`: the fastest config measured for it;
//  3. else the nearest key that agrees on every field but `distance_fields` (the kernel's
//     size fields: nearest in the first field first, then the next: |log2| of the ratio) and
//     whose value of each field in `buckets` lies in the asked value's bucket;
//  4. else nothing: the caller uses its defaults (and should say so).
std::optional<Selection> select_config(const TuningDb& db, const std::string& kernel, const std::string& device,
                                       const ProblemKey& key, const std::vector<std::string>& distance_fields,
                                       const SizeBuckets& buckets = {});

} // namespace tilec::rt
