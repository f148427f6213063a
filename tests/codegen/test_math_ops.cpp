// The math and integer ops users reach for (sin, cos, erf, pow, fma, clamp, isnan, isinf,
// shifts, umulhi, cdiv): DSL through both lowerings on the emulator against the
// interpreter, bit for bit (the CPU backends call the same C library), and on the GPU
// through libdevice, linked in and inlined, as ptxas accepts it.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <algorithm>
#include <array>
#include <random>

#include "abi/device_print.h"
#include "backends/launchers.h"
#include "dsl/dsl.h"
#include "fuzz/compare.h"
#include "interp/interpreter.h"
#include "interp/launcher.h"
#include "launch/launcher.h"
#include "tests/codegen/codegen_test_util.h"

using namespace tilec;
using namespace tilec::dsl;
using ir::DType;

namespace {

constexpr int64_t kN = 512;

// One float output per op over x, y, z in [-8, 8] (specials in the first lanes) and one
// integer output per integer op over i32 a, b.
ir::Kernel math_kernel(DType ft) {
  KernelBuilder kb("math_ops");
  ElemType fe{ft, false};
  auto x_ptr = kb.arg(ptr_to(ft), "x"), y_ptr = kb.arg(ptr_to(ft), "y"), z_ptr = kb.arg(ptr_to(ft), "z");
  auto a_ptr = kb.arg<Ptr<i32>>("a"), b_ptr = kb.arg<Ptr<i32>>("b");
  auto fout = kb.arg(ptr_to(ft), "fout"), iout = kb.arg<Ptr<i32>>("iout");
  auto i = program_id(0) * 128 + arange(0, 128);
  auto x = load(x_ptr + i), y = load(y_ptr + i), z = load(z_ptr + i);
  auto a = load(a_ptr + i), b = load(b_ptr + i);
  int slot = 0;
  auto put = [&](const Tile& v) { store(fout + (slot++) * kN + i, v.to(fe)); };
  put(sin(x));
  put(cos(x * 3));
  put(erf(x));
  put(pow(abs(x), y));
  put(pow(x, floor(y)));
  put(fma(x, y, z));
  put(clamp(x, -1.5, z));
  put(isnan(x * y).to(f32));
  put(isinf(x * y * 1e37).to(f32));
  int islot = 0;
  auto iput = [&](const Tile& v) { store(iout + (islot++) * kN + i, v); };
  iput(a << b);
  iput(a >> b);
  iput(lshr(a, b));
  iput(a << (b & 31));
  iput(a >> (b & 31));
  iput(lshr(a, b & 31));
  iput(umulhi(a, b));
  iput(cdiv(abs(a) % 1000, (b & 15) + 1));
  return kb.finish();
}
constexpr int kFloatOuts = 9, kIntOuts = 8;

std::vector<launch::Buffer> inputs(DType ft) {
  std::vector<launch::Buffer> b = {launch::Buffer("x", ft, kN), launch::Buffer("y", ft, kN), launch::Buffer("z", ft, kN),
                                   launch::Buffer("a", DType::i32, kN), launch::Buffer("b", DType::i32, kN),
                                   launch::Buffer("fout", ft, kN * kFloatOuts),
                                   launch::Buffer("iout", DType::i32, kN * kIntOuts)};
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> f(-8, 8);
  const double specials[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 0.5, -2.0, 1e-3};
  for (int64_t k = 0; k < kN; ++k) {
    for (int j = 0; j < 3; ++j) b[size_t(j)].set(size_t(k), k < 8 * (j + 1) && k >= 8 * j ? specials[k % 8] : f(rng));
    int32_t av = int32_t(rng()), bv = k < 64 ? int32_t(k - 8) : int32_t(rng() % 80) - 8; // shifts past the width too
    b[3].set_int(size_t(k), av);
    b[4].set_int(size_t(k), k % 7 == 0 ? int32_t(rng()) : bv);
  }
  return b;
}

std::vector<launch::Arg> args(std::vector<launch::Buffer>& b) {
  std::vector<launch::Arg> r;
  for (auto& x : b) r.push_back(launch::Arg::of(x));
  return r;
}

} // namespace

TEST_CASE("sin, cos, erf, pow, fma, clamp, isnan, isinf and the integer bit ops agree on every CPU backend",
          "[codegen][ops]") {
  for (DType ft : {DType::f32, DType::f16, DType::bf16}) {
    ir::Kernel k = math_kernel(ft);
    auto ref = inputs(ft);
    interp::interpret(*k, {kN / 128, 1, 1}, args(ref));
    for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
      INFO(ir::dtype_name(ft) << (lowering == backends::EmuLowering::emu ? ", emu lowering" : ", nvptx lowering"));
      auto got = inputs(ft);
      backends::make_emulate_launcher(lowering)->launch(k, 4, {kN / 128, 1, 1}, args(got));
      int bad = 0;
      for (size_t j = 0; j < size_t(kN * kFloatOuts); ++j) {
        double w = ref[5].get(j), g = got[5].get(j);
        bool same = (std::isnan(w) && std::isnan(g)) || (w == g && std::signbit(w) == std::signbit(g));
        // The nvptx lowering runs libdevice's sin, cos, erf and pow (outputs 0-4): within their
        // documented bound (2 ulp, pow 4) of exact, so of the C library's (1 ulp) too.
        const int64_t slot = int64_t(j) / kN;
        if (!same && lowering == backends::EmuLowering::nvptx && slot <= 4)
          same = fuzz::ulp_distance(g, w, ft) <= (slot <= 2 ? 3 : 5);
        if (!same && ++bad <= 5) FAIL_CHECK("float output " << j / kN << " lane " << j % kN << ": " << g << ", want " << w);
      }
      for (size_t j = 0; j < size_t(kN * kIntOuts); ++j)
        if (ref[6].get_int(j) != got[6].get_int(j) && ++bad <= 10)
          FAIL_CHECK("integer output " << j / kN << " lane " << j % kN << ": " << got[6].get_int(j) << ", want "
                                       << ref[6].get_int(j));
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("integer shifts, umulhi and cdiv follow their definitions on the interpreter", "[interp][ops]") {
  auto ref = inputs(DType::f32);
  ir::Kernel k = math_kernel(DType::f32);
  interp::interpret(*k, {kN / 128, 1, 1}, args(ref));
  for (int64_t j = 0; j < kN; ++j) {
    int64_t a = ref[3].get_int(size_t(j)), b = ref[4].get_int(size_t(j));
    uint32_t ua = uint32_t(a), ub = uint32_t(b);
    auto out = [&](int slot) { return ref[6].get_int(size_t(slot * kN + j)); };
    INFO("a " << a << " b " << b);
    CHECK(out(0) == (ub >= 32 ? 0 : int32_t(ua << ub)));
    CHECK(out(1) == (ub >= 32 ? (a < 0 ? -1 : 0) : a >> ub));
    CHECK(out(2) == (ub >= 32 ? 0 : int32_t(ua >> ub)));
    CHECK(out(3) == int32_t(ua << (ub & 31)));
    CHECK(out(6) == int32_t((uint64_t(ua) * uint64_t(ub)) >> 32));
    int64_t n = (a < 0 ? -a : a) % 1000, d = (b & 15) + 1;
    CHECK(out(7) == (n + d - 1) / d);
  }
  // fma rounds once: x * y + z with the product kept exact.
  for (int64_t j = 0; j < kN; ++j) {
    float x = float(ref[0].get(size_t(j))), y = float(ref[1].get(size_t(j))), z = float(ref[2].get(size_t(j)));
    float w = std::fma(x, y, z), g = float(ref[5].get(size_t(5 * kN + j)));
    CHECK(((std::isnan(w) && std::isnan(g)) || w == g));
  }
}

TEST_CASE("the GPU's sin, cos, erf and pow (libdevice, run on the CPU) are within CUDA's ulp bounds",
          "[codegen][ops][accuracy]") {
  // libdevice's code, inlined by the nvptx lowering and run by the emulator with its
  // fma.rn/mul.rn/add.rn mapped exactly, so sin, cos and pow get the GPU's bits (erf uses
  // ex2.approx, which the host's exp2 stands in for). Measured against the correctly rounded
  // result (the C library in double, rounded once) over 2^15 inputs each.
  REQUIRE(codegen::find_libdevice());
  constexpr int64_t n = 1 << 15;
  KernelBuilder kb("accuracy");
  auto x = kb.arg<Ptr<f32>>("x"), y = kb.arg<Ptr<f32>>("y"), out = kb.arg<Ptr<f32>>("out");
  auto i = program_id(0) * 256 + arange(0, 256);
  auto xv = load(x + i), yv = load(y + i);
  store(out + i, sin(xv));
  store(out + n + i, cos(xv));
  store(out + 2 * n + i, erf(xv * 0.05));
  store(out + 3 * n + i, pow(abs(xv) * 0.01, yv));
  ir::Kernel k = kb.finish();
  launch::Buffer xb("x", DType::f32, n), yb("y", DType::f32, n), ob("out", DType::f32, 4 * n);
  std::mt19937_64 rng(21);
  for (int64_t j = 0; j < n; ++j) {
    // sin/cos: mostly [-100, 100]; an eighth up to 1e6 and a sixteenth up to 1e30, past
    // 105615 where libdevice reduces the argument with a table (Payne-Hanek).
    double mag = j % 8 == 0 ? 1e6 : j % 16 == 1 ? 1e30 : 100;
    xb.set(size_t(j), std::uniform_real_distribution<double>(-mag, mag)(rng));
    yb.set(size_t(j), std::uniform_real_distribution<double>(-8, 8)(rng));
  }
  backends::make_emulate_launcher(backends::EmuLowering::nvptx)
      ->launch(k, 4, {n / 256, 1, 1}, {launch::Arg::of(xb), launch::Arg::of(yb), launch::Arg::of(ob)});
  int64_t worst[4] = {0, 0, 0, 0};
  for (int64_t j = 0; j < n; ++j) {
    const float xf = float(xb.get(size_t(j))), yf = float(yb.get(size_t(j)));
    const float xe = float(xf * 0.05f), xp = float(std::fabs(xf) * 0.01f);
    const double exact[4] = {std::sin(double(xf)), std::cos(double(xf)), std::erf(double(xe)),
                             std::pow(double(xp), double(yf))};
    for (int f = 0; f < 4; ++f) {
      const double got = ob.get(size_t(f * n + j));
      if (!std::isfinite(exact[f]) || std::fabs(exact[f]) > 1e38) continue;
      worst[f] = std::max(worst[f], fuzz::ulp_distance(got, double(float(exact[f])), DType::f32));
    }
  }
  INFO("max ulp error: sin " << worst[0] << ", cos " << worst[1] << ", erf " << worst[2] << ", pow " << worst[3]);
  CHECK(worst[0] <= 2); // CUDA's documented bounds for sinf, cosf, erff (2 ulp) and powf (4 ulp)
  CHECK(worst[1] <= 2);
  CHECK(worst[2] <= 2);
  CHECK(worst[3] <= 4);
  // And not a copy of the host's: libdevice's own algorithms differ from glibc somewhere.
  int64_t differ = 0;
  for (int64_t j = 0; j < n; ++j) differ += ob.get(size_t(j)) != double(std::sin(float(xb.get(size_t(j)))));
  CHECK(differ > 0);
}

TEST_CASE("sin, cos, erf and pow on the GPU link libdevice in and inline it", "[codegen][ops][ptxas]") {
  REQUIRE(codegen::find_libdevice());
  ir::Kernel k = math_kernel(DType::f32);
  for (auto& [arch, c] : codegen::test::compile_all_archs(*k)) {
    INFO(arch);
    CHECK(c.ptx.find("__nv_") == std::string::npos); // inlined, no call left
    CHECK(codegen::test::count_matches(c.ptx, R"(\bcall\b)") == 0);
    CHECK(codegen::test::count_matches(c.ptx, R"(fma\.rn\.f32)") > 0);
  }
}

namespace {

// bits[i] = the bits of x[i] (f32 -> i32, f16 -> i16, f8e5m2 -> i8) and back again.
ir::Kernel bitcast_kernel() {
  KernelBuilder kb("bitcasts");
  auto x = kb.arg<Ptr<f32>>("x"), h = kb.arg(ptr_to(DType::f16), "h"), e = kb.arg(ptr_to(DType::f8e5m2), "e");
  auto xb = kb.arg<Ptr<i32>>("xb"), hb = kb.arg<Ptr<i16>>("hb"), eb = kb.arg<Ptr<i8>>("eb");
  auto x2 = kb.arg<Ptr<f32>>("x2");
  auto i = program_id(0) * 128 + arange(0, 128);
  auto xi = bitcast(load(x + i), i32);
  store(xb + i, xi);
  store(hb + i, bitcast(load(h + i), i16));
  store(eb + i, bitcast(load(e + i), i8));
  store(x2 + i, bitcast(xi ^ int64_t(INT32_MIN), f32)); // flip the sign through the bits
  return kb.finish();
}

// An int8 quantizer: q = clamp(round(x / scale), -127, 127) as i8, and the sign bit of x
// read through its bits.
ir::Kernel quantize_kernel() {
  KernelBuilder kb("quantize_int8");
  auto x = kb.arg<Ptr<f32>>("x");
  auto q = kb.arg<Ptr<i8>>("q");
  auto neg = kb.arg<Ptr<i8>>("neg");
  auto scale = kb.arg<f32>("scale");
  auto i = program_id(0) * 256 + arange(0, 256);
  auto v = load(x + i);
  store(q + i, clamp(round(v / scale), -127, 127).to(i8));
  store(neg + i, lshr(bitcast(v, i32), 31).to(i8));
  return kb.finish();
}

} // namespace

TEST_CASE("bitcast keeps every bit (NaN payloads, -0) on every CPU backend", "[codegen][ops]") {
  constexpr int64_t n = 256;
  auto fresh = [] {
    std::vector<launch::Buffer> b = {launch::Buffer("x", DType::f32, n), launch::Buffer("h", DType::f16, n),
                                     launch::Buffer("e", DType::f8e5m2, n), launch::Buffer("xb", DType::i32, n),
                                     launch::Buffer("hb", DType::i16, n), launch::Buffer("eb", DType::i8, n),
                                     launch::Buffer("x2", DType::f32, n)};
    std::mt19937 rng(3);
    for (int64_t j = 0; j < n; ++j) {
      uint32_t u = j < 4 ? std::array<uint32_t, 4>{0x7fc00001u, 0xffa00000u, 0x80000000u, 0x7f800000u}[size_t(j)]
                         : uint32_t(rng());
      std::memcpy(b[0].bytes.data() + 4 * j, &u, 4);
      uint16_t hb = uint16_t(j < 2 ? (j ? 0x7c01 : 0xfe55) : rng());
      std::memcpy(b[1].bytes.data() + 2 * j, &hb, 2);
      b[2].bytes[size_t(j)] = std::byte(j);
    }
    return b;
  };
  auto args = [](std::vector<launch::Buffer>& b) {
    std::vector<launch::Arg> r;
    for (auto& x : b) r.push_back(launch::Arg::of(x));
    return r;
  };
  ir::Kernel k = bitcast_kernel();
  auto ref = fresh();
  interp::interpret(*k, {2, 1, 1}, args(ref));
  CHECK(ref[3].bytes == ref[0].bytes); // the interpreter keeps the bits it was given
  CHECK(ref[4].bytes == ref[1].bytes);
  CHECK(ref[5].bytes == ref[2].bytes);
  for (int64_t j = 0; j < n; ++j) {
    uint32_t a, b;
    std::memcpy(&a, ref[0].bytes.data() + 4 * j, 4);
    std::memcpy(&b, ref[6].bytes.data() + 4 * j, 4);
    REQUIRE(b == (a ^ 0x80000000u));
  }
  for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
    INFO((lowering == backends::EmuLowering::emu ? "emu lowering" : "nvptx lowering"));
    auto got = fresh();
    backends::make_emulate_launcher(lowering)->launch(k, 4, {2, 1, 1}, args(got));
    for (size_t b = 3; b < 7; ++b) CHECK(got[b].bytes == ref[b].bytes);
  }
}

TEST_CASE("an int8 quantizer with round, clamp and bitcast matches plain C++", "[codegen][ops]") {
  constexpr int64_t n = 1024;
  const float scale = 0.05f;
  launch::Buffer x("x", DType::f32, n), q("q", DType::i8, n), neg("neg", DType::i8, n);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> d(-8, 8);
  for (int64_t j = 0; j < n; ++j) x.set(size_t(j), j == 0 ? -0.0 : j == 1 ? 0.075 : j == 2 ? 0.125 : d(rng)); // ties
  backends::make_emulate_launcher()->launch(quantize_kernel(), 4, {n / 256, 1, 1},
                                            {launch::Arg::of(x), launch::Arg::of(q), launch::Arg::of(neg),
                                             launch::Arg::of_float(scale)});
  for (int64_t j = 0; j < n; ++j) {
    float v = float(x.get(size_t(j)));
    float r = std::nearbyint(v / scale); // ties to even
    int want = int(std::clamp(r, -127.0f, 127.0f));
    INFO("x = " << v);
    REQUIRE(q.get_int(size_t(j)) == want);
    REQUIRE(neg.get_int(size_t(j)) == (std::signbit(v) ? 1 : 0));
  }
}

TEST_CASE("argmax and argmin: first index on ties, NaN ignored, both axes, every CPU backend", "[codegen][ops]") {
  constexpr int64_t R = 8, C = 64;
  KernelBuilder kb("arg_reduce");
  auto x = kb.arg<Ptr<f32>>("x"), xi = kb.arg<Ptr<i32>>("xi"), out = kb.arg<Ptr<i32>>("out");
  auto r = arange(0, R), c = arange(0, C);
  auto v = load(x + r.col() * C + c.row());
  auto vi = load(xi + r.col() * C + c.row());
  store(out + r, argmax(v, 1));
  store(out + R + r, argmin(v, 1));
  store(out + 2 * R + c, argmax(v, 0));
  store(out + 2 * R + C + c, argmin(vi, 0));
  ir::Kernel k = kb.finish();

  launch::Buffer xb("x", DType::f32, R * C), xib("xi", DType::i32, R * C);
  std::mt19937 rng(5);
  for (int64_t j = 0; j < R * C; ++j) {
    xb.set(size_t(j), double(rng() % 7)); // many ties
    xib.set_int(size_t(j), int64_t(rng() % 5) - 2);
  }
  for (int64_t j = 0; j < C; ++j) xb.set(size_t(3 * C + j), NAN); // a row of NaNs
  xb.set(size_t(5 * C + 2), NAN);                                 // a NaN among numbers
  xb.set(size_t(5 * C + 9), 100.0);
  auto want = [&](bool max_, bool ints, int64_t line, bool row) {
    int64_t n = row ? C : R, best = -1;
    double bv = 0;
    for (int64_t t = 0; t < n; ++t) {
      int64_t at = row ? line * C + t : t * C + line;
      double e = ints ? double(xib.get_int(size_t(at))) : xb.get(size_t(at));
      if (std::isnan(e)) continue;
      if (best < 0 || (max_ ? e > bv : e < bv)) best = t, bv = e;
    }
    return best < 0 ? 0 : best;
  };
  for (auto lowering : {0, 1, 2}) {
    INFO("backend " << lowering << " (interpreter, emu lowering, nvptx lowering)");
    launch::Buffer o("out", DType::i32, 2 * R + 2 * C);
    std::vector<launch::Arg> a = {launch::Arg::of(xb), launch::Arg::of(xib), launch::Arg::of(o)};
    if (lowering == 0) interp::interpret(*k, {1, 1, 1}, a);
    else
      backends::make_emulate_launcher(lowering == 1 ? backends::EmuLowering::emu : backends::EmuLowering::nvptx)
          ->launch(k, 4, {1, 1, 1}, a);
    for (int64_t line = 0; line < R; ++line) {
      CHECK(o.get_int(size_t(line)) == want(true, false, line, true));
      CHECK(o.get_int(size_t(R + line)) == want(false, false, line, true));
    }
    for (int64_t line = 0; line < C; ++line) {
      CHECK(o.get_int(size_t(2 * R + line)) == want(true, false, line, false));
      CHECK(o.get_int(size_t(2 * R + C + line)) == want(false, true, line, false));
    }
    CHECK(o.get_int(3) == 0);  // all NaN
    CHECK(o.get_int(5) == 9);  // 100 beats the rest; the NaN at 2 is ignored
  }
}

TEST_CASE("RoPE with in-kernel sin/cos and GELU with erf match plain C++", "[codegen][ops]") {
  constexpr int64_t T = 16, D = 64, H = D / 2;
  // Rotary embedding: the pair (x[t, i], x[t, i + D/2]) rotated by t * 10000^(-2i/D).
  KernelBuilder kb("rope_gelu");
  auto x = kb.arg<Ptr<f32>>("x"), rope = kb.arg<Ptr<f32>>("rope"), gelu = kb.arg<Ptr<f32>>("gelu");
  auto t = arange(0, T), i = arange(0, H);
  auto theta = t.col().to(f32) * pow(10000.0, i.row().to(f32) * (-2.0 / D)); // [T, H]
  auto lo = load(x + t.col() * D + i.row()), hi = load(x + t.col() * D + H + i.row());
  auto c = cos(theta), s = sin(theta);
  store(rope + t.col() * D + i.row(), lo * c - hi * s);
  store(rope + t.col() * D + H + i.row(), lo * s + hi * c);
  auto d = arange(0, D);
  auto v = load(x + t.col() * D + d.row());
  store(gelu + t.col() * D + d.row(), 0.5 * v * (1.0 + erf(v * 0.7071067811865476)));
  ir::Kernel k = kb.finish();

  launch::Buffer xb("x", DType::f32, T * D), rb("rope", DType::f32, T * D), gb("gelu", DType::f32, T * D);
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> u(-3, 3);
  for (int64_t j = 0; j < T * D; ++j) xb.set(size_t(j), u(rng));
  backends::make_emulate_launcher()->launch(k, 4, {1, 1, 1}, {launch::Arg::of(xb), launch::Arg::of(rb), launch::Arg::of(gb)});
  for (int64_t tt = 0; tt < T; ++tt)
    for (int64_t ii = 0; ii < H; ++ii) {
      double th = double(tt) * std::pow(10000.0, -2.0 * double(ii) / D);
      double a = xb.get(size_t(tt * D + ii)), b = xb.get(size_t(tt * D + H + ii));
      INFO("t " << tt << " i " << ii);
      CHECK(rb.get(size_t(tt * D + ii)) == Approx(a * std::cos(th) - b * std::sin(th)).margin(2e-5));
      CHECK(rb.get(size_t(tt * D + H + ii)) == Approx(a * std::sin(th) + b * std::cos(th)).margin(2e-5));
    }
  for (int64_t j = 0; j < T * D; ++j) {
    double v = xb.get(size_t(j));
    CHECK(gb.get(size_t(j)) == Approx(0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))).margin(1e-6));
  }
}

TEST_CASE("cumsum, cumprod, cummax, cummin and reduce_prod along either axis match C++ on every CPU backend",
          "[codegen][ops][scan]") {
  // [8, 64] i32 and f32 tiles, each scan along both axes, with 1, 4 and 8 warps (replicated,
  // spread and split layouts).
  constexpr int64_t R = 8, C = 64;
  KernelBuilder kb("scans");
  auto xi = kb.arg<Ptr<i32>>("xi"), xf = kb.arg<Ptr<f32>>("xf");
  auto oi = kb.arg<Ptr<i32>>("oi"), of = kb.arg<Ptr<f32>>("of");
  auto r = arange(0, R), c = arange(0, C);
  auto at = r.col() * C + c.row();
  auto vi = load(xi + at), vf = load(xf + at);
  int slot = 0;
  for (int axis : {0, 1}) {
    store(oi + (slot++) * R * C + at, cumsum(vi, axis));
    store(oi + (slot++) * R * C + at, cumprod(vi, axis));
    store(oi + (slot++) * R * C + at, cummax(vi, axis));
    store(oi + (slot++) * R * C + at, cummin(vi, axis));
  }
  store(of + at, cumsum(vf, 1));
  store(of + R * C + at, cummax(vf, 0));
  store(of + 2 * R * C + r, reduce_prod(vf, 1));
  ir::Kernel k = kb.finish();

  launch::Buffer bi("xi", DType::i32, R * C), bf("xf", DType::f32, R * C);
  std::mt19937 rng(8);
  for (int64_t j = 0; j < R * C; ++j) {
    bi.set_int(size_t(j), int64_t(rng() % 2001) - 1000);
    bf.set(size_t(j), j % 64 == 7 ? NAN : double(int64_t(rng() % 9) - 4) * 0.5 + (j % 3 ? 1.0 : -0.25));
  }
  // The reference, in order.
  auto ref_int = [&](int axis, int kind, int64_t rr, int64_t cc) {
    int64_t n = axis ? cc : rr;
    uint32_t acc = 0;
    int32_t m = 0;
    for (int64_t t = 0; t <= n; ++t) {
      int32_t v = int32_t(bi.get_int(size_t(axis ? rr * C + t : t * C + cc)));
      if (t == 0) acc = uint32_t(v), m = v;
      else {
        acc = kind == 0 ? acc + uint32_t(v) : acc * uint32_t(v);
        m = kind == 2 ? std::max(m, v) : std::min(m, v);
      }
    }
    return kind < 2 ? int64_t(int32_t(acc)) : int64_t(m);
  };
  for (int backend : {0, 1, 2})
    for (int warps : {1, 4, 8}) {
      INFO("backend " << backend << " (interpreter, emu lowering, nvptx lowering), warps " << warps);
      launch::Buffer oib("oi", DType::i32, 8 * R * C), ofb("of", DType::f32, 2 * R * C + R);
      std::vector<launch::Arg> a = {launch::Arg::of(bi), launch::Arg::of(bf), launch::Arg::of(oib), launch::Arg::of(ofb)};
      if (backend == 0) {
        if (warps != 4) continue;
        interp::interpret(*k, {1, 1, 1}, a);
      } else {
        backends::make_emulate_launcher(backend == 1 ? backends::EmuLowering::emu : backends::EmuLowering::nvptx)
            ->launch(k, warps, {1, 1, 1}, a);
      }
      int bad = 0;
      for (int axis : {0, 1})
        for (int kind = 0; kind < 4; ++kind)
          for (int64_t rr = 0; rr < R; ++rr)
            for (int64_t cc = 0; cc < C; ++cc) {
              int64_t got = oib.get_int(size_t((axis * 4 + kind) * R * C + rr * C + cc));
              if (got != ref_int(axis, kind, rr, cc) && ++bad <= 5)
                FAIL_CHECK("axis " << axis << " kind " << kind << " at " << rr << "," << cc << ": " << got
                                   << ", want " << ref_int(axis, kind, rr, cc));
            }
      for (int64_t rr = 0; rr < R; ++rr) {
        double s = 0, p = 1;
        for (int64_t cc = 0; cc < C; ++cc) {
          double v = bf.get(size_t(rr * C + cc));
          s += v;
          p *= v;
          double got = ofb.get(size_t(rr * C + cc));
          // Sums of halves and quarters are exact in f32 in any order, NaN poisons the rest.
          if (!((std::isnan(s) && std::isnan(got)) || got == s) && ++bad <= 10)
            FAIL_CHECK("cumsum f32 at " << rr << "," << cc << ": " << got << ", want " << s);
        }
        double gp = ofb.get(size_t(2 * R * C + rr));
        if (!((std::isnan(p) && std::isnan(gp)) || gp == Approx(p).epsilon(1e-5)) && ++bad <= 10)
          FAIL_CHECK("reduce_prod row " << rr << ": " << gp << ", want " << p);
      }
      for (int64_t cc = 0; cc < C; ++cc) {
        double m = -INFINITY;
        for (int64_t rr = 0; rr < R; ++rr) {
          double v = bf.get(size_t(rr * C + cc));
          if (!std::isnan(v)) m = std::max(m, v);
          double got = ofb.get(size_t(R * C + rr * C + cc));
          double want = m == -INFINITY ? NAN : m; // a column starting with NaN stays NaN until a number
          if (!((std::isnan(want) && std::isnan(got)) || got == want) && ++bad <= 10)
            FAIL_CHECK("cummax f32 at " << rr << "," << cc << ": " << got << ", want " << want);
        }
      }
      CHECK(bad == 0);
    }
}

TEST_CASE("a top-p (nucleus) sampler with cumsum and argmax matches plain C++", "[codegen][ops][scan]") {
  // Probabilities sorted in descending order per row (as a sampler sorts them): keep the
  // smallest prefix whose mass reaches p, renormalize, and pick the most likely kept token
  // and the number kept.
  constexpr int64_t R = 4, V = 128;
  const float p = 0.8f;
  KernelBuilder kb("top_p");
  auto probs = kb.arg<Ptr<f32>>("probs");
  auto kept = kb.arg<Ptr<i32>>("kept"), pick = kb.arg<Ptr<i32>>("pick");
  auto top_p = kb.arg<f32>("p");
  auto r = arange(0, R), v = arange(0, V);
  auto x = load(probs + r.col() * V + v.row());
  auto before = cumsum(x, 1) - x; // mass of the tokens ahead of each one
  auto keep = before < top_p;
  store(kept + r, reduce_sum(keep.to(i32), 1));
  store(pick + r, argmax(where(keep, x, -1.0), 1));
  ir::Kernel k = kb.finish();

  launch::Buffer pb("probs", DType::f32, R * V), kb_("kept", DType::i32, R), pk("pick", DType::i32, R);
  std::mt19937 rng(4);
  for (int64_t rr = 0; rr < R; ++rr) {
    std::vector<double> w(V);
    double sum = 0;
    for (auto& e : w) sum += (e = std::exp(-0.05 * double(rng() % 200)));
    std::sort(w.rbegin(), w.rend());
    for (int64_t j = 0; j < V; ++j) pb.set(size_t(rr * V + j), w[size_t(j)] / sum);
  }
  backends::make_emulate_launcher()->launch(k, 4, {1, 1, 1}, {launch::Arg::of(pb), launch::Arg::of(kb_), launch::Arg::of(pk),
                                                              launch::Arg::of_float(p)});
  for (int64_t rr = 0; rr < R; ++rr) {
    float mass = 0;
    int want = 0;
    for (int64_t j = 0; j < V && mass < p; ++j) mass += float(pb.get(size_t(rr * V + j))), ++want;
    INFO("row " << rr);
    CHECK(kb_.get_int(size_t(rr)) == want);
    CHECK(pk.get_int(size_t(rr)) == 0); // the most likely token leads a sorted row
  }
}

namespace {
// Asserts every x[i] is below `limit`; out[i] = x[i].
ir::Kernel asserting_kernel(int* line) {
  KernelBuilder kb("asserting");
  auto x = kb.arg<Ptr<f32>>("x"), out = kb.arg<Ptr<f32>>("out");
  auto limit = kb.arg<f32>("limit");
  auto i = program_id(0) * 128 + arange(0, 128);
  auto v = load(x + i);
  *line = __LINE__ + 1;
  device_assert(v < limit, "x must stay below the limit");
  store(out + i, v);
  return kb.finish();
}
} // namespace

TEST_CASE("device_assert stops the launch with its message and place on every backend, and compiles out",
          "[codegen][ops][assert]") {
  int line = 0;
  ir::Kernel k = asserting_kernel(&line);
  launch::Buffer x("x", DType::f32, 256), out("out", DType::f32, 256);
  for (int j = 0; j < 256; ++j) x.set(size_t(j), j == 200 ? 5.0 : 0.5);
  const std::string here = std::string(__FILE__) + ":" + std::to_string(line);
  auto run = [&](launch::Launcher& l, double limit) {
    try {
      l.launch(k, 4, {2, 1, 1}, {launch::Arg::of(x), launch::Arg::of(out), launch::Arg::of_float(limit)});
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto interpreter = interp::make_interpret_launcher();
  CHECK(run(*interpreter, 10.0).empty());
  CHECK_THAT(run(*interpreter, 1.0), Catch::Contains("device_assert failed: x must stay below the limit") &&
                                         Catch::Contains(here) && Catch::Contains("program (1, 0, 0)") &&
                                         Catch::Contains("element 72"));
  for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
    INFO((lowering == backends::EmuLowering::emu ? "emu lowering" : "nvptx lowering"));
    auto emu = backends::make_emulate_launcher(lowering);
    CHECK(run(*emu, 10.0).empty());
    CHECK_THAT(run(*emu, 1.0), Catch::Contains("device_assert failed at " + here) &&
                                   Catch::Contains("x must stay below the limit") && Catch::Contains("block (1, 0, 0)") &&
                                   Catch::Contains("thread"));
  }
  // The GPU calls CUDA's __assertfail; ptxas accepts it; the option compiles it out.
  for (auto& [arch, c] : codegen::test::compile_all_archs(*k)) {
    INFO(arch);
    CHECK(c.ptx.find("__assertfail") != std::string::npos);
    CHECK(c.ptx.find("x must stay below the limit") == std::string::npos); // held as bytes
  }
  codegen::CompileOptions o;
  o.device_asserts = false;
  CHECK(codegen::compile(*k, o).ptx.find("__assertfail") == std::string::npos);
}

TEST_CASE("device_print prints the same lines in the same order on the CPU backends", "[codegen][print][emulator]") {
  KernelBuilder kb("printer");
  auto x = kb.arg<Ptr<f32>>("x");
  auto r = arange(0, 2), c = arange(0, 4);
  auto v = load(x + r.col() * 4 + c.row()) * (program_id(0) + 1).to(f32); // [2, 4]
  device_print("v", v);
  device_print("pid", program_id(0));
  device_print("big", v > 2.0f);
  ir::Kernel k = kb.finish();
  launch::Buffer xb("x", DType::f32, 8);
  for (size_t i = 0; i < 8; ++i) xb.set(i, 0.5 * double(i));
  auto capture = [&](launch::Launcher& l) {
    std::vector<std::string> lines;
    set_device_print_sink([&](const std::string& s) { lines.push_back(s); });
    l.launch(k, 4, {2, 1, 1}, {launch::Arg::of(xb)}); // 128 threads: most elements held by several
    set_device_print_sink({});
    return lines;
  };
  auto interpreter = interp::make_interpret_launcher();
  std::vector<std::string> want = capture(*interpreter);
  REQUIRE(want.size() == 2 * (8 + 1 + 8));
  CHECK(want[0] == "pid (0, 0, 0) idx (0, 0) v: 0");
  CHECK(want[5] == "pid (0, 0, 0) idx (1, 1) v: 2.5");
  CHECK(want[8] == "pid (0, 0, 0) idx () pid: 0");
  CHECK(want[15] == "pid (0, 0, 0) idx (1, 2) big: 1");
  CHECK(want[17 + 1] == "pid (1, 0, 0) idx (0, 1) v: 1");
  auto emulator = backends::make_emulate_launcher(backends::EmuLowering::emu);
  CHECK(capture(*emulator) == want); // each element once, by its owner, sorted as the interpreter prints
  // The GPU lowering (here run by the emulator) drops it.
  auto nvptx = backends::make_emulate_launcher(backends::EmuLowering::nvptx);
  CHECK(capture(*nvptx).empty());
}
