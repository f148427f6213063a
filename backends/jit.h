#pragma once
// Compiling a DSL kernel from a host program and launching it on arguments the program owns.
//
//   ir::Kernel k = my_kernel(256);                            // built with dsl/dsl.h
//   rt::LoadedModule m = backends::jit(k, /*num_warps=*/4);   // GPU if present, else emulator
//   m.launch({blocks}, {rt::Arg::array(x, n), rt::Arg::array(out, n), std::int32_t(n)});
//
// The kernel is compiled once per process and kept in the disk module cache
// ($TILEC_CACHE_DIR, else ~/.cache/tilec) for the next one. On the GPU, buffers are device
// addresses (rt::Buffer) and launches go on the stream given; on the emulator they are host
// pointers. Arguments are checked against the kernel's parameters (runtime/loaded_module.h).
// The executable must export the emulator's functions for emulated kernels: link
// tilec::compiler (CMake) or pass -Wl,--export-dynamic-symbol=tilec_emu_* yourself.
#include <string>

#include "ir/ir.h"
#include "runtime/loaded_module.h"

namespace tilec::backends {

// The arch tilec compiles for on a device of compute capability major.minor: sm_90 code for
// sm_9x and newer (the driver JIT-compiles its PTX), sm_80 for sm_8x; BackendUnavailable
// naming the device below that.
std::string gpu_arch(const std::string& device_name, int major, int minor);

// Where jit() compiles for in this process: the GPU's arch ("sm_80", "sm_90"; newer GPUs run
// sm_90 code) when a CUDA driver and device are present, else "host" (the CPU emulator).
std::string jit_arch();

// `kernel` compiled for jit_arch() with `num_warps` warps per program, loaded.
rt::LoadedModule jit(const ir::Kernel& kernel, int num_warps = 4);

} // namespace tilec::backends
