// The math and integer ops users reach for (sin, cos, erf, pow, fma, clamp, isnan, isinf,
// shifts, umulhi, cdiv): DSL through both lowerings on the emulator against the
// interpreter, bit for bit (the CPU backends call the same C library), and on the GPU
// through libdevice, linked in and inlined, as ptxas accepts it.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "backends/launchers.h"
#include "dsl/dsl.h"
#include "interp/interpreter.h"
#include "kernels/launcher.h"
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

std::vector<interp::Buffer> inputs(DType ft) {
  std::vector<interp::Buffer> b = {interp::Buffer("x", ft, kN), interp::Buffer("y", ft, kN), interp::Buffer("z", ft, kN),
                                   interp::Buffer("a", DType::i32, kN), interp::Buffer("b", DType::i32, kN),
                                   interp::Buffer("fout", ft, kN * kFloatOuts),
                                   interp::Buffer("iout", DType::i32, kN * kIntOuts)};
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

std::vector<interp::Arg> args(std::vector<interp::Buffer>& b) {
  std::vector<interp::Arg> r;
  for (auto& x : b) r.push_back(interp::Arg::of(x));
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
