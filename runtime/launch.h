#pragma once
// Launch arguments and their check against a module's parameter list; shared by every
// backend that launches from a manifest.
#include "abi/manifest.h"
#include "abi/types.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace tilec::rt {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// One kernel argument: a buffer (device address and size) or a typed scalar. The
// constructors fix the scalar type, so `Arg(n)` with `int n` is an i32 and a mismatch with
// the manifest is caught rather than reinterpreted.
class Arg {
public:
  Arg(bool v) : type_(ScalarType::i1), bits_(v) {}
  Arg(std::int8_t v) : Arg(ScalarType::i8, static_cast<std::uint8_t>(v)) {}
  Arg(std::int16_t v) : Arg(ScalarType::i16, static_cast<std::uint16_t>(v)) {}
  Arg(std::int32_t v) : Arg(ScalarType::i32, static_cast<std::uint32_t>(v)) {}
  Arg(std::int64_t v) : Arg(ScalarType::i64, static_cast<std::uint64_t>(v)) {}
  Arg(float v);
  template <class T> Arg(T*) = delete; // not silently a bool
  static Arg f16_bits(std::uint16_t bits) { return Arg(ScalarType::f16, bits); }
  static Arg bf16_bits(std::uint16_t bits) { return Arg(ScalarType::bf16, bits); }
  static Arg buffer(std::uint64_t address, std::size_t bytes);

  bool is_buffer() const { return buffer_; }
  ScalarType scalar_type() const { return type_; } // meaningful for scalars only
  std::size_t buffer_bytes() const { return bytes_; }
  // The argument's value as the kernel receives it: the address for a buffer, otherwise the
  // scalar's bytes (little-endian, so narrow types sit at the start).
  const void* value() const { return &bits_; }
  std::uint64_t bits() const { return bits_; }
  std::string describe() const; // "a buffer (4096 bytes)", "a scalar i32"

private:
  Arg(ScalarType t, std::uint64_t bits) : type_(t), bits_(bits) {}

  bool buffer_ = false;
  ScalarType type_ = ScalarType::i32;
  std::uint64_t bits_ = 0;
  std::size_t bytes_ = 0;
};

// Throws LaunchArgumentError unless `args` match `m.params` in count and, one by one, in kind
// (a pointer parameter takes a buffer) and scalar type; the message names the parameter.
void check_launch_args(const Manifest& m, std::span<const Arg> args);

} // namespace tilec::rt
