#include "templates/launcher.h"

#include "ir/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <numeric>

namespace tilec::templates {

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

TimingStats Launcher::time(const ir::Kernel& kernel, int num_warps, interp::Grid grid,
                           const std::vector<interp::Arg>& args, int warmup, int repeats) {
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

namespace {

class InterpretLauncher final : public Launcher {
public:
  std::string backend() const override { return "interpret"; }
  void launch(const ir::Kernel& kernel, int, interp::Grid grid,
              const std::vector<interp::Arg>& args) override {
    auto t0 = std::chrono::steady_clock::now();
    interp::interpret(*kernel, grid, args);
    stats_.time_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    stats_.launches++;
  }
};

} // namespace

std::unique_ptr<Launcher> make_interpret_launcher() { return std::make_unique<InterpretLauncher>(); }

} // namespace tilec::templates
