#pragma once
// 8-bit floats as NVIDIA's hardware and the OCP FP8 formats define them, shared by the
// interpreter, the emulator, the references and the .npy I/O:
//   e4m3 ("E4M3FN"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, S.1111.111
//                    is NaN; largest finite 448, smallest subnormal 2^-9.
//   e5m2:            1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE-like (infinities,
//                    NaNs), the upper byte of an f16; largest finite 57344, smallest 2^-16.
// f32 -> fp8 rounds to nearest even and saturates: a magnitude above the largest finite one
// (infinities included) gives that one with the sign kept, and NaN gives 0x7f (PTX's
// cvt.rn.satfinite). fp8 -> f32 is exact.
#include <bit>
#include <cmath>
#include <cstdint>

namespace tilec {

struct Fp8Format {
  int mantissa_bits, bias;
  float max_finite;
};
inline constexpr Fp8Format kE4M3{3, 7, 448.0f};
inline constexpr Fp8Format kE5M2{2, 15, 57344.0f};

inline float fp8_bits_to_f32(uint8_t bits, const Fp8Format& f) {
  const int m = f.mantissa_bits, exp_field = (bits & 0x7f) >> m, man = bits & ((1 << m) - 1);
  const bool e5m2 = m == 2;
  float v;
  if (e5m2 && exp_field == 31) v = std::bit_cast<float>(0x7f800000u | uint32_t(man) << 21); // inf, or NaN with its payload
  else if (!e5m2 && (bits & 0x7f) == 0x7f) v = NAN;
  else if (exp_field == 0) v = std::ldexp(float(man), 1 - f.bias - m); // subnormal
  else v = std::ldexp(float((1 << m) | man), exp_field - f.bias - m);
  return (bits & 0x80) ? -v : v;
}

inline uint8_t f32_to_fp8_bits(float x, const Fp8Format& f) {
  if (std::isnan(x)) return 0x7f;
  const int m = f.mantissa_bits;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  float a = std::fmin(std::fabs(x), f.max_finite);
  // The quantum at a's binade (subnormals: that of the smallest normal one); a / q rounds
  // to an integer k <= 2^(m+1), and ((e + bias) << m) + k - 2^m is the encoding: k = 2^(m+1)
  // carries into the exponent field, and in the lowest binade (exponent field 1) k < 2^m
  // lands in the subnormals (exponent field 0).
  int e = a == 0 ? 1 - f.bias : std::ilogb(a);
  if (e < 1 - f.bias) e = 1 - f.bias;
  const double q = std::ldexp(1.0, e - m);
  double k = double(a) / q;
  double fl = std::floor(k), rem = k - fl;
  if (rem > 0.5 || (rem == 0.5 && std::fmod(fl, 2.0) != 0)) fl += 1;
  return uint8_t(sign | (((e + f.bias) << m) + int(fl) - (1 << m)));
}

inline float f8e4m3_bits_to_f32(uint8_t b) { return fp8_bits_to_f32(b, kE4M3); }
inline float f8e5m2_bits_to_f32(uint8_t b) { return fp8_bits_to_f32(b, kE5M2); }
inline uint8_t f32_to_f8e4m3_bits(float x) { return f32_to_fp8_bits(x, kE4M3); }
inline uint8_t f32_to_f8e5m2_bits(float x) { return f32_to_fp8_bits(x, kE5M2); }

} // namespace tilec
