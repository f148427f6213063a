#pragma once
// Host values made values of a dtype as the IR holds them: integers wrapped to their width,
// numbers rounded once to a float dtype, floats truncated to an integer dtype. One definition
// for the interpreter's casts and for host buffers (launch::Buffer::set).
#include <bit>
#include <cmath>
#include <cstdint>

#include "ir/types.h"

namespace tilec::ir {

// `x` wrapped to `t`'s width: sign-extended from it, unsigned dtypes zero-extended (u64 as its
// bits), i1 as 0 or 1.
inline int64_t wrap_int(int64_t x, DType t) {
  switch (t) {
  case DType::u8: return static_cast<uint8_t>(x);
  case DType::u16: return static_cast<uint16_t>(x);
  case DType::u32: return static_cast<uint32_t>(x);
  case DType::i1: return x != 0;
  case DType::i8: return static_cast<int8_t>(x);
  case DType::i16: return static_cast<int16_t>(x);
  case DType::i32: return static_cast<int32_t>(x);
  default: return x;
  }
}

// Rounds `v` (an int64 or a double, both exact in long double) to the float dtype `t` once.
// For f16/bf16 it goes through an f32 rounded to odd, which keeps the second rounding from
// differing from a direct one.
inline float round_exact(long double v, DType t) {
  float x = static_cast<float>(v);
  if (t == DType::f32 || std::isnan(x)) return x;
  if (static_cast<long double>(x) != v && !(std::bit_cast<uint32_t>(x) & 1))
    x = std::nextafter(x, v > x ? INFINITY : -INFINITY);
  return round_to_dtype(x, t);
}

// Truncates toward zero to the integer dtype `t`. Out of range is undefined in the IR; here it
// saturates (as PTX's cvt.rzi does) and NaN gives 0, so it is never C++ UB.
inline int64_t float_to_int(long double x, DType t) {
  if (t == DType::i1) return x != 0;
  if (std::isnan(x)) return 0;
  if (is_unsigned(t)) {
    long double limit = std::ldexp(1.0L, dtype_bits(t));
    if (x <= -1) return 0;
    if (x >= limit) return wrap_int(-1, t); // all ones
    return static_cast<int64_t>(static_cast<uint64_t>(x));
  }
  long double limit = std::ldexp(1.0L, dtype_bits(t) - 1);
  if (x >= limit) return static_cast<int64_t>(static_cast<uint64_t>(limit) - 1);
  if (x < -limit) return static_cast<int64_t>(0 - static_cast<uint64_t>(limit));
  return static_cast<int64_t>(x);
}

} // namespace tilec::ir
