#pragma once
// The tile-IR interpreter as a launcher (launch/launcher.h), so a kernel's problem or a recipe
// of launches runs on it as on the emulator and the GPU.
#include <memory>

#include "launch/launcher.h"

namespace tilec::interp {

std::unique_ptr<launch::Launcher> make_interpret_launcher();

} // namespace tilec::interp
