#pragma once
// What each atomic op stores, stated once for the interpreter and the emulator (and matched
// by the GPU's instructions): ir/SEMANTICS.md "atomic_add, atomic_max, ...". The codes are
// also the `op` argument of the emulator's tilec_emu_atomic_* functions (abi/emu_abi.h).
#include <bit>
#include <cmath>
#include <cstdint>

namespace tilec {

// umax/umin: max/min of u32 (the same bits as i32 for every other op).
enum class AtomicOp : std::int32_t {
  add = 0,
  max = 1,
  min = 2,
  and_ = 3,
  or_ = 4,
  xor_ = 5,
  xchg = 6,
  cas = 7,
  umax = 8,
  umin = 9
};

// The value a 32-bit integer atomic leaves in memory holding `old` (cas: `value` where old == cmp).
inline std::int32_t atomic_result(AtomicOp op, std::int32_t old, std::int32_t value, std::int32_t cmp) {
  switch (op) {
  case AtomicOp::add: return std::int32_t(std::uint32_t(old) + std::uint32_t(value)); // wraps
  case AtomicOp::max: return old > value ? old : value;
  case AtomicOp::min: return old < value ? old : value;
  case AtomicOp::umax: return std::uint32_t(old) > std::uint32_t(value) ? old : value;
  case AtomicOp::umin: return std::uint32_t(old) < std::uint32_t(value) ? old : value;
  case AtomicOp::and_: return old & value;
  case AtomicOp::or_: return old | value;
  case AtomicOp::xor_: return old ^ value;
  case AtomicOp::xchg: return value;
  case AtomicOp::cas: return old == cmp ? value : old;
  }
  return old;
}

// max/min of f32 as IEEE 754-2019 maximumNumber/minimumNumber: a NaN
// operand is ignored and -0.0 counts below +0.0, so the result never depends on the order
// atomics land in.
inline float max_number(float a, float b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  if (a == b) return std::signbit(a) ? b : a; // +0.0 over -0.0
  return a > b ? a : b;
}
inline float min_number(float a, float b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  if (a == b) return std::signbit(a) ? a : b; // -0.0 under +0.0
  return a < b ? a : b;
}

// The same for f32: max and min as above (a NaN in memory is replaced, a NaN value leaves
// memory as it is); cas compares bits.
inline float atomic_result(AtomicOp op, float old, float value, float cmp) {
  switch (op) {
  case AtomicOp::add: return old + value;
  case AtomicOp::max: return max_number(old, value);
  case AtomicOp::min: return min_number(old, value);
  case AtomicOp::xchg: return value;
  case AtomicOp::cas: return std::bit_cast<std::uint32_t>(old) == std::bit_cast<std::uint32_t>(cmp) ? value : old;
  case AtomicOp::and_:
  case AtomicOp::or_:
  case AtomicOp::xor_:
  case AtomicOp::umax:
  case AtomicOp::umin: break; // integers only
  }
  return old;
}

} // namespace tilec
