// The one f16/bf16 conversion (abi/float16.h), checked on every 16-bit pattern: decoding then
// encoding gives the pattern back (NaN stays NaN), and encoding rounds to nearest even at every
// rounding boundary. The emulator's conversion hooks are the same functions.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>

#include "abi/emu_abi.h"
#include "abi/float16.h"

namespace {

bool is_f16_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool is_bf16_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

// Checks rounding between the 16-bit neighbours h and h + 1 (same sign, both finite) for an
// encoder `enc` and decoder `dec`: the midpoint goes to the even one, anything above or below
// it by one f32 ulp to the nearer one.
template <class Enc, class Dec> void check_boundary(uint16_t h, Enc enc, Dec dec) {
  float lo = dec(h), hi = dec(static_cast<uint16_t>(h + 1));
  float mid = static_cast<float>((static_cast<double>(lo) + static_cast<double>(hi)) / 2);
  REQUIRE(static_cast<double>(mid) == (static_cast<double>(lo) + static_cast<double>(hi)) / 2); // exact in f32
  uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : h;
  INFO("pattern " << h << ": " << lo << " .. " << hi);
  CHECK(enc(mid) == even);
  CHECK(enc(std::nextafter(mid, lo)) == h);
  CHECK(enc(std::nextafter(mid, hi)) == static_cast<uint16_t>(h + 1));
}

} // namespace

TEST_CASE("f16: every pattern decodes and encodes back, NaN stays NaN", "[abi][float16]") {
  for (uint32_t i = 0; i < 0x10000; ++i) {
    auto h = static_cast<uint16_t>(i);
    float f = tilec::f16_bits_to_f32(h);
    if (is_f16_nan(h)) {
      REQUIRE(std::isnan(f));
      REQUIRE(is_f16_nan(tilec::f32_to_f16_bits(f)));
    } else {
      REQUIRE(tilec::f32_to_f16_bits(f) == h);
    }
    REQUIRE(std::bit_cast<uint32_t>(tilec_emu_f16_to_f32(nullptr, h)) == std::bit_cast<uint32_t>(f));
  }
}

TEST_CASE("bf16: every pattern decodes and encodes back, NaN stays NaN", "[abi][float16]") {
  for (uint32_t i = 0; i < 0x10000; ++i) {
    auto h = static_cast<uint16_t>(i);
    float f = tilec::bf16_bits_to_f32(h);
    if (is_bf16_nan(h)) {
      REQUIRE(std::isnan(f));
      REQUIRE(is_bf16_nan(tilec::f32_to_bf16_bits(f)));
    } else {
      REQUIRE(tilec::f32_to_bf16_bits(f) == h);
    }
  }
}

TEST_CASE("f16 and bf16 round to nearest even at every boundary", "[abi][float16]") {
  auto f16 = [](float f) { return tilec::f32_to_f16_bits(f); };
  auto f16_dec = [](uint16_t h) { return tilec::f16_bits_to_f32(h); };
  auto bf16 = [](float f) { return tilec::f32_to_bf16_bits(f); };
  auto bf16_dec = [](uint16_t h) { return tilec::bf16_bits_to_f32(h); };
  // Each sign's finite patterns up to the largest finite one: 0x7bff (f16), 0x7f7f (bf16).
  for (uint16_t sign : {uint16_t(0), uint16_t(0x8000)}) {
    for (uint16_t m = 0; m < 0x7bff; ++m) check_boundary(static_cast<uint16_t>(sign | m), f16, f16_dec);
    for (uint16_t m = 0; m < 0x7f7f; ++m) check_boundary(static_cast<uint16_t>(sign | m), bf16, bf16_dec);
  }
  // Past the largest finite value by half an ulp or more: infinity.
  CHECK(f16(65520.0f) == 0x7c00);
  CHECK(f16(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  CHECK(f16(-1e30f) == 0xfc00);
  CHECK(bf16(std::bit_cast<float>(0x7f7f8000u)) == 0x7f80);
  CHECK(bf16(std::bit_cast<float>(0x7f7f7fffu)) == 0x7f7f);
  // The emulator's hooks are the same conversion.
  for (float f : {1.0f / 3, 65519.0f, 65520.0f, 5.96e-8f, 2.98e-8f, -0.0f, 1e-40f}) {
    CHECK(tilec_emu_f32_to_f16(nullptr, f) == f16(f));
    CHECK(tilec_emu_f32_to_bf16(nullptr, f) == bf16(f));
  }
}
