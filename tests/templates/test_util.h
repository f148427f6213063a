#pragma once
// What the template tests share: comparing an output buffer with a reference.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <string>

#include "backends/launchers.h"
#include "backends/module_cache.h"
#include "codegen/compile.h"
#include "launch/args.h"
#include "launch/module_launcher.h"

namespace tilec::templates::test {

// Max |got - want| over the buffers; a NaN in `got` counts as infinite.
inline double max_err(const launch::Buffer& got, const launch::Buffer& want) {
  REQUIRE(got.count() == want.count());
  double e = 0;
  for (size_t i = 0; i < got.count(); ++i) {
    double d = std::abs(got.get(i) - want.get(i));
    if (std::isnan(got.get(i))) d = INFINITY;
    e = std::max(e, d);
  }
  return e;
}

// Whether the long form of the slowest sweeps runs (TILEC_TEST_FULL=1, scripts/test_full.sh):
// every variant of every case. The suite's short form runs each case in one variant, the
// variants taken in turn, so every variant and every case still runs.
inline bool full_sweeps() {
  const char* v = std::getenv("TILEC_TEST_FULL");
  return v && std::string(v) == "1";
}

// Paged attention's absolute tolerance against the f64 reference, by q's dtype.
inline double paged_attention_tolerance(ir::DType t) {
  return t == ir::DType::f32 ? 2e-5 : t == ir::DType::f16 ? 4e-3 : 3e-2;
}

// The emulator running code compiled for `arch` in `lowering` (backends::make_emulate_launcher
// compiles for its default arch, sm_90).
inline std::unique_ptr<launch::Launcher> emulator(const std::string& arch, backends::EmuLowering lowering) {
  codegen::CompileOptions o;
  o.arch = arch;
  o.target = lowering == backends::EmuLowering::nvptx ? codegen::Target::emu_nvptx : codegen::Target::emu;
  auto compile = [o](const ir::Function& fn, int num_warps, const launch::Specialization& spec) {
    codegen::CompileOptions options = o;
    options.int_arg_divisibility = spec.divisibility;
    options.int_arg_values = spec.values;
    options.large_buffers = spec.large_buffers;
    options.num_warps = num_warps;
    return backends::cached_module(fn, options, "emu");
  };
  return launch::make_module_launcher(compile, false, "emulate");
}

} // namespace tilec::templates::test
