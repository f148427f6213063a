#pragma once
// Kernel parameter types as a module's manifest spells them: "f32", "i32", "ptr<f16>".
// The runtime's own copy of the element types, so it needs nothing from the IR.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tilec::rt {

enum class ScalarType { i1, i8, i16, i32, i64, f16, bf16, f32, f8e4m3, f8e5m2, u8, u16, u32, u64 };

std::string_view scalar_type_name(ScalarType t);
std::optional<ScalarType> parse_scalar_type(std::string_view name);
// Bytes a scalar of this type occupies as a kernel argument (i1 takes one byte).
std::size_t scalar_type_bytes(ScalarType t);
// u8, u16, u32 or u64.
inline bool is_unsigned(ScalarType t) {
  return t == ScalarType::u8 || t == ScalarType::u16 || t == ScalarType::u32 || t == ScalarType::u64;
}
// i8..i64 or u8..u64 (i1 is a boolean, not an integer here).
inline bool is_integer(ScalarType t) {
  return t == ScalarType::i8 || t == ScalarType::i16 || t == ScalarType::i32 || t == ScalarType::i64 ||
         is_unsigned(t);
}

struct ParamType {
  ScalarType element = ScalarType::f32;
  bool is_pointer = false;

  std::string str() const; // "f32" or "ptr<f32>"
  bool operator==(const ParamType&) const = default;
};

std::optional<ParamType> parse_param_type(std::string_view text);

} // namespace tilec::rt
