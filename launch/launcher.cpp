#include "launch/launcher.h"

#include "ir/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace tilec::launch {

TimingStats summarize_times(std::vector<double> ms, int warmup) {
  if (ms.empty()) throw UserError("no launch times to summarize: repeats must be at least 1");
  std::sort(ms.begin(), ms.end());
  TimingStats t;
  t.warmup = warmup;
  t.repeats = int(ms.size());
  size_t mid = ms.size() / 2;
  t.median_ms = ms.size() % 2 ? ms[mid] : 0.5 * (ms[mid - 1] + ms[mid]);
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  t.mean_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / double(ms.size());
  return t;
}

TimingStats Launcher::time(const ir::Kernel& kernel, int num_warps, Grid grid,
                           const std::vector<Arg>& args, int warmup, int repeats) {
  if (warmup < 0 || repeats < 1)
    throw UserError(fmt::format("timing needs warmup >= 0 and repeats >= 1, got warmup {} and repeats {}", warmup,
                                repeats));
  LaunchStats saved = stats_;
  for (int i = 0; i < warmup; ++i) launch(kernel, num_warps, grid, args);
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    double before = stats_.time_ms;
    launch(kernel, num_warps, grid, args);
    ms.push_back(stats_.time_ms - before);
  }
  stats_ = saved;
  return summarize_times(std::move(ms), warmup);
}

} // namespace tilec::launch
