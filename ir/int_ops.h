#pragma once
// The integer ops whose meaning depends on the width (ir/SEMANTICS.md), on values held as
// int64_t extended from `bits` bits (sign- or, for unsigned dtypes, zero-extended): one definition for the interpreter and constant
// folding. Results are to be wrapped to the width by the caller.
#include <cstdint>

namespace tilec::ir {

// x's low `bits` bits, as an unsigned number.
inline uint64_t low_bits(int64_t x, int bits) {
  return bits >= 64 ? static_cast<uint64_t>(x) : static_cast<uint64_t>(x) & ((uint64_t{1} << bits) - 1);
}
// Shift amounts are the operand's bits read as unsigned; from the width on, shl and lshr
// give 0 and ashr gives the sign (as PTX's shl/shr clamp their amounts).
inline int64_t shift_left(int64_t x, int64_t amount, int bits) {
  uint64_t a = low_bits(amount, bits);
  return a >= uint64_t(bits) ? 0 : static_cast<int64_t>(static_cast<uint64_t>(x) << a);
}
inline int64_t shift_right_logical(int64_t x, int64_t amount, int bits) {
  uint64_t a = low_bits(amount, bits);
  return a >= uint64_t(bits) ? 0 : static_cast<int64_t>(low_bits(x, bits) >> a);
}
// On the bits: the top one of the width is the sign, whatever the dtype's signedness.
inline int64_t shift_right_arithmetic(int64_t x, int64_t amount, int bits) {
  uint64_t a = low_bits(amount, bits);
  if (bits < 64) x = static_cast<int64_t>(low_bits(x, bits) << (64 - bits)) >> (64 - bits);
  return x >> (a >= uint64_t(bits) ? bits - 1 : static_cast<int>(a));
}
// The upper `bits` bits of the unsigned 2·bits-bit product.
inline int64_t umulhi(int64_t x, int64_t y, int bits) {
  unsigned __int128 p = static_cast<unsigned __int128>(low_bits(x, bits)) * low_bits(y, bits);
  return static_cast<int64_t>(static_cast<uint64_t>(p >> bits));
}

} // namespace tilec::ir
