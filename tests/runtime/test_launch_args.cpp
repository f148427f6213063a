#include "abi/error.h"
#include "runtime/launch.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

using namespace tilec::rt;

namespace {

Manifest vector_add() {
  Manifest m;
  m.kernel = "vector_add";
  m.params = {{"x", {ScalarType::f32, true}},
              {"y", {ScalarType::f32, true}},
              {"out", {ScalarType::f32, true}},
              {"n", {ScalarType::i32, false}}};
  return m;
}

template <class T> T value_of(const Arg& a) {
  T v;
  std::memcpy(&v, a.value(), sizeof(T));
  return v;
}

} // namespace

TEST_CASE("launch arguments carry their type and value", "[runtime]") {
  CHECK(Arg(std::int32_t{-7}).scalar_type() == ScalarType::i32);
  CHECK(value_of<std::int32_t>(Arg(std::int32_t{-7})) == -7);
  CHECK(value_of<std::int64_t>(Arg(std::int64_t{1} << 40)) == std::int64_t{1} << 40);
  CHECK(value_of<float>(Arg(1.5f)) == 1.5f);
  CHECK(value_of<std::int8_t>(Arg(std::int8_t{-3})) == -3);
  CHECK(value_of<std::uint8_t>(Arg(true)) == 1);
  CHECK(Arg(true).scalar_type() == ScalarType::i1);
  CHECK(Arg::f16_bits(0x3c00).scalar_type() == ScalarType::f16);
  CHECK(value_of<std::uint16_t>(Arg::bf16_bits(0x3f80)) == 0x3f80);

  Arg buf = Arg::buffer(0xdead0000, 4096);
  CHECK(buf.is_buffer());
  CHECK(buf.buffer_bytes() == 4096);
  CHECK(value_of<std::uint64_t>(buf) == 0xdead0000);
  CHECK(buf.describe() == "a buffer (4096 bytes)");
  CHECK(Arg(2.0f).describe() == "a scalar f32");
}

TEST_CASE("launch arguments are checked against the manifest's parameters", "[runtime]") {
  Manifest m = vector_add();
  Arg x = Arg::buffer(0x1000, 64), y = Arg::buffer(0x2000, 64), out = Arg::buffer(0x3000, 64);

  std::vector<Arg> ok = {x, y, out, std::int32_t{16}};
  CHECK_NOTHROW(check_launch_args(m, ok));

  std::vector<Arg> too_few = {x, y, out};
  CHECK_THROWS_AS(check_launch_args(m, too_few), LaunchArgumentError);
  CHECK_THROWS_WITH(check_launch_args(m, too_few),
                    "kernel 'vector_add': expects 4 arguments, got 3: missing parameter 'n' (i32)");
  std::vector<Arg> no_out = {x, y, std::int32_t{16}};
  CHECK_THROWS_WITH(check_launch_args(m, no_out),
                    "kernel 'vector_add': expects 4 arguments, got 3: missing parameter 'out' (ptr<f32>)");
  std::vector<Arg> too_many = {x, y, out, std::int32_t{16}, 2.0f};
  CHECK_THROWS_WITH(check_launch_args(m, too_many),
                    "kernel 'vector_add': expects 4 arguments, got 5: extra argument 5 (a scalar f32)");

  std::vector<Arg> scalar_for_pointer = {x, std::int32_t{0}, out, std::int32_t{16}};
  CHECK_THROWS_WITH(check_launch_args(m, scalar_for_pointer),
                    "kernel 'vector_add': parameter 'y' (ptr<f32>) was given a scalar i32, not a buffer");

  std::vector<Arg> wrong_scalar = {x, y, out, std::int64_t{16}};
  CHECK_THROWS_WITH(check_launch_args(m, wrong_scalar),
                    "kernel 'vector_add': parameter 'n' (i32) was given a scalar i64");

  std::vector<Arg> float_for_int = {x, y, out, 16.0f};
  CHECK_THROWS_WITH(check_launch_args(m, float_for_int),
                    Catch::Contains("parameter 'n' (i32) was given a scalar f32"));

  std::vector<Arg> buffer_for_scalar = {x, y, out, out};
  CHECK_THROWS_WITH(check_launch_args(m, buffer_for_scalar),
                    "kernel 'vector_add': parameter 'n' (i32) was given a buffer (64 bytes), not a scalar");

  std::vector<Arg> wrong_element = {x, Arg::buffer(0x2000, 64, ScalarType::f16), out, std::int32_t{16}};
  CHECK_THROWS_WITH(check_launch_args(m, wrong_element),
                    "kernel 'vector_add': parameter 'y' (ptr<f32>) was given a buffer of f16 (64 bytes)");
}

TEST_CASE("pointer arguments must be 16-byte aligned, [divisibility] parameters must divide", "[runtime]") {
  Manifest m = vector_add();
  Arg x = Arg::buffer(0x1000, 64), y = Arg::buffer(0x2000, 64), out = Arg::buffer(0x3000, 64);
  std::vector<Arg> misaligned = {x, Arg::buffer(0x2008, 64), out, std::int32_t{16}};
  CHECK_THROWS_WITH(check_launch_args(m, misaligned),
                    Catch::Contains("parameter 'y': the buffer at address 0x2008 is not 16-byte aligned"));
  m.divisibility["n"] = 16;
  std::vector<Arg> ok = {x, y, out, std::int32_t{-32}};
  CHECK_NOTHROW(check_launch_args(m, ok));
  std::vector<Arg> bad = {x, y, out, std::int32_t{100}};
  CHECK_THROWS_WITH(check_launch_args(m, bad), Catch::Contains("parameter 'n' = 100") &&
                                                   Catch::Contains("compiled for values divisible by 16"));
}

TEST_CASE("a written buffer may overlap no other, read-only buffers may overlap each other", "[runtime]") {
  Manifest m = vector_add();
  m.params[0].read_only = m.params[1].read_only = true; // x and y are read, out is written
  Arg x = Arg::buffer(0x1000, 64), n = std::int32_t{16};
  std::vector<Arg> same_inputs = {x, x, Arg::buffer(0x3000, 64), n};
  CHECK_NOTHROW(check_launch_args(m, same_inputs));
  std::vector<Arg> in_place = {x, Arg::buffer(0x2000, 64), Arg::buffer(0x1020, 64), n};
  CHECK_THROWS_WITH(check_launch_args(m, in_place),
                    Catch::Contains("buffers 'x' and 'out' overlap and the kernel writes 'out'"));
  std::vector<Arg> adjacent = {x, Arg::buffer(0x2000, 64), Arg::buffer(0x1040, 64), n};
  CHECK_NOTHROW(check_launch_args(m, adjacent));
}
