#include "interp/launcher.h"

#include <chrono>

#include "interp/interpreter.h"

namespace tilec::interp {

namespace {

class InterpretLauncher final : public launch::Launcher {
public:
  std::string backend() const override { return "interpret"; }
  void launch(const ir::Kernel& kernel, int, launch::Grid grid, const std::vector<launch::Arg>& args) override {
    auto t0 = std::chrono::steady_clock::now();
    interpret(*kernel, grid, args);
    stats_.time_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    stats_.launches++;
  }
};

} // namespace

std::unique_ptr<launch::Launcher> make_interpret_launcher() { return std::make_unique<InterpretLauncher>(); }

} // namespace tilec::interp
