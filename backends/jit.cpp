#include "backends/jit.h"

#include <fmt/format.h>

#include "abi/error.h"
#include "backends/launchers.h"
#include "backends/module_cache.h"
#include "codegen/compile.h"
#include "ir/verifier.h"
#include "runtime/cuda.h"

namespace tilec::backends {

std::string gpu_arch(const std::string& device_name, int major, int minor) {
  if (major >= 9) return "sm_90";
  if (major == 8) return "sm_80";
  throw rt::BackendUnavailable(
      fmt::format("{} is sm_{}{}; tilec generates code for sm_80 and newer", device_name, major, minor));
}

std::string jit_arch() {
  if (!rt::cuda_available()) return "host";
  const rt::DeviceProperties& d = rt::LoadedModule::gpu_context().properties();
  return gpu_arch(d.name, d.major, d.minor);
}

rt::LoadedModule jit(const ir::Kernel& kernel, int num_warps) {
  ir::verify(*kernel);
  codegen::CompileOptions opts;
  opts.num_warps = num_warps;
  std::string arch = jit_arch();
  if (arch == "host") {
    opts.target = default_emu_lowering() == EmuLowering::nvptx ? codegen::Target::emu_nvptx : codegen::Target::emu;
  } else {
    opts.target = codegen::Target::nvptx;
    opts.arch = arch;
  }
  return rt::LoadedModule::load(cached_module(*kernel, opts, arch == "host" ? "emulate" : "cuda"));
}

} // namespace tilec::backends
