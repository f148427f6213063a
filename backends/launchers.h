#pragma once
// The launchers that run code the compiler generated: the CPU emulator and the GPU, both
// module launchers (launch/module_launcher.h) that compile as they go. They implement
// launch::Launcher, so a kernel's problem (or a recipe of many launches, like the
// paged-attention decomposition) runs unchanged on them and on the interpreter.
#include <memory>
#include <string>

#include "launch/launcher.h"

namespace tilec::backends {

// Which lowering the emulator runs: the emulator's own hooks (`emu`, the default) or the
// GPU's nvptx hooks rewritten for the CPU (`nvptx`: codegen::Target::emu_nvptx), chosen by
// TILEC_EMU_LOWERING=emu|nvptx for a process. UserError when the variable is malformed.
enum class EmuLowering { emu, nvptx };
EmuLowering default_emu_lowering();

// The CPU emulator running the emu-target code (runtime/emulator/emulator.h) as a launcher.
std::unique_ptr<launch::Launcher> make_emulate_launcher(EmuLowering lowering = default_emu_lowering());
// The GPU through the CUDA Driver API (runtime/cuda.h): compiles each kernel for the device's
// arch once, moves the buffers to the device and back around each launch, and times the
// kernel with events. Throws rt::BackendUnavailable without a driver or device.
std::unique_ptr<launch::Launcher> make_cuda_launcher();

} // namespace tilec::backends
