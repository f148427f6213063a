#pragma once
// Launch arguments and their check against a module's parameter list; shared by every
// backend that launches from a manifest.
#include "abi/manifest.h"
#include "abi/types.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
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
  Arg(std::uint8_t v) : Arg(ScalarType::u8, v) {}
  Arg(std::uint16_t v) : Arg(ScalarType::u16, v) {}
  Arg(std::uint32_t v) : Arg(ScalarType::u32, v) {}
  Arg(std::uint64_t v) : Arg(ScalarType::u64, v) {}
  Arg(float v);
  template <class T> Arg(T*) = delete; // not silently a bool
  static Arg f16_bits(std::uint16_t bits) { return Arg(ScalarType::f16, bits); }
  static Arg bf16_bits(std::uint16_t bits) { return Arg(ScalarType::bf16, bits); }
  // An 8-bit float scalar (ScalarType::f8e4m3 or f8e5m2) from its bits.
  static Arg fp8_bits(ScalarType type, std::uint8_t bits) { return Arg(type, bits); }
  // A buffer of unknown element type: only its kind is checked against the parameter.
  static Arg buffer(std::uint64_t address, std::size_t bytes);
  // A buffer of `element`s: a parameter of another element type (ptr<i32> given f32 data)
  // is an error at launch.
  static Arg buffer(std::uint64_t address, std::size_t bytes, ScalarType element);
  // A host or device array of `count` values of T (float, int8..int64, uint8..uint64: f32,
  // i8..i64, u8..u64); for f16/bf16 data (uint16_t) use buffer(address, bytes, ScalarType::f16 / bf16), for fp8
  // data (uint8_t) buffer(address, bytes, ScalarType::f8e4m3 / f8e5m2).
  template <class T> static Arg array(const T* data, std::size_t count) {
    return buffer(reinterpret_cast<std::uintptr_t>(data), count * sizeof(T), element_of<T>());
  }

  bool is_buffer() const { return buffer_; }
  // The element type of a typed buffer; empty for untyped buffers and scalars.
  std::optional<ScalarType> buffer_element() const { return element_; }
  ScalarType scalar_type() const { return type_; } // meaningful for scalars only
  std::size_t buffer_bytes() const { return bytes_; }
  // The argument's value as the kernel receives it: the address for a buffer, otherwise the
  // scalar's bytes (little-endian, so narrow types sit at the start).
  const void* value() const { return &bits_; }
  std::uint64_t bits() const { return bits_; }
  std::string describe() const; // "a buffer (4096 bytes)", "a scalar i32"

private:
  Arg(ScalarType t, std::uint64_t bits) : type_(t), bits_(bits) {}
  template <class T> static ScalarType element_of() {
    if constexpr (std::is_same_v<T, float>) return ScalarType::f32;
    else if constexpr (std::is_same_v<T, std::int8_t>) return ScalarType::i8;
    else if constexpr (std::is_same_v<T, std::int16_t>) return ScalarType::i16;
    else if constexpr (std::is_same_v<T, std::int32_t>) return ScalarType::i32;
    else if constexpr (std::is_same_v<T, std::int64_t>) return ScalarType::i64;
    else if constexpr (std::is_same_v<T, std::uint8_t>) return ScalarType::u8;
    else if constexpr (std::is_same_v<T, std::uint16_t>) return ScalarType::u16;
    else if constexpr (std::is_same_v<T, std::uint32_t>) return ScalarType::u32;
    else if constexpr (std::is_same_v<T, std::uint64_t>) return ScalarType::u64;
    else static_assert(sizeof(T) == 0, "Arg::array: no element type for T; use Arg::buffer(address, bytes, type)");
  }

  bool buffer_ = false;
  ScalarType type_ = ScalarType::i32;
  std::uint64_t bits_ = 0;
  std::size_t bytes_ = 0;
  std::optional<ScalarType> element_;
};

// The most elements a buffer addressed with 32-bit offsets may have: every in-bounds offset
// then lies in [0, 2^31). Larger ones need 64-bit offsets (ModuleParam::offsets64).
inline constexpr std::size_t kMaxElements32 = std::size_t(1) << 31;

// Throws LaunchArgumentError unless `args` match `m.params` in count and, one by one, in kind
// (a pointer parameter takes a buffer), a typed buffer's element type and scalar type. The
// message is worded as every launcher words it (abi/arg_errors.h): "kernel 'k': parameter
// 'x' (ptr<f16>) was given a buffer of f32 (64 bytes)", "kernel 'k': expects 4 arguments,
// got 3: missing parameter 'n' (i32)".
void check_launch_args(const Manifest& m, std::span<const Arg> args);
// An integer scalar argument's value, sign-extended from its type (zero-extended from an
// unsigned one; a u64 past 2^63 comes back as its bits).
std::int64_t scalar_int_value(const Arg& a);

} // namespace tilec::rt
