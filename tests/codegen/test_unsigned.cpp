// Unsigned dtypes u8, u16, u32 and u64: division, remainder, comparisons, min/max, >>,
// conversions to and from floats and other integers, reductions, scans, atomics and
// device_print read their bits as unsigned, on the interpreter and both lowerings on the
// emulator, against plain C++; ptxas accepts the GPU's code.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "abi/device_print.h"
#include "backends/launchers.h"
#include "dsl/dsl.h"
#include "interp/interpreter.h"
#include "tests/codegen/codegen_test_util.h"

using namespace tilec;
using namespace tilec::dsl;
using ir::DType;

namespace {

constexpr int64_t kN = 128;
constexpr int kOuts = 12; // integer results per element

// One kernel per unsigned dtype: elementwise ops on a, b (b never 0), conversions, and a
// reduction and scan over the whole tile.
ir::Kernel unsigned_kernel(ElemType u) {
  KernelBuilder kb(fmt::format("unsigned_{}", ir::dtype_name(u.dtype)));
  auto ap = kb.arg(ptr_to(u.dtype), "a"), bp = kb.arg(ptr_to(u.dtype), "b");
  auto out = kb.arg(ptr_to(u.dtype), "out"), fout = kb.arg<Ptr<f32>>("fout"), iout = kb.arg<Ptr<i64>>("iout");
  auto red = kb.arg(ptr_to(u.dtype), "red");
  auto i = arange(0, kN);
  auto a = load(ap + i), b = load(bp + i);
  int slot = 0;
  auto put = [&](const Tile& v) { store(out + (slot++) * kN + i, v.to(u)); };
  put(a / b);
  put(a % b);
  put(min(a, b));
  put(max(a, b));
  put(a >> (b & 7));        // logical for unsigned
  put(where(a < b, a, b));  // unsigned compare
  put((a >= b).to(u));
  put(a - b);               // wraps
  put(a * b);
  put(abs(a));              // the identity
  put(umulhi(a, b));
  put(cdiv(a, b));
  store(fout + i, a.to(f32));
  store(fout + kN + i, (a.to(f32) * 0.75).to(u).to(f32)); // float -> unsigned truncates
  store(iout + i, a.to(i64));                             // zero-extends (u64: its bits)
  store(red, reduce_max(a, 0));
  store(red + 1, reduce_min(a, 0));
  store(red + 2, reduce_sum(a, 0));
  store(red + 3 + i, cummax(a, 0));
  return kb.finish();
}

template <class U> void check_unsigned(DType dt) {
  ir::Kernel k = unsigned_kernel({dt, false});
  std::mt19937_64 rng(uint64_t(dt) * 7 + 1);
  launch::Buffer a("a", dt, kN), b("b", dt, kN);
  const U top = std::numeric_limits<U>::max();
  for (int64_t j = 0; j < kN; ++j) {
    U x = U(rng()), y = U(rng());
    if (j < 4) x = U(top - U(j)); // the largest values: negative if read as signed
    if (j % 5 == 0) y = U(y >> (sizeof(U) * 8 / 2)); // small divisors too
    if (y == 0) y = 1;
    a.set_int(size_t(j), int64_t(x));
    b.set_int(size_t(j), int64_t(y));
  }
  auto av = [&](int64_t j) { return U(uint64_t(a.get_int(size_t(j)))); };
  auto bv = [&](int64_t j) { return U(uint64_t(b.get_int(size_t(j)))); };
  const int bits = int(sizeof(U) * 8);
  for (int backend : {0, 1, 2}) {
    INFO(ir::dtype_name(dt) << " on backend " << backend << " (interpreter, emu lowering, nvptx lowering)");
    launch::Buffer out("out", dt, kOuts * kN), fout("fout", DType::f32, 2 * kN), iout("iout", DType::i64, kN),
        red("red", dt, 3 + kN);
    std::vector<launch::Arg> args = {launch::Arg::of(a),    launch::Arg::of(b),    launch::Arg::of(out),
                                     launch::Arg::of(fout), launch::Arg::of(iout), launch::Arg::of(red)};
    if (backend == 0) interp::interpret(*k, {1, 1, 1}, args);
    else
      backends::make_emulate_launcher(backend == 1 ? backends::EmuLowering::emu : backends::EmuLowering::nvptx)
          ->launch(k, 4, {1, 1, 1}, args);
    auto got = [&](int s, int64_t j) { return U(uint64_t(out.get_int(size_t(s * kN + j)))); };
    int bad = 0;
    auto expect = [&](bool ok, int s, int64_t j, uint64_t want) {
      if (!ok && ++bad <= 8)
        FAIL_CHECK("slot " << s << " element " << j << " (a " << uint64_t(av(j)) << ", b " << uint64_t(bv(j))
                           << "): got " << uint64_t(got(s, j)) << ", want " << want);
    };
    U mx = 0, mn = top, sum = 0, run = 0;
    for (int64_t j = 0; j < kN; ++j) {
      const U x = av(j), y = bv(j);
      const U hi = bits == 64 ? U((unsigned __int128)(x) * y >> 64) : U((uint64_t(x) * uint64_t(y)) >> bits);
      const U want[kOuts] = {U(x / y), U(x % y), std::min(x, y), std::max(x, y), U(x >> (y & 7)), x < y ? x : y,
                             U(x >= y ? 1 : 0), U(x - y), U(uint64_t(x) * uint64_t(y)), x, hi,
                             U(U(uint64_t(x) + y - 1) / y)};
      for (int s = 0; s < kOuts; ++s) expect(got(s, j) == want[s], s, j, uint64_t(want[s]));
      const float fx = float(x);
      if (fout.get(size_t(j)) != double(fx) && ++bad <= 8)
        FAIL_CHECK("to f32 at " << j << ": " << fout.get(size_t(j)) << ", want " << fx);
      const float scaled = fx * 0.75f;
      const U trunc = scaled >= std::ldexp(1.0f, bits) ? top : U(scaled);
      if (fout.get(size_t(kN + j)) != double(float(trunc)) && ++bad <= 8)
        FAIL_CHECK("f32 -> unsigned at " << j << ": " << fout.get(size_t(kN + j)) << ", want " << float(trunc));
      if (uint64_t(iout.get_int(size_t(j))) != uint64_t(x) && ++bad <= 8)
        FAIL_CHECK("to i64 at " << j << ": " << iout.get_int(size_t(j)) << ", want " << uint64_t(x));
      mx = std::max(mx, x);
      mn = std::min(mn, x);
      sum = U(sum + x);
      run = std::max(run, x);
      if (U(uint64_t(red.get_int(size_t(3 + j)))) != run && ++bad <= 8)
        FAIL_CHECK("cummax at " << j << ": " << uint64_t(red.get_int(size_t(3 + j))) << ", want " << uint64_t(run));
    }
    CHECK(U(uint64_t(red.get_int(0))) == mx);
    CHECK(U(uint64_t(red.get_int(1))) == mn);
    CHECK(U(uint64_t(red.get_int(2))) == sum);
    CHECK(bad == 0);
  }
}

} // namespace

TEST_CASE("unsigned dtypes read their bits as unsigned on every CPU backend", "[codegen][ops][unsigned]") {
  check_unsigned<uint8_t>(DType::u8);
  check_unsigned<uint16_t>(DType::u16);
  check_unsigned<uint32_t>(DType::u32);
  check_unsigned<uint64_t>(DType::u64);
}

TEST_CASE("unsigned dtypes compile for the GPU with unsigned instructions", "[codegen][ops][unsigned][ptxas]") {
  ir::Kernel k = unsigned_kernel(u32);
  for (auto& [arch, c] : codegen::test::compile_all_archs(*k)) {
    INFO(arch);
    CHECK(codegen::test::count_matches(c.ptx, R"(div\.u32|rem\.u32)") > 0);
    CHECK(codegen::test::count_matches(c.ptx, R"(div\.s32|rem\.s32)") == 0);
    CHECK(codegen::test::count_matches(c.ptx, R"(cvt\.rn\.f32\.u32)") > 0);
    CHECK(codegen::test::count_matches(c.ptx, R"(cvt\.rn\.f32\.s32)") == 0);
  }
}

TEST_CASE("u32 atomic max and min compare as unsigned, device_print prints unsigned values",
          "[codegen][ops][unsigned][atomics]") {
  KernelBuilder kb("unsigned_atomics");
  auto x = kb.arg<Ptr<u32>>("x"), acc = kb.arg<Ptr<u32>>("acc"), big = kb.arg<Ptr<u64>>("big");
  auto i = program_id(0) * 64 + arange(0, 64);
  auto v = load(x + i);
  atomic_max(acc + arange(0, 64) * 0, v);
  atomic_min(acc + 1 + arange(0, 64) * 0, v);
  device_print("big", load(big)); // a scalar: printed once per program
  ir::Kernel k = kb.finish();
  launch::Buffer xb("x", DType::u32, 256), bb("big", DType::u64, 1);
  uint32_t mx = 0, mn = UINT32_MAX;
  std::mt19937 rng(3);
  for (int j = 0; j < 256; ++j) {
    uint32_t v = j % 3 ? uint32_t(rng()) | 0x80000000u : uint32_t(rng()) & 0xffffu;
    xb.set_int(size_t(j), int64_t(v));
    mx = std::max(mx, v);
    mn = std::min(mn, v);
  }
  bb.set_int(0, int64_t(UINT64_MAX - 1));
  for (int backend : {0, 1, 2}) {
    INFO("backend " << backend);
    launch::Buffer ab("acc", DType::u32, 2);
    ab.set_int(0, 0);
    ab.set_int(1, int64_t(UINT32_MAX));
    std::vector<std::string> lines;
    set_device_print_sink([&](const std::string& l) { lines.push_back(l); });
    std::vector<launch::Arg> args = {launch::Arg::of(xb), launch::Arg::of(ab), launch::Arg::of(bb)};
    if (backend == 0) interp::interpret(*k, {4, 1, 1}, args);
    else
      backends::make_emulate_launcher(backend == 1 ? backends::EmuLowering::emu : backends::EmuLowering::nvptx)
          ->launch(k, 2, {4, 1, 1}, args);
    set_device_print_sink(nullptr);
    CHECK(uint32_t(ab.get_int(0)) == mx);
    CHECK(uint32_t(ab.get_int(1)) == mn);
    if (backend == 2) continue; // the GPU's lowering drops device_print
    REQUIRE(lines.size() == 4);
    CHECK(lines[0] == "pid (0, 0, 0) idx () big: 18446744073709551614");
  }
}

TEST_CASE("unsigned dtypes: the DSL's promotion and errors", "[dsl][unsigned]") {
  KernelBuilder kb("promote");
  auto a = kb.arg<Ptr<u32>>("a"), b = kb.arg<Ptr<i32>>("b"), c = kb.arg<Ptr<u8>>("c"), d = kb.arg<Ptr<i64>>("d");
  auto i = arange(0, 16);
  auto ua = load(a + i), ib = load(b + i), uc = load(c + i), id = load(d + i);
  CHECK((ua + ib).type().dtype() == DType::u32); // one width: unsigned wins, as in C and Triton
  CHECK((uc + ib).type().dtype() == DType::i32); // wider wins
  CHECK((ua + id).type().dtype() == DType::i64);
  CHECK((ua + 1).type().dtype() == DType::u32);
  CHECK(bitcast(ib, u32).type().dtype() == DType::u32);
  CHECK_THROWS_WITH(for_range(0, reduce_max(ua, 0), 1, [&](Scalar) {}),
                    Catch::Contains("signed integer scalar"));
}
