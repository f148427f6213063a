#pragma once
// Runs a kernel's tile IR, op by op, over a grid of programs on host buffers:
// the semantic oracle every other backend is checked against.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "abi/byte_array.h"
#include "ir/ir.h"

namespace tilec::interp {

// A named host array. Elements are stored little-endian at their dtype's size
// (i1 as one byte, f16/bf16 as their 16-bit patterns). Zero-filled; a large one takes memory
// only for the pages written (ByteArray), so a cache of billions of elements whose live
// pages are few costs what those pages do.
struct Buffer {
  std::string name;
  ir::DType dtype = ir::DType::f32;
  ByteArray bytes;

  Buffer() = default;
  Buffer(std::string name, ir::DType dtype, size_t count)
      : name(std::move(name)), dtype(dtype), bytes(count * ir::dtype_bytes(dtype)) {}
  size_t count() const { return bytes.size() / ir::dtype_bytes(dtype); }
  // Element access converting through double (exact for every dtype but i64
  // beyond 2^53).
  double get(size_t i) const;
  void set(size_t i, double v);
  // Exact integer access (i64 too); integer dtypes only.
  int64_t get_int(size_t i) const;
  void set_int(size_t i, int64_t v); // wraps to the dtype's width

private:
  void check_index(size_t i) const; // a UserError past the end
};

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
// Why `a` cannot be the scalar argument of a parameter of type `t` ("" when it can).
std::string scalar_arg_error(ir::DType t, const Arg& a);
// Why `args` cannot be the arguments of `fn` ("" when they can), in the words every launcher
// shares (abi/arg_errors.h): their count (naming the missing parameters or the extra
// arguments), a buffer of the parameter's element type for each pointer, for each scalar a
// scalar of its kind whose value fits its type and is a multiple of what the kernel declares
// (multiple_of). The interpreter binds by it; the launchers over compiled code check it before
// compiling or touching a device.
std::string argument_error(const ir::Function& fn, const std::vector<Arg>& args);

using Grid = std::array<int64_t, 3>;

// Runs `fn` for every program of `grid`. Throws UserError for: argument count
// or type mismatch, an unmasked (or unmasked-lane) access outside its buffer
// (naming the kernel, the op's source location, the buffer and the offset),
// integer division by zero, a for loop with a non-positive step.
void interpret(const ir::Function& fn, Grid grid, const std::vector<Arg>& args);

} // namespace tilec::interp
