#pragma once
// Runs kernels compiled for the emu target in the emulator, so the codegen
// tests can check the real SIMT lowering on the CPU against the interpreter.
#include <catch2/catch.hpp>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <filesystem>
#include <fstream>
#include <string>

#include "backends/launchers.h"
#include "codegen/compile.h"
#include "interp/interpreter.h"
#include "interp/launcher.h"
#include "abi/float16.h"
#include "abi/error.h"
#include "launch/launcher.h"

namespace tilec::codegen::test {

// Compiles `fn` for the emu target and runs it over `grid` on `args` (buffers
// are modified in place) in the product emulator (runtime/emulator/emulator.h), through
// the emulate launcher. Returns "" or what went wrong.
inline std::string run_emulated(const ir::Function& fn, launch::Grid grid, const std::vector<launch::Arg>& args,
                                int num_warps = 4) {
  auto launcher = backends::make_emulate_launcher();
  ir::Kernel k(std::shared_ptr<ir::Function>(), const_cast<ir::Function*>(&fn)); // not owned
  try {
    launcher->launch(k, num_warps, grid, args);
  } catch (const rt::Error& e) {
    return e.what();
  }
  return "";
}

inline void fill_random(launch::Buffer& b, uint32_t seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  for (size_t i = 0; i < b.count(); ++i) {
    double v = d(rng);
    b.set(i, ir::is_float(b.dtype) ? v : std::floor(v));
  }
}

// `run(launcher)` launches a kernel on fresh outputs and returns the buffer it writes; on the
// emulator, in both lowerings (the emu hooks, and the GPU's nvptx code retargeted), it must
// equal the interpreter's bit for bit. Returns the interpreter's.
inline launch::Buffer require_bitwise_on_both_lowerings(const std::function<launch::Buffer(launch::Launcher&)>& run) {
  launch::Buffer want = run(*interp::make_interpret_launcher());
  for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
    INFO((lowering == backends::EmuLowering::emu ? "emu lowering" : "nvptx lowering"));
    launch::Buffer got = run(*backends::make_emulate_launcher(lowering));
    int bad = 0;
    for (size_t i = 0; i < want.count(); ++i)
      if (want.get(i) != got.get(i) && ++bad <= 3)
        FAIL_CHECK(want.name << "[" << i << "]: " << got.get(i) << ", want " << want.get(i));
    CHECK(bad == 0);
  }
  return want;
}

using MakeArgs = std::function<std::vector<launch::Arg>(std::vector<launch::Buffer>&)>;

// Runs `fn` in the interpreter and, compiled for the emu target, in the test
// emulator, each on its own copy of `init`; every buffer must agree within
// tol * (1 + |reference|).
inline void check_against_interpreter(const ir::Function& fn, launch::Grid grid,
                                      const std::vector<launch::Buffer>& init, const MakeArgs& make_args,
                                      double tol, int num_warps = 4, std::vector<size_t> skip = {}) {
  auto ref = init;
  interp::interpret(fn, grid, make_args(ref));
  auto emu = init;
  std::string err = run_emulated(fn, grid, make_args(emu), num_warps);
  INFO("kernel " << fn.name);
  REQUIRE(err == "");
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::find(skip.begin(), skip.end(), i) != skip.end()) continue;
    int bad = 0;
    for (size_t j = 0; j < ref[i].count(); ++j) {
      double a = ref[i].get(j), b = emu[i].get(j);
      if (std::isnan(a) && std::isnan(b)) continue;
      if (a == b) continue;
      if (!(std::fabs(a - b) <= tol * (1 + std::fabs(a)))) {
        if (++bad <= 5) FAIL_CHECK("buffer " << ref[i].name << "[" << j << "]: interpreter " << a << ", emulated " << b);
      }
    }
    CHECK(bad == 0);
  }
}

} // namespace tilec::codegen::test
