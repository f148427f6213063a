#pragma once
// Where kernels run: one interface over the interpreter, the emulator and the
// GPU, so templates and recipes (like the paged-attention decomposition, a
// sequence of primitive launches) are written once for every backend.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "launch/args.h"

namespace tilec::launch {

// What the launches so far measured; a figure a backend cannot know stays empty.
struct LaunchStats {
  int launches = 0;
  double time_ms = 0.0;
  std::optional<int64_t> bytes_loaded, bytes_stored, unique_bytes;
  // Warp-wide requests (the emulator: rt::EmuRequestStats): their count, the sectors they
  // touch, the distinct bytes they move, and the fewest sectors those bytes could take.
  std::optional<int64_t> requests, sectors, request_bytes, ideal_sectors;
  // The emulator's request bytes per buffer, by its name (the host buffer's, else the
  // parameter's), summed over the launches.
  std::map<std::string, int64_t> buffer_request_bytes;
  // How evenly each emulated launch spread its work over its programs: what each moved in warp
  // requests (rt::EmuLaunchStats::block_request_bytes), summarized; one per launch, in order.
  struct ProgramWork {
    std::string kernel;
    int64_t programs = 0, busy = 0; // the grid's programs; those that moved more than the least did
    int64_t max_bytes = 0, min_bytes = 0;
    double mean_bytes = 0.0;        // over every program of the grid
    double busy_mean_bytes = 0.0;   // over the busy ones
  };
  std::vector<ProgramWork> program_work;
};

// Kernel times of repeated launches (after warm-up launches that are not counted).
struct TimingStats {
  int warmup = 0, repeats = 0;
  double median_ms = 0.0, min_ms = 0.0, max_ms = 0.0, mean_ms = 0.0;
};
// Summarizes per-launch times; UserError when `ms` is empty.
TimingStats summarize_times(std::vector<double> ms, int warmup);

class Launcher {
public:
  virtual ~Launcher() = default;
  virtual std::string backend() const = 0;
  // Runs `kernel` over `grid` with `args` (buffers are host buffers; the
  // launcher moves data to and from its device as needed) and adds to stats().
  virtual void launch(const ir::Kernel& kernel, int num_warps, Grid grid,
                      const std::vector<Arg>& args) = 0;
  // Times `repeats` launches after `warmup` untimed ones, for the autotuner and benchmarks.
  // Leaves stats() unchanged; the host buffers end up as after the last launch (so a kernel
  // that accumulates into its output accumulates every time). This default calls launch();
  // a device backend overrides it to move the buffers once rather than per launch.
  virtual TimingStats time(const ir::Kernel& kernel, int num_warps, Grid grid,
                           const std::vector<Arg>& args, int warmup, int repeats);
  const LaunchStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

protected:
  LaunchStats stats_;
};

// The launchers: the tile-IR interpreter's in interp/launcher.h, the one over compiled modules
// in launch/module_launcher.h, and those that compile as they go (emulate, cuda) in
// backends/launchers.h.

} // namespace tilec::launch
