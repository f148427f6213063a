#include "templates/launcher.h"

#include <chrono>

namespace tilec::templates {

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
