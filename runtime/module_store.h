#pragma once
// Finding compiled modules by what they are specialized on, for host programs that ship
// without the compiler (no LLVM here): a module directory written by
// `tilec autotune --export DIR` or `tilec compile -o DIR`, then the on-disk module cache.
//
// A module matches a query when its kernel and target agree and every value of its
// manifest's [specialization] equals the query's value of that name (a query holds the
// problem key and the config, so it may name more: batch or ctx do not specialize the
// paged-attention kernel). A module whose code files are missing or fail their recorded
// checksums is never used. A host that also links the compiler registers a builder
// (backends::enable_module_builder) and gets missing modules compiled on the spot; one
// that links only the runtime gets ModuleNotFound naming the module and the command
// that builds it.
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "abi/error.h"
#include "abi/manifest.h"
#include "runtime/tuning_db.h"

namespace tilec::rt {

// The module cache: $TILEC_CACHE_DIR, else $XDG_CACHE_HOME/tilec, else ~/.cache/tilec
// (not created here).
std::filesystem::path cache_root();
// Where modules addressed by their specialization live in the cache: cache_root()/modules.
std::filesystem::path cache_module_dir();

using Spec = std::map<std::string, SpecValue>;

struct ModuleQuery {
  std::string kernel;           // the manifest's kernel, e.g. "paged_attention_combine"
  std::string arch = "sm_90";   // "sm_80", "sm_90", or "host" for the emulator
  Spec values;                  // problem key and config, "name = value"
  // When set, only a module of exactly this IR (manifest ir_hash) matches: what a builder
  // asks for, so a module of an older compiler's IR is rebuilt rather than reused.
  std::string ir_hash;
  // The `tilec` command that builds this module (an output folder is appended), for errors.
  std::string build_command;
};

std::string describe(const ModuleQuery& q); // "paged_attention for sm_90 with block_n=32 ..."
Spec spec_of(const ProblemKey& key, const TunedConfig& config);

// Why the module at `m` cannot be used (a code file missing, truncated or changed), or "".
std::string check_module(const Manifest& m);

// Whether `m` is the module `q` asks for (kernel, arch, every specialization value, and
// the IR hash when the query names one).
bool matches(const Manifest& m, const ModuleQuery& q);

// Searches `dirs` in order (each with its subfolders) for a usable module matching `q`;
// among several in one folder, the newest. Unusable candidates are reported in
// `problems` (one line each) and skipped.
std::optional<Manifest> find_module(const std::vector<std::filesystem::path>& dirs, const ModuleQuery& q,
                                    std::vector<std::string>* problems = nullptr);

// Returns the module `q` asks for: a current one from `dirs` or the cache, else compiled
// into the cache.
using ModuleBuilder = std::function<Manifest(const ModuleQuery& q, const std::vector<std::filesystem::path>& dirs)>;
// Installs (or, with an empty function, removes) the builder load_module uses. The
// compiler library provides one: backends::enable_module_builder().
void set_module_builder(ModuleBuilder builder);
bool have_module_builder();

// A module that is nowhere to be found and that nothing here can build.
class ModuleNotFound : public Error {
public:
  using Error::Error;
};

// With a builder: the builder's module (it finds a current one in `dirs` and the cache or
// compiles it). Without: find_module over `dirs` then cache_module_dir(), else
// ModuleNotFound naming the module, where it looked, what was unusable, and the command.
Manifest load_module(const ModuleQuery& q, const std::vector<std::filesystem::path>& dirs);

// The documented defaults of a kernel's tunables when the database has nothing for a
// problem (paged_attention: block_n=32, head_group=Hq/Hkv, num_warps=4, num_splits=1);
// empty for a kernel tilec does not tune.
TunedConfig default_config(const std::string& kernel, const ProblemKey& key);

// The modules to launch for `kernel` on a problem: the kernel itself and, for
// paged_attention with num_splits > 1, the paged_attention_combine kernel after it.
std::vector<std::string> kernels_of(const std::string& kernel, const TunedConfig& config);

struct TunedModules {
  TunedConfig config;              // the selected config, or the defaults
  std::optional<Selection> selection; // empty when the defaults were used
  std::string note;                // one line: what was chosen and why
  std::vector<Manifest> modules;   // in launch order (kernels_of)
};

// Selects `kernel`'s config for `key` on `device` from `db` (select_config; nearest key
// by ctx, batch, max_blocks, num_blocks; else default_config) and loads its modules for
// `arch` through load_module. `extra` holds values that specialize the modules but are
// not part of the tuning key: for paged_attention, softcap (1 when a softcap is applied;
// 0 when absent).
TunedModules load_tuned(const TuningDb& db, const std::string& kernel, const std::string& device,
                        const ProblemKey& key, const std::string& arch,
                        const std::vector<std::filesystem::path>& dirs, const Spec& extra = {});

} // namespace tilec::rt
