// The emulate and cuda backends: module launchers (launch/module_launcher.h) whose source
// compiles each kernel, for the launch's specialization (launch/specialize.h), through the
// module cache (backends/module_cache.h: once per printed IR and options, in this process and
// on disk). The emulator runs the modules on the host buffers themselves; the GPU on device
// copies of them.
#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

#include "abi/error.h"
#include "backends/jit.h"
#include "backends/launchers.h"
#include "backends/module_cache.h"
#include "codegen/compile.h"
#include "launch/module_launcher.h"
#include "runtime/cuda.h"
#include "runtime/loaded_module.h"

namespace tilec::backends {

namespace {

// `o` for a launch specialized as `s`.
codegen::CompileOptions specialized(codegen::CompileOptions o, const launch::Specialization& s) {
  o.int_arg_divisibility = s.divisibility;
  o.int_arg_values = s.values;
  o.large_buffers = s.large_buffers;
  return o;
}

} // namespace

EmuLowering default_emu_lowering() {
  const char* v = std::getenv("TILEC_EMU_LOWERING");
  if (!v || !*v || std::string_view(v) == "emu") return EmuLowering::emu;
  if (std::string_view(v) == "nvptx") return EmuLowering::nvptx;
  throw UserError(fmt::format("TILEC_EMU_LOWERING={}: expected emu or nvptx", v));
}

std::unique_ptr<launch::Launcher> make_emulate_launcher(EmuLowering lowering) {
  codegen::CompileOptions o;
  o.target = lowering == EmuLowering::nvptx ? codegen::Target::emu_nvptx : codegen::Target::emu;
  auto compile = [o](const ir::Function& fn, int num_warps, const launch::Specialization& spec) {
    codegen::CompileOptions options = specialized(o, spec);
    options.num_warps = num_warps;
    return cached_module(fn, options, "emu");
  };
  return launch::make_module_launcher(compile, false, "emulate");
}

std::unique_ptr<launch::Launcher> make_cuda_launcher() {
  const rt::DeviceProperties& d = rt::LoadedModule::gpu_context().properties();
  // gpu_arch: sm_86 runs sm_80 code, sm_100 the sm_90 PTX the driver JIT-compiles. A cubin
  // is only of use on a device of exactly its arch; elsewhere the driver JITs the PTX.
  codegen::CompileOptions o;
  o.arch = gpu_arch(d.name, d.major, d.minor);
  o.run_ptxas = o.arch == d.arch();
  o.target = codegen::Target::nvptx;
  auto compile = [o](const ir::Function& fn, int num_warps, const launch::Specialization& spec) {
    codegen::CompileOptions options = specialized(o, spec);
    options.num_warps = num_warps;
    return cached_module(fn, options, "cuda");
  };
  return launch::make_module_launcher(compile, true, "cuda");
}

} // namespace tilec::backends
