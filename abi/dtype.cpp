#include "abi/dtype.h"

#include "abi/error.h"

namespace tilec {

std::string_view dtype_name(DType t) {
  switch (t) {
  case DType::i1: return "i1";
  case DType::i8: return "i8";
  case DType::i16: return "i16";
  case DType::i32: return "i32";
  case DType::i64: return "i64";
  case DType::f16: return "f16";
  case DType::bf16: return "bf16";
  case DType::f32: return "f32";
  case DType::f8e4m3: return "f8e4m3";
  case DType::f8e5m2: return "f8e5m2";
  case DType::u8: return "u8";
  case DType::u16: return "u16";
  case DType::u32: return "u32";
  case DType::u64: return "u64";
  }
  throw InternalError("dtype_name: not a DType");
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType t : kAllDTypes)
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

int dtype_bits(DType t) {
  switch (t) {
  case DType::i1: return 1;
  case DType::i8:
  case DType::u8:
  case DType::f8e4m3:
  case DType::f8e5m2: return 8;
  case DType::i16:
  case DType::u16:
  case DType::f16:
  case DType::bf16: return 16;
  case DType::i32:
  case DType::u32:
  case DType::f32: return 32;
  case DType::i64:
  case DType::u64: return 64;
  }
  throw InternalError("dtype_bits: not a DType");
}

int dtype_bytes(DType t) { return t == DType::i1 ? 1 : dtype_bits(t) / 8; }

bool is_float(DType t) { return t == DType::f16 || t == DType::bf16 || t == DType::f32 || is_fp8(t); }

} // namespace tilec
