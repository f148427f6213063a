#pragma once
// Where kernels run: one interface over the interpreter, the emulator and the
// GPU, so templates and recipes (like the paged-attention decomposition, a
// sequence of primitive launches) are written once for every backend.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "interp/interpreter.h"
#include "ir/ir.h"

namespace tilec::templates {

// What the launches so far measured; a figure a backend cannot know stays empty.
struct LaunchStats {
  int launches = 0;
  double time_ms = 0.0;
  std::optional<int64_t> bytes_loaded, bytes_stored, unique_bytes;
};

class Launcher {
public:
  virtual ~Launcher() = default;
  virtual std::string backend() const = 0;
  // Runs `kernel` over `grid` with `args` (buffers are host buffers; the
  // launcher moves data to and from its device as needed) and adds to stats().
  virtual void launch(const ir::Kernel& kernel, int num_warps, interp::Grid grid,
                      const std::vector<interp::Arg>& args) = 0;
  const LaunchStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

protected:
  LaunchStats stats_;
};

// The tile-IR interpreter as a launcher.
std::unique_ptr<Launcher> make_interpret_launcher();
// The CPU emulator running the emu-target code (runtime/emulator.h) as a launcher.
std::unique_ptr<Launcher> make_emulate_launcher();

} // namespace tilec::templates
