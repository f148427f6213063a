#pragma once
// A host buffer: how every launcher (the interpreter, the emulator, the GPU) takes a kernel's
// arrays, and the element codec its bytes follow, which the interpreter's loads and stores
// share.
#include <cstddef>
#include <cstdint>
#include <string>

#include "abi/byte_array.h"
#include "abi/dtype.h"

namespace tilec::launch {

// A named host array. Elements are stored little-endian at their dtype's size
// (i1 as one byte, f16/bf16 as their 16-bit patterns). Zero-filled; a large one takes memory
// only for the pages written (ByteArray), so a cache of billions of elements whose live
// pages are few costs what those pages do.
struct Buffer {
  std::string name;
  DType dtype = DType::f32;
  ByteArray bytes;

  Buffer() = default;
  Buffer(std::string name, DType dtype, size_t count)
      : name(std::move(name)), dtype(dtype), bytes(count * dtype_bytes(dtype)) {}
  size_t count() const { return bytes.size() / dtype_bytes(dtype); }
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

// One element of dtype `t` at `p`, as a Buffer stores it. Integers come back sign-extended
// from their width (unsigned ones zero-extended, u64 as its bits, i1 as 0 or 1), floats as the
// f32 they denote; writing wraps an integer to the width and rounds a float to `t`.
int64_t read_int(const std::byte* p, DType t);
float read_float(const std::byte* p, DType t);
void write_int(std::byte* p, DType t, int64_t x);
void write_float(std::byte* p, DType t, float x);

} // namespace tilec::launch
