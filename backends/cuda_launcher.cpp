// The cuda backend: each kernel is compiled for the device's arch once (backends/
// module_cache.h caches the module in this process and on disk) and launched through the
// module launcher (templates/module_launcher.h) on device copies of the host buffers.
#include "abi/error.h"
#include "backends/jit.h"
#include "backends/launchers.h"
#include "backends/module_cache.h"
#include "codegen/compile.h"
#include "templates/module_launcher.h"
#include "runtime/cuda.h"
#include "runtime/loaded_module.h"

namespace tilec::backends {

std::unique_ptr<templates::Launcher> make_cuda_launcher() {
  const rt::DeviceProperties& d = rt::LoadedModule::gpu_context().properties();
  // gpu_arch: sm_86 runs sm_80 code, sm_100 the sm_90 PTX the driver JIT-compiles. A cubin
  // is only of use on a device of exactly its arch; elsewhere the driver JITs the PTX.
  std::string arch = gpu_arch(d.name, d.major, d.minor);
  bool cubin = arch == d.arch();
  auto compile = [arch, cubin](const ir::Function& fn, int num_warps, const std::vector<interp::Arg>& args) {
    codegen::CompileOptions o;
    o.arch = arch;
    o.num_warps = num_warps;
    o.int_arg_divisibility = templates::int_arg_divisibility(fn, args);
    o.int_arg_values = templates::int_arg_values(fn, args);
    o.large_buffers = templates::large_buffers(fn, args);
    o.target = codegen::Target::nvptx;
    o.run_ptxas = cubin;
    return cached_module(fn, o, "cuda");
  };
  return templates::make_module_launcher(compile, true, "cuda");
}

} // namespace tilec::backends
