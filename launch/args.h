#pragma once
// A kernel's arguments as every launcher takes them (the interpreter, the emulator, the GPU):
// host buffers and scalars, the grid of programs, and the one check of arguments against the
// kernel's parameters that all of them apply, in the same words.
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "launch/buffer.h"

namespace tilec::launch {

// One kernel argument: a buffer for a pointer parameter, else a scalar. An integer
// parameter takes of_int and a float parameter of_float: every launcher refuses the other
// (an error, not a conversion).
struct Arg {
  Buffer* buffer = nullptr;
  int64_t i = 0;
  double f = 0.0;
  bool is_float = false;
  static Arg of(Buffer& b) { return {&b, 0, 0.0, false}; }
  static Arg of_int(int64_t v) { return {nullptr, v, static_cast<double>(v), false}; }
  static Arg of_float(double v) {
    // Only in-range values convert: int64_t(inf) or int64_t(1e30) is UB.
    bool fits = std::fabs(v) < 0x1p63;
    return {nullptr, fits ? static_cast<int64_t>(v) : 0, v, true};
  }
};

// Programs along x, y and z.
using Grid = std::array<int64_t, 3>;

// Why `a` cannot be the scalar argument of a parameter of type `t` ("" when it can).
std::string scalar_arg_error(DType t, const Arg& a);
// Why `args` cannot be the arguments of `fn` ("" when they can), in the words every launcher
// shares (abi/arg_errors.h): their count (naming the missing parameters or the extra
// arguments), a buffer of the parameter's element type for each pointer, for each scalar a
// scalar of its kind whose value fits its type and is a multiple of what the kernel declares
// (multiple_of). The interpreter binds by it; the launchers over compiled code check it before
// compiling or touching a device.
std::string argument_error(const ir::Function& fn, const std::vector<Arg>& args);
// Throws UserError "kernel '<name>': <argument_error>" unless `args` fit `fn`.
void check_kernel_args(const ir::Function& fn, const std::vector<Arg>& args);

} // namespace tilec::launch
