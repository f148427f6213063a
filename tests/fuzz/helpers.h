#pragma once
// Launchers for testing the fuzzer itself: the interpreter as the "other" backend (agrees by
// construction) and one with a planted bug.
#include <functional>

#include "fuzz/program.h"
#include "interp/interpreter.h"
#include "launch/launcher.h"

namespace tilec::fuzz::test {

// Runs the interpreter, then lets `plant` change the buffers: a backend with a known bug.
class PlantedBugLauncher final : public launch::Launcher {
public:
  using Plant = std::function<void(const ir::Function&, const std::vector<launch::Arg>&)>;
  explicit PlantedBugLauncher(Plant plant) : plant_(std::move(plant)) {}
  std::string backend() const override { return "planted-bug"; }
  void launch(const ir::Kernel& kernel, int, launch::Grid grid, const std::vector<launch::Arg>& args) override {
    interp::interpret(*kernel, grid, args);
    plant_(*kernel, args);
  }

private:
  Plant plant_;
};

// Whether `fn` has an op of kind `k` anywhere.
inline bool has_op(const ir::Function& fn, ir::OpKind k) {
  bool found = false;
  ir::walk(const_cast<ir::Block&>(fn.body), [&](ir::Op& op) { found = found || op.kind == k; });
  return found;
}

} // namespace tilec::fuzz::test
