#pragma once
// A Launcher over compiled modules: each kernel a launch asks for is looked up by a
// ModuleSource (the emulate and cuda backends compile it, backends/launchers.cpp; a GPU machine
// without the compiler finds it among precompiled modules, bench/gpu_bench.cpp), loaded once
// with rt::LoadedModule, and launched on copies of the host buffers: device memory moved up
// before and down after each launch on the GPU, the host buffers themselves on the emulator.
// On the GPU time_ms is the kernel's time between two events, not the copies. Arguments are
// checked (launch/args.h) before anything is compiled, loaded or allocated.
#include <functional>
#include <memory>
#include <string>

#include "abi/manifest.h"
#include "launch/launcher.h"
#include "launch/specialize.h"

namespace tilec::launch {

// The module of `kernel` launched with `num_warps` warps per program, for a launch specialized
// as `spec` (launch/specialize.h): what to compile, or which precompiled module to take.
using ModuleSource =
    std::function<rt::Manifest(const ir::Function& kernel, int num_warps, const Specialization& spec)>;

// On the GPU (device 0; BackendUnavailable without one) when `gpu`, else on the CPU emulator
// (the modules' arch is then "host"). `backend` is what backend() reports. Every module
// launcher shares one cache of loaded modules: a module is loaded once while any launcher that
// used it lives, and unloaded with the last of them.
std::unique_ptr<Launcher> make_module_launcher(ModuleSource source, bool gpu, std::string backend);

} // namespace tilec::launch
