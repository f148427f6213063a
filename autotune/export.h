#pragma once
// Exporting tuned winners: each winner's modules (for every GPU arch asked, and "host", the
// emulator's), the kernel's card and the database's measurements, into a folder a host program
// loads with runtime/module_store.h alone. `tilec autotune --export` exports the winners of its
// run; `tilec db export` those of an existing database, measuring nothing.
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/tuning_db.h"
#include "templates/registry.h"

namespace tilec::autotune {

// Writes the modules of `winner`'s config at `shape` (the sizes of its key) for every arch in
// `archs` and every module variant of `t` into `dir`; `each` hears of each manifest as it is
// written. Returns the manifests written.
std::vector<std::string> export_modules(const templates::KernelTemplate& t, const rt::TuningEntry& winner,
                                        const templates::ParamMap& shape, const std::vector<std::string>& archs,
                                        const std::filesystem::path& dir,
                                        const std::function<void(const std::string&)>& each = {});

// Writes `t`'s kernel card (recording `compiler`) into `dir`, and merges `db`'s measurements
// (not its rejections, which only the tuner reads, so any runtime reads the copy) into
// dir/<db_path's file name>, unless that is db_path itself. `warn` hears of a copy there that
// could not be read (it is replaced).
void export_card_and_db(const templates::KernelTemplate& t, const rt::TuningDb& db, const std::string& db_path,
                        const std::filesystem::path& dir, const std::string& compiler,
                        const std::function<void(const std::string&)>& warn);

// Which winners `tilec db export` writes, and for which archs.
struct ExportRequest {
  std::string db_path;                 // the database (read; its copy lands in `dir`)
  std::filesystem::path dir;           // created when missing
  std::optional<std::string> kernel;   // only this kernel's winners
  std::vector<std::string> archs;      // empty: each winner's GPU arch (its compute capability's,
                                       // else sm_90) and "host"
  std::string compiler = "tilec";      // recorded in the kernel cards
};

struct Exported {
  std::vector<std::string> kernels;    // in database order
  std::vector<rt::TuningEntry> winners; // one per (kernel, device, key): its fastest config
  std::vector<std::string> manifests;  // each once
};

// Every (kernel, device, key) of the database, its fastest measured config: the winners
// `tilec db export` writes (kernel: only that one's).
std::vector<rt::TuningEntry> winners(const rt::TuningDb& db, const std::optional<std::string>& kernel);

// The GPU arch a winner's modules are exported for by default: its compute capability's
// ("9.0": sm_90), else sm_90.
std::string default_arch(const rt::TuningEntry& winner);

// Exports the winners of a database, saying one line per module written through `say`.
// UserError (exit 2) for a missing or unreadable database, one without measurements (or
// without any of `kernel`), and a kernel this tilec does not know.
Exported export_database(const ExportRequest& request, const std::function<void(const std::string&)>& say,
                         const std::function<void(const std::string&)>& warn);

} // namespace tilec::autotune
