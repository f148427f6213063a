#pragma once
// A Launcher over compiled modules: each kernel a launch asks for is looked up by a
// ModuleSource (the cuda backend compiles it, backends/cuda_launcher.cpp; a GPU machine
// without the compiler finds it among precompiled modules, bench/gpu_bench.cpp), loaded once
// with rt::LoadedModule, and launched on copies of the host buffers: device memory moved up
// before and down after each launch on the GPU, the host buffers themselves on the emulator.
// On the GPU time_ms is the kernel's time between two events, not the copies.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "abi/manifest.h"
#include "runtime/emulator.h"
#include "runtime/launch.h"
#include "templates/launcher.h"

namespace tilec::templates {

// Throws UserError unless `args` fit the parameters of `fn` as the interpreter binds them, in
// its words (abi/arg_errors.h) after "kernel '<name>': ": their count (naming the missing
// parameters or the extra arguments), a buffer of the parameter's element type for each
// pointer ("parameter 'x' (ptr<f16>) was given buffer 'xs' of f32"), and for each scalar a
// scalar of its kind (integer or float) whose value fits its type. The launchers over compiled
// code call it before compiling or touching a device.
void check_kernel_args(const ir::Function& fn, const std::vector<interp::Arg>& args);

// The element type of a host buffer as the runtime names it, so a launch passes typed
// buffers (rt::Arg::buffer(address, bytes, element)) and the module checks them too.
std::optional<rt::ScalarType> buffer_element(const interp::Buffer& b);

// A scalar argument as a module's parameter type takes it (f16/bf16 as their bits): what the
// launchers over compiled code pass for an interpreter scalar.
rt::Arg scalar_arg(rt::ScalarType type, const interp::Arg& a);

// Adds one emulated launch's counts to `stats` (its time, bytes and warp requests).
void add_emulated_launch(LaunchStats& stats, const rt::EmuLaunchStats& launch);

// The module of `kernel` launched with `num_warps` warps per program.
using ModuleSource =
    std::function<rt::Manifest(const ir::Function& kernel, int num_warps, const std::vector<interp::Arg>& args)>;

// The integer parameters of `fn` whose arguments are multiples of 16 (0 included), by name,
// each mapped to 16: what a launch specializes a module on (CompileOptions::
// int_arg_divisibility), as Triton's launcher specializes on divisibility by 16.
std::map<std::string, int64_t> int_arg_divisibility(const ir::Function& fn, const std::vector<interp::Arg>& args);
// The integer arguments equal to 1, which launchers compile in as constants
// (CompileOptions::int_arg_values), as Triton's launcher specializes on them.
std::map<std::string, int64_t> int_arg_values(const ir::Function& fn, const std::vector<interp::Arg>& args);

// The pointer parameters of `fn` given buffers of more than 2^31 elements, by name: the
// buffers a launch compiles a module with 64-bit offsets for (CompileOptions::large_buffers).
std::set<std::string> large_buffers(const ir::Function& fn, const std::vector<interp::Arg>& args);

// On the GPU (device 0; BackendUnavailable without one) when `gpu`, else on the CPU emulator
// (the modules' arch is then "host"). `backend` is what backend() reports.
std::unique_ptr<Launcher> make_module_launcher(ModuleSource source, bool gpu, std::string backend);

} // namespace tilec::templates
