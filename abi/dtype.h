#pragma once
// The element types of tilec, defined once for every layer: the tile IR's dtypes (ir::DType),
// the runtime's parameter and buffer element types (rt::ScalarType) and host buffers'
// (launch::Buffer) are this one enum, so a name or a number cannot drift between them.
#include <cstdint>
#include <optional>
#include <string_view>

namespace tilec {

// f8e4m3 and f8e5m2 are 8-bit floats (abi/float8.h): stored as bytes, computed in f32.
// Unsigned integers come last so the others keep their numbers (hashes, stored caches).
enum class DType : uint8_t { i1, i8, i16, i32, i64, f16, bf16, f32, f8e4m3, f8e5m2, u8, u16, u32, u64 };
inline constexpr DType kAllDTypes[] = {DType::i1,     DType::i8,     DType::i16, DType::i32, DType::i64,
                                       DType::f16,    DType::bf16,   DType::f32, DType::f8e4m3,
                                       DType::f8e5m2, DType::u8,     DType::u16, DType::u32, DType::u64};

std::string_view dtype_name(DType t); // "i1", "f32", "f8e4m3", "u64", as the IR and manifests spell them
std::optional<DType> parse_dtype(std::string_view name);
int dtype_bits(DType t);
int dtype_bytes(DType t); // i1 is stored as one byte
bool is_float(DType t);
inline bool is_fp8(DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; }
inline bool is_int(DType t) { return !is_float(t); }
// u8..u64: held zero-extended; their division, remainder, comparisons, min/max, `>>` (the
// DSL's), conversions and reductions read the bits as unsigned (ir/SEMANTICS.md).
inline bool is_unsigned(DType t) { return t == DType::u8 || t == DType::u16 || t == DType::u32 || t == DType::u64; }

} // namespace tilec
