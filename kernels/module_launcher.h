#pragma once
// A Launcher over compiled modules: each kernel a launch asks for is looked up by a
// ModuleSource (the cuda backend compiles it, backends/cuda_launcher.cpp; a GPU machine
// without the compiler finds it among precompiled modules, bench/gpu_bench.cpp), loaded once
// with rt::LoadedModule, and launched on copies of the host buffers: device memory moved up
// before and down after each launch on the GPU, the host buffers themselves on the emulator.
// On the GPU time_ms is the kernel's time between two events, not the copies.
#include <functional>
#include <memory>

#include "abi/manifest.h"
#include "runtime/launch.h"
#include "kernels/launcher.h"

namespace tilec::kernels {

// A scalar argument as a module's parameter type takes it (f16/bf16 as their bits): what the
// launchers over compiled code pass for an interpreter scalar.
rt::Arg scalar_arg(rt::ScalarType type, const interp::Arg& a);

// The module of `kernel` launched with `num_warps` warps per program.
using ModuleSource = std::function<rt::Manifest(const ir::Function& kernel, int num_warps)>;

// On the GPU (device 0; BackendUnavailable without one) when `gpu`, else on the CPU emulator
// (the modules' arch is then "host"). `backend` is what backend() reports.
std::unique_ptr<Launcher> make_module_launcher(ModuleSource source, bool gpu, std::string backend);

} // namespace tilec::kernels
