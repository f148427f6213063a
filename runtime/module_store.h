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
#include "runtime/op_run.h"
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

// What a host needs to know of a kernel, beyond its modules, to pick and load them. tilec
// writes it beside the modules it exports or compiles, as <kernel>.kernel.toml:
//
//   kernel = "paged_attention"
//   size_fields = ["sq", "ctx", "batch", "max_blocks", "num_blocks"]  # a nearer key may differ in these
//   [size_buckets]    # ... but only within the bucket of these (upper bounds; rt::SizeBuckets)
//   sq = [1, 4, 16, 128]
//   [defaults]        # the config of a problem the database has nothing for
//   block_n = 32
//   [spec_defaults]   # specialization values outside key and config, unless the caller gives them
//   softcap = 0
//   [run]             # optional: the whole run as data (runtime/op_run.h), what rt::OpStore executes
struct KernelCard {
  std::string kernel;
  TunedConfig defaults;
  std::vector<std::string> size_fields;
  SizeBuckets size_buckets;
  Spec spec_defaults;
  // The program that compiles this kernel (tilec, or a user's own CLI built with
  // tilec_add_kernels): what a missing module's hint tells to run.
  std::string compiler = "tilec";
  // Each launch of one run, its grid, buffers and workspace (runtime/op_run.h); empty for a
  // kernel whose card does not describe its run.
  std::optional<OpRun> run;
  bool operator==(const KernelCard&) const = default;
};
// Both throw ManifestError naming the file and what is wrong.
KernelCard read_kernel_card(const std::filesystem::path& file);
std::string format_kernel_card(const KernelCard& card);
// Writes <dir>/<kernel>.kernel.toml (a temporary file renamed into place); returns its path.
std::filesystem::path write_kernel_card(const KernelCard& card, const std::filesystem::path& dir);
// The card of `kernel` in `dirs` (in order), then in cache_module_dir(), then from the
// provider a host that links the compiler installs (backends::enable_module_builder).
std::optional<KernelCard> find_kernel_card(const std::string& kernel, const std::vector<std::filesystem::path>& dirs);
using KernelCardProvider = std::function<std::optional<KernelCard>(const std::string& kernel)>;
void set_kernel_card_provider(KernelCardProvider provider);

struct TunedModules {
  TunedConfig config;              // the selected config, or the defaults
  std::optional<Selection> selection; // empty when the defaults were used
  std::string note;                // one line: what was chosen and why
  std::vector<Manifest> modules;   // in launch order: the kernel's, then the rest of its `run`
};

// Selects `kernel`'s config for `key` on `device` from `db` (select_config, nearest key by
// the kernel card's size fields; else the card's defaults) and loads its modules for `arch`
// through load_module: the kernel's own, then the other kernels its manifest's `run` lists.
// `extra` holds values that specialize the modules but are not part of the tuning key (for
// paged_attention, softcap: 1 when a softcap is applied); the card's spec_defaults fill in
// those not given. Without a card only an exactly tuned key is served.
TunedModules load_tuned(const TuningDb& db, const std::string& kernel, const std::string& device,
                        const ProblemKey& key, const std::string& arch,
                        const std::vector<std::filesystem::path>& dirs, const Spec& extra = {});

} // namespace tilec::rt
