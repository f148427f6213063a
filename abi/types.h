#pragma once
// Kernel parameter types as a module's manifest spells them: "f32", "i32", "ptr<f16>".
// Their element types are the IR's dtypes (abi/dtype.h), under the runtime's name.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "abi/dtype.h"

namespace tilec::rt {

using ScalarType = DType;

inline std::string_view scalar_type_name(ScalarType t) { return dtype_name(t); }
inline std::optional<ScalarType> parse_scalar_type(std::string_view name) { return parse_dtype(name); }
// Bytes a scalar of this type occupies as a kernel argument (i1 takes one byte).
inline std::size_t scalar_type_bytes(ScalarType t) { return std::size_t(dtype_bytes(t)); }
// u8, u16, u32 or u64.
using tilec::is_unsigned;
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
