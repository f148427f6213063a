// Philox 4x32-10 random numbers in the DSL: a plain C++ reference checked against the
// published known-answer vectors, the kernels bit for bit against it on every CPU backend,
// and a dropout kernel against a plain C++ dropout.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdint>

#include "backends/launchers.h"
#include "dsl/dsl.h"
#include "interp/interpreter.h"
#include "interp/launcher.h"
#include "launch/launcher.h"
#include "tests/codegen/codegen_test_util.h"

using namespace tilec;
using namespace tilec::dsl;
using ir::DType;

namespace {

std::array<uint32_t, 4> philox(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k[0] += 0x9E3779B9u, k[1] += 0xBB67AE85u;
    uint64_t p0 = uint64_t(0xD2511F53u) * c[0], p1 = uint64_t(0xCD9E8D57u) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1], uint32_t(p0)};
  }
  return c;
}

float uniform(uint32_t w) {
  int32_t x = int32_t(w);
  return float(x < 0 ? -(int64_t(x)) - 1 : x) * std::nextafter(0x1p-31f, 0.0f);
}

constexpr int64_t kN = 1024;
constexpr uint64_t kSeed = 0x1234567890abcdefull;

// Each element's four words and its rand, randn at offset base + i.
ir::Kernel random_kernel() {
  KernelBuilder kb("random");
  auto words = kb.arg<Ptr<i32>>("words");
  auto u = kb.arg<Ptr<f32>>("u"), g = kb.arg<Ptr<f32>>("g");
  auto seed = kb.arg<i64>("seed");
  auto base = kb.arg<i32>("base");
  auto i = program_id(0) * 256 + arange(0, 256);
  auto w = randint4x(seed, base + i);
  for (int k = 0; k < 4; ++k) store(words + i * 4 + k, w[size_t(k)]);
  store(u + i, rand(seed, base + i));
  store(g + i, randn(seed, base + i));
  return kb.finish();
}

// out = x / (1 - p) where rand >= p, else 0 (inverted dropout).
ir::Kernel dropout_kernel() {
  KernelBuilder kb("dropout");
  auto x = kb.arg<Ptr<f32>>("x"), out = kb.arg<Ptr<f32>>("out");
  auto p = kb.arg<f32>("p");
  auto seed = kb.arg<i32>("seed");
  auto n = kb.arg<i32>("n");
  auto i = program_id(0) * 128 + arange(0, 128);
  auto live = i < n;
  auto keep = rand(seed, i) >= p;
  store(out + i, where(keep, load(x + i, live) / (1.0 - p), 0.0), live);
  return kb.finish();
}

} // namespace

TEST_CASE("the Philox 4x32-10 reference reproduces the published known-answer vectors", "[random]") {
  CHECK(philox({0, 0, 0, 0}, {0, 0}) == std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(philox({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}) ==
        std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(philox({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}) ==
        std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("randint4x and rand give the same bits on every CPU backend as the reference, randn within ulps",
          "[random][codegen]") {
  ir::Kernel k = random_kernel();
  const int64_t base = 2147483000; // offsets wrap past 2^31 inside the run
  auto fresh = [] {
    return std::vector<launch::Buffer>{launch::Buffer("words", DType::i32, kN * 4), launch::Buffer("u", DType::f32, kN),
                                       launch::Buffer("g", DType::f32, kN)};
  };
  auto args = [&](std::vector<launch::Buffer>& b) {
    return std::vector<launch::Arg>{launch::Arg::of(b[0]), launch::Arg::of(b[1]), launch::Arg::of(b[2]),
                                    launch::Arg::of_int(int64_t(kSeed)), launch::Arg::of_int(base)};
  };
  auto ref = fresh();
  interp::interpret(*k, {kN / 256, 1, 1}, args(ref));
  double sum = 0, sum_g = 0, sum_g2 = 0;
  for (int64_t j = 0; j < kN; ++j) {
    uint32_t offset = uint32_t(base + j);
    auto want = philox({offset, 0, 0, 0}, {uint32_t(kSeed), uint32_t(kSeed >> 32)});
    for (int w = 0; w < 4; ++w) REQUIRE(uint32_t(ref[0].get_int(size_t(j * 4 + w))) == want[size_t(w)]);
    float u = float(ref[1].get(size_t(j)));
    REQUIRE(u == uniform(want[0]));
    REQUIRE((u >= 0 && u < 1));
    sum += u;
    double g = ref[2].get(size_t(j));
    sum_g += g, sum_g2 += g * g;
  }
  CHECK(sum / kN == Approx(0.5).margin(0.05));
  CHECK(sum_g / kN == Approx(0.0).margin(0.1));
  CHECK(sum_g2 / kN == Approx(1.0).margin(0.15));
  for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
    INFO((lowering == backends::EmuLowering::emu ? "emu lowering" : "nvptx lowering"));
    auto got = fresh();
    backends::make_emulate_launcher(lowering)->launch(k, 4, {kN / 256, 1, 1}, args(got));
    CHECK(got[0].bytes == ref[0].bytes);
    CHECK(got[1].bytes == ref[1].bytes);
    // randn goes through log, sqrt and cos, approximate on a backend's own terms (ir/SEMANTICS.md).
    for (int64_t j = 0; j < kN; ++j)
      REQUIRE(got[2].get(size_t(j)) == Approx(ref[2].get(size_t(j))).epsilon(1e-5).margin(1e-6));
  }
  CHECK(uniform(0x7fffffffu) < 1.0f); // the largest word stays below 1
}

TEST_CASE("a dropout kernel with rand matches a plain C++ dropout", "[random][codegen]") {
  const int64_t n = 1000;
  const float p = 0.3f;
  const int32_t seed = 42;
  launch::Buffer x("x", DType::f32, size_t(n));
  for (int64_t j = 0; j < n; ++j) x.set(size_t(j), std::sin(double(j)) * 3);
  launch::Buffer out("out", DType::f32, size_t(n));
  backends::make_emulate_launcher()->launch(dropout_kernel(), 4, {(n + 127) / 128, 1, 1},
                                            {launch::Arg::of(x), launch::Arg::of(out), launch::Arg::of_float(p),
                                             launch::Arg::of_int(seed), launch::Arg::of_int(n)});
  int kept = 0;
  for (int64_t j = 0; j < n; ++j) {
    float u = uniform(philox({uint32_t(j), 0, 0, 0}, {uint32_t(seed), 0})[0]);
    float want = u >= p ? float(x.get(size_t(j))) / (1.0f - p) : 0.0f;
    INFO("element " << j);
    REQUIRE(float(out.get(size_t(j))) == want);
    kept += u >= p;
  }
  CHECK(double(kept) / n == Approx(0.7).margin(0.05));
}

TEST_CASE("Philox rounds compile to 32-bit high multiplies on the GPU", "[random][codegen][ptxas]") {
  for (auto& [arch, c] : codegen::test::compile_all_archs(*random_kernel())) {
    INFO(arch);
    // 10 rounds x 2 high products per element: umulhi is one 32-bit instruction (mul.hi, or
    // mul.wide where the low half is used too), never a 64-bit multiply.
    CHECK(codegen::test::count_matches(c.ptx, R"(mul\.(hi|wide)\.u32)") >= 20);
    CHECK(codegen::test::count_matches(c.ptx, R"(mul\.lo\.[su]64)") == 0);
  }
}

TEST_CASE("a scalar argument of the wrong kind is an error on every backend, not a conversion", "[codegen][errors]") {
  launch::Buffer x("x", DType::f32, 128), out("out", DType::f32, 128);
  auto launch = [&](launch::Launcher& l, launch::Arg p, launch::Arg seed) {
    try {
      l.launch(dropout_kernel(), 4, {1, 1, 1}, {launch::Arg::of(x), launch::Arg::of(out), p, seed, launch::Arg::of_int(128)});
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto interpreter = interp::make_interpret_launcher();
  auto emulator = backends::make_emulate_launcher();
  for (launch::Launcher* l : {interpreter.get(), emulator.get()}) {
    CHECK(launch(*l, launch::Arg::of_float(0.5), launch::Arg::of_int(1)).empty());
    CHECK_THAT(launch(*l, launch::Arg::of_int(1), launch::Arg::of_int(1)), Catch::Contains("integer 1, not a float"));
    CHECK_THAT(launch(*l, launch::Arg::of_float(0.5), launch::Arg::of_float(3.0)),
               Catch::Contains("float 3, not an integer"));
  }
}
