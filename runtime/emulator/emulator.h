#pragma once
// The CPU emulator: runs a module compiled for the `emu` target (a shared library whose
// kernel calls the tilec_emu_* functions of abi/emu_abi.h) on host memory. Every GPU
// thread of a block is a fiber on a small stack; a block's fibers share one OS thread,
// switching at barriers and warp shuffles; the grid's blocks are spread over a pool of OS
// threads. Every global access is checked against the launch's buffers and counted.
//
// Symbol resolution. The kernel library is linked with undefined tilec_emu_* references,
// which the dynamic loader resolves against the process's global scope when the emulator
// dlopens it. So the program that links this runtime must export them: an executable is
// linked with -rdynamic (CMake: `set_target_properties(T PROPERTIES ENABLE_EXPORTS ON)`,
// or just `-Wl,--export-dynamic-symbol=tilec_emu_*`); a shared library containing the
// runtime exports them anyway, and if it was itself loaded RTLD_LOCAL the emulator promotes
// it to RTLD_GLOBAL. When neither works, opening a module raises an Error saying so.
#include "abi/error.h"
#include "runtime/launch.h"
#include "abi/manifest.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tilec::rt {

// A kernel misbehaved under emulation: an access outside every buffer or misaligned, or a
// barrier or shuffle that not every thread reached. The message names the kernel, the
// block and thread, and (for accesses) the buffer and the byte and element offsets.
class EmulationError : public Error {
public:
  using Error::Error;
};

// Warp-wide requests, as a GPU's memory system sees them: the accesses of the lanes of one
// warp at one run of one load or store site are one request (a warp-uniform load is one
// 4-byte request, not 32). For each: the distinct bytes it moves and the 32-byte sectors it
// touches; ideal_sectors is the fewest sectors those bytes could take. sectors /
// ideal_sectors > 1 shows uncoalesced or misaligned access.
struct EmuRequestStats {
  std::int64_t requests = 0, sectors = 0, request_bytes = 0, ideal_sectors = 0;
};

struct EmuBufferStats : EmuRequestStats {
  std::string name;
  std::int64_t bytes_loaded = 0, bytes_stored = 0; // by every thread, each counted
  std::int64_t unique_bytes = 0; // 32 x distinct 32-byte sectors touched (loads and stores)
};

// What one launch moved. Atomics count as a load and a store of their operand. Sectors are
// counted from each buffer's start, as if it were allocated 32-byte aligned (GPU
// allocations are), so the figures do not depend on where the host allocator put it.
struct EmuLaunchStats : EmuRequestStats {
  std::int64_t bytes_loaded = 0, bytes_stored = 0, unique_bytes = 0;
  double time_ms = 0.0;
  std::vector<EmuBufferStats> buffers; // one per pointer argument, in parameter order
  // What each program (block, by linear index x + X * (y + Y * z)) moved in warp requests:
  // how evenly a launch spreads its work. Empty for grids of more than kMaxBlocksCounted.
  std::vector<std::int64_t> block_request_bytes;
};
inline constexpr std::uint64_t kMaxBlocksCounted = std::uint64_t(1) << 22;

// The order in which the threads of a block run between two sync points. A correct kernel
// gives the same result in every order; a missing barrier shows in some orders (and is
// caught by the shared-memory race check in all). TILEC_EMU_SCHEDULE=forward|reverse|
// random|random:SEED sets the default for a process (CI runs the suite under two orders).
enum class EmuSchedule { forward, reverse, random };
struct EmuScheduleChoice {
  EmuSchedule order = EmuSchedule::forward;
  std::uint64_t seed = 1;
};
// TILEC_EMU_SCHEDULE's choice (forward when unset); EmulationError when it is malformed.
EmuScheduleChoice default_schedule();

struct EmuOptions {
  int workers = 0;                    // OS threads for the grid's blocks; 0: one per core
  std::size_t stack_bytes = 64 << 10; // per GPU thread
  EmuScheduleChoice schedule = default_schedule();
};

// An emu module opened with dlopen: `m.emulator` (through m.code_path), m.symbol,
// m.threads_per_block, m.shared_bytes and m.params are used.
class EmuModule {
public:
  explicit EmuModule(const Manifest& m);
  ~EmuModule();
  EmuModule(const EmuModule&) = delete;
  EmuModule& operator=(const EmuModule&) = delete;

  const Manifest& manifest() const { return manifest_; }

  // Runs the kernel over `grid` with `args` (checked against the manifest's parameters; a
  // buffer's address is a host pointer). `buffer_names`, when given, names the arguments in
  // error messages and stats instead of the parameter names. Throws EmulationError.
  // Launches of one module may run concurrently.
  EmuLaunchStats launch(Dim3 grid, std::span<const Arg> args,
                        std::span<const std::string> buffer_names = {},
                        const EmuOptions& options = {}) const;

private:
  Manifest manifest_;
  void* handle_ = nullptr;
  void* entry_ = nullptr;
};

} // namespace tilec::rt
