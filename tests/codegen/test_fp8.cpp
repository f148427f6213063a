// 8-bit floats (f8e4m3, f8e5m2) through the whole stack: the one C++ definition
// (abi/float8.h) against a brute-force search, and every place a conversion runs — the
// interpreter, the emulator's IR conversion (the emu lowering, and the GPU before sm_89) and
// PTX's cvt as the nvptx lowering emits it for sm_89+ — bit for bit against that definition.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "abi/float8.h"
#include "backends/launchers.h"
#include "dsl/dsl.h"
#include "interp/interpreter.h"
#include "launch/launcher.h"
#include "templates/attention/paged_attention.h"
#include "tests/codegen/codegen_test_util.h"

using namespace tilec;
using namespace tilec::dsl;
using ir::DType;

namespace {

const Fp8Format& format_of(DType t) { return t == DType::f8e4m3 ? kE4M3 : kE5M2; }

// The nearest finite fp8 value to x by search (ties to the even encoding), saturated.
float nearest_by_search(float x, const Fp8Format& f) {
  if (std::fabs(x) > f.max_finite) return std::copysign(f.max_finite, x);
  float best = 0;
  double best_d = INFINITY;
  int best_bits = 0;
  for (int bits = 0; bits < 256; ++bits) {
    float v = fp8_bits_to_f32(uint8_t(bits), f);
    if (!std::isfinite(v)) continue;
    double d = std::fabs(double(v) - double(x));
    if (d < best_d || (d == best_d && (bits & 1) == 0 && (best_bits & 1))) best = v, best_d = d, best_bits = bits;
  }
  return best;
}

// Values that exercise every binade, the ties, the subnormals and saturation.
std::vector<float> probe_values(const Fp8Format& f) {
  std::vector<float> v = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, f.max_finite, -f.max_finite,
                          f.max_finite * 1.03f, 1e30f, -1e30f, 1e-30f, std::ldexp(1.0f, -130)};
  for (int bits = 0; bits < 256; ++bits) {
    float a = fp8_bits_to_f32(uint8_t(bits), f), b = fp8_bits_to_f32(uint8_t(bits + 1), f);
    if (!std::isfinite(a) || !std::isfinite(b) || bits == 0x7f) continue;
    v.push_back(a);
    v.push_back((a + b) / 2); // a tie between neighbours (exact in f32)
    v.push_back(std::nextafter((a + b) / 2, INFINITY));
    v.push_back(std::nextafter((a + b) / 2, -INFINITY));
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(-1, 1);
  std::uniform_int_distribution<int> ex(-20, 18);
  for (int i = 0; i < 2000; ++i) v.push_back(std::ldexp(mant(rng), ex(rng)));
  return v;
}

} // namespace

TEST_CASE("fp8 conversions: exact decode, round to nearest even, saturation, NaN", "[fp8]") {
  for (DType t : {DType::f8e4m3, DType::f8e5m2}) {
    const Fp8Format& f = format_of(t);
    INFO(ir::dtype_name(t));
    for (int bits = 0; bits < 256; ++bits) {
      float v = fp8_bits_to_f32(uint8_t(bits), f);
      if (std::isfinite(v)) CHECK(f32_to_fp8_bits(v, f) == bits); // every finite value is exact
    }
    for (float x : probe_values(f)) {
      INFO("x = " << x);
      float got = fp8_bits_to_f32(f32_to_fp8_bits(x, f), f);
      if (std::isnan(x)) {
        CHECK(f32_to_fp8_bits(x, f) == 0x7f);
        continue;
      }
      CHECK(got == nearest_by_search(x, f));
      CHECK(std::signbit(got) == std::signbit(x));
    }
  }
  CHECK(f8e4m3_bits_to_f32(0x7e) == 448.0f);
  CHECK(std::isnan(f8e4m3_bits_to_f32(0xff)));
  CHECK(f8e4m3_bits_to_f32(0x01) == std::ldexp(1.0f, -9));
  CHECK(f8e5m2_bits_to_f32(0x7b) == 57344.0f);
  CHECK(std::isinf(f8e5m2_bits_to_f32(0x7c)));
  CHECK(f8e5m2_bits_to_f32(0x01) == std::ldexp(1.0f, -16));
  CHECK(ir::parse_dtype("f8e4m3") == DType::f8e4m3);
  CHECK(ir::dtype_bytes(DType::f8e5m2) == 1);
}

namespace {

// decoded[i] = f32(bytes[i]) and encoded[i] = fp8(values[i]) for i < n.
ir::Kernel convert_kernel(DType t) {
  KernelBuilder kb("fp8_convert");
  auto bytes = kb.arg(ptr_to(t), "bytes");
  auto values = kb.arg<Ptr<f32>>("values");
  auto decoded = kb.arg<Ptr<f32>>("decoded");
  auto encoded = kb.arg(ptr_to(t), "encoded");
  auto n_arg = kb.arg<i32>("n");
  auto i = program_id(0) * 256 + arange(0, 256);
  auto live = i < n_arg;
  store(decoded + i, load(bytes + i, live).to(f32), live);
  store(encoded + i, load(values + i, live).to(ElemType{t, false}), live);
  return kb.finish();
}

} // namespace

TEST_CASE("fp8 casts agree bit for bit: interpreter, emu lowering, PTX's cvt on the nvptx lowering", "[fp8][codegen]") {
  for (DType t : {DType::f8e4m3, DType::f8e5m2}) {
    const Fp8Format& f = format_of(t);
    std::vector<float> probes = probe_values(f);
    const int64_t n = int64_t(probes.size());
    ir::Kernel k = convert_kernel(t);
    auto fresh = [&] {
      std::vector<launch::Buffer> b = {launch::Buffer("bytes", t, size_t(n)), launch::Buffer("values", DType::f32, size_t(n)),
                                       launch::Buffer("decoded", DType::f32, size_t(n)), launch::Buffer("encoded", t, size_t(n))};
      for (int64_t j = 0; j < n; ++j) {
        std::memset(b[0].bytes.data() + j, int(j % 256), 1);
        std::memcpy(b[1].bytes.data() + 4 * j, &probes[size_t(j)], 4);
      }
      return b;
    };
    auto args = [&](std::vector<launch::Buffer>& b) {
      return std::vector<launch::Arg>{launch::Arg::of(b[0]), launch::Arg::of(b[1]), launch::Arg::of(b[2]),
                                      launch::Arg::of(b[3]), launch::Arg::of_int(n)};
    };
    const launch::Grid grid{(n + 255) / 256, 1, 1};
    auto check = [&](std::vector<launch::Buffer>& b, const char* who) {
      INFO(who << ", " << ir::dtype_name(t));
      int bad = 0;
      for (int64_t j = 0; j < n; ++j) {
        float want_dec = fp8_bits_to_f32(uint8_t(j % 256), f), got_dec;
        std::memcpy(&got_dec, b[2].bytes.data() + 4 * j, 4);
        bool dec_ok = std::isnan(want_dec) ? std::isnan(got_dec)
                                           : std::memcmp(&want_dec, &got_dec, 4) == 0; // -0 stays -0
        uint8_t want_enc = f32_to_fp8_bits(probes[size_t(j)], f), got_enc = uint8_t(b[3].bytes[size_t(j)]);
        if ((!dec_ok || want_enc != got_enc) && ++bad <= 5)
          FAIL_CHECK("element " << j << ": decode " << int(j % 256) << " -> " << got_dec << " (want " << want_dec
                                << "), encode " << probes[size_t(j)] << " -> " << int(got_enc) << " (want "
                                << int(want_enc) << ")");
      }
      CHECK(bad == 0);
    };
    auto ref = fresh();
    interp::interpret(*k, grid, args(ref));
    check(ref, "interpreter");
    for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
      auto got = fresh();
      backends::make_emulate_launcher(lowering)->launch(k, 4, grid, args(got));
      check(got, lowering == backends::EmuLowering::emu ? "emu lowering (IR conversion)"
                                                         : "nvptx lowering (cvt, emulated)");
    }
  }
}

TEST_CASE("fp8 casts take cvt on sm_89+ and the IR conversion before, ptxas accepts both", "[fp8][codegen][ptxas]") {
  for (DType t : {DType::f8e4m3, DType::f8e5m2}) {
    ir::Kernel k = convert_kernel(t);
    std::string name(ir::dtype_name(t)), fmt_name = name.substr(2); // "e4m3"
    for (auto& [arch, c] : codegen::test::compile_all_archs(*k)) {
      INFO(arch << "\n" << c.ptx);
      int decode = codegen::test::count_matches(c.ptx, R"(cvt\.rn\.f16x2\.)" + fmt_name + "x2");
      int encode = codegen::test::count_matches(c.ptx, R"(cvt\.rn\.satfinite\.)" + fmt_name + R"(x2\.f32)");
      if (arch == "sm_90") {
        CHECK(decode > 0);
        CHECK(encode > 0);
      } else {
        CHECK(decode == 0);
        CHECK(encode == 0);
      }
    }
  }
}

TEST_CASE("paged attention's fp8 K/V tiles widen two elements per cvt, straight from the loaded registers",
          "[fp8][codegen][paged_attention]") {
  templates::PagedAttentionShape s;
  s.hq = 32, s.hkv = 8, s.head_dim = 128, s.dtype = DType::f16, s.kv_fp8 = DType::f8e4m3;
  templates::PagedAttentionConfig cfg;
  cfg.block_n = 64, cfg.head_group = 4, cfg.num_warps = 4;
  ir::Kernel k = templates::paged_attention_fused_kernel(s, cfg);
  codegen::CompileOptions o;
  o.arch = "sm_90";
  o.num_warps = 4;
  codegen::CompiledKernel c = codegen::compile(*k, o);
  INFO(c.ptx);
  // K and V tiles of [64, 128] bytes over 128 threads: 128 bytes per thread, 64 pairs, in
  // each of the two K/V loops (whole steps, then the masked last one).
  CHECK(codegen::test::count_matches(c.ptx, R"(cvt\.rn\.f16x2\.e4m3x2)") == 2 * 64);
  CHECK(codegen::test::count_matches(c.ptx, R"(bfe\.u32\s+%r\d+, %r\d+, \d+, 8;)") == 0); // no byte-by-byte unpacking
  o.arch = "sm_80"; // no cvt for fp8 before sm_89
  CHECK(codegen::test::count_matches(codegen::compile(*k, o).ptx, R"(e4m3x2)") == 0);
}
