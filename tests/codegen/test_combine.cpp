// reduce and associative_scan with a user-written combine function: the DSL traces it into
// the op's region, every backend runs it per pair of elements (the interpreter by running
// the region, the lowerings by emitting it inline in the shuffle / shared-memory steps), and
// the text form round-trips. Checked against plain C++ on the interpreter and both lowerings
// on the emulator, with 1, 4 and 8 warps, and through ptxas.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <random>

#include "backends/launchers.h"
#include "dsl/dsl.h"
#include "interp/interpreter.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "tests/codegen/codegen_test_util.h"

using namespace tilec;
using namespace tilec::dsl;
using ir::DType;

namespace {

constexpr int64_t R = 8, C = 64;

// An affine map x -> m*x + c (mod 2^16) packed as (m << 16) | c; combine(a, b) applies a,
// then b. Associative, not commutative: a scan with it checks the order of every step.
Tile compose(const Tile& a, const Tile& b) {
  auto ma = lshr(a, 16), ca = a & 0xffff, mb = lshr(b, 16), cb = b & 0xffff;
  return (((ma * mb) & 0xffff) << 16) | ((ca * mb + cb) & 0xffff);
}
uint32_t compose_ref(uint32_t a, uint32_t b) {
  uint32_t ma = a >> 16, ca = a & 0xffff, mb = b >> 16, cb = b & 0xffff;
  return (((ma * mb) & 0xffff) << 16) | ((ca * mb + cb) & 0xffff);
}

// The element of larger magnitude, the larger one on ties: a total order, so associative
// and commutative.
Tile absmax(const Tile& a, const Tile& b) { return where(abs(a) > abs(b) | (abs(a) == abs(b) & (a > b)), a, b); }
double absmax_ref(double a, double b) { return std::abs(a) > std::abs(b) || (std::abs(a) == std::abs(b) && a > b) ? a : b; }

ir::Kernel combine_kernel() {
  KernelBuilder kb("combines");
  auto xi = kb.arg<Ptr<i32>>("xi"), xf = kb.arg<Ptr<f32>>("xf"), xh = kb.arg(ptr_to(DType::bf16), "xh");
  auto oi = kb.arg<Ptr<i32>>("oi"), of = kb.arg<Ptr<f32>>("of"), oh = kb.arg(ptr_to(DType::bf16), "oh");
  auto r = arange(0, R), c = arange(0, C);
  auto at = r.col() * C + c.row();
  auto vi = load(xi + at), vf = load(xf + at), vh = load(xh + at);
  store(oi + at, associative_scan(vi, 1, compose));
  store(oi + R * C + at, associative_scan(vi, 0, compose));
  store(oi + 2 * R * C + r, reduce(vi, 1, absmax));
  store(oi + 2 * R * C + R + c, reduce(vi, 0, absmax));
  // Sums of halves are exact in f32 in any order.
  store(of + at, associative_scan(vf, 1, [](const Tile& a, const Tile& b) { return a + b; }));
  store(of + R * C + c, reduce(vf, 0, absmax));
  // bf16: the function runs in bf16 (a * b + 1 rounds at each step).
  store(oh + r, reduce(vh, 1, absmax));
  store(oh + R + at, associative_scan(vh, 1, [](const Tile& a, const Tile& b) { return where(a > b, a, b); }));
  return kb.finish();
}

} // namespace

TEST_CASE("reduce and associative_scan with a user's combine function match C++ on every CPU backend",
          "[codegen][ops][scan][combine]") {
  ir::Kernel k = combine_kernel();
  launch::Buffer bi("xi", DType::i32, R * C), bf("xf", DType::f32, R * C), bh("xh", DType::bf16, R * C);
  std::mt19937 rng(5);
  for (int64_t j = 0; j < R * C; ++j) {
    // m odd (so products do not collapse to 0), c anything: packed affine maps.
    bi.set_int(size_t(j), int64_t(int32_t(((rng() | 1u) & 0xffffu) << 16 | (rng() & 0xffffu))));
    bf.set(size_t(j), double(int64_t(rng() % 17) - 8) * 0.5);
    bh.set(size_t(j), double(int64_t(rng() % 201) - 100) / 8);
  }
  auto xi = [&](int64_t rr, int64_t cc) { return uint32_t(int32_t(bi.get_int(size_t(rr * C + cc)))); };
  for (int backend : {0, 1, 2})
    for (int warps : {1, 4, 8}) {
      if (backend == 0 && warps != 4) continue;
      INFO("backend " << backend << " (interpreter, emu lowering, nvptx lowering), warps " << warps);
      launch::Buffer oib("oi", DType::i32, 2 * R * C + R + C), ofb("of", DType::f32, R * C + C),
          ohb("oh", DType::bf16, R + R * C);
      std::vector<launch::Arg> a = {launch::Arg::of(bi),  launch::Arg::of(bf),  launch::Arg::of(bh),
                                    launch::Arg::of(oib), launch::Arg::of(ofb), launch::Arg::of(ohb)};
      if (backend == 0) interp::interpret(*k, {1, 1, 1}, a);
      else
        backends::make_emulate_launcher(backend == 1 ? backends::EmuLowering::emu : backends::EmuLowering::nvptx)
            ->launch(k, warps, {1, 1, 1}, a);
      int bad = 0;
      auto expect = [&](bool ok, const std::string& what) {
        if (!ok && ++bad <= 8) FAIL_CHECK(what);
      };
      for (int64_t rr = 0; rr < R; ++rr)
        for (int64_t cc = 0; cc < C; ++cc) {
          uint32_t along_row = xi(rr, 0), along_col = xi(0, cc);
          for (int64_t t = 1; t <= cc; ++t) along_row = compose_ref(along_row, xi(rr, t));
          for (int64_t t = 1; t <= rr; ++t) along_col = compose_ref(along_col, xi(t, cc));
          expect(uint32_t(oib.get_int(size_t(rr * C + cc))) == along_row, fmt::format("scan axis 1 at {},{}", rr, cc));
          expect(uint32_t(oib.get_int(size_t(R * C + rr * C + cc))) == along_col,
                 fmt::format("scan axis 0 at {},{}", rr, cc));
        }
      for (int64_t rr = 0; rr < R; ++rr) {
        double m = double(int32_t(xi(rr, 0))), s = 0, mh = bh.get(size_t(rr * C)), run = -INFINITY;
        for (int64_t cc = 0; cc < C; ++cc) {
          m = absmax_ref(m, double(int32_t(xi(rr, cc))));
          mh = absmax_ref(mh, bh.get(size_t(rr * C + cc)));
          s += bf.get(size_t(rr * C + cc));
          run = std::max(run, bh.get(size_t(rr * C + cc)));
          expect(ofb.get(size_t(rr * C + cc)) == s, fmt::format("f32 sum scan at {},{}", rr, cc));
          expect(ohb.get(size_t(R + rr * C + cc)) == run, fmt::format("bf16 max scan at {},{}", rr, cc));
        }
        expect(double(oib.get_int(size_t(2 * R * C + rr))) == m, fmt::format("i32 absmax row {}", rr));
        expect(ohb.get(size_t(rr)) == mh, fmt::format("bf16 absmax row {}", rr));
      }
      for (int64_t cc = 0; cc < C; ++cc) {
        double m = double(int32_t(xi(0, cc))), mf = bf.get(size_t(cc));
        for (int64_t rr = 0; rr < R; ++rr) {
          m = absmax_ref(m, double(int32_t(xi(rr, cc))));
          mf = absmax_ref(mf, bf.get(size_t(rr * C + cc)));
        }
        expect(double(oib.get_int(size_t(2 * R * C + R + cc))) == m, fmt::format("i32 absmax column {}", cc));
        expect(ofb.get(size_t(R * C + cc)) == mf, fmt::format("f32 absmax column {}", cc));
      }
      CHECK(bad == 0);
    }
}

TEST_CASE("a combine function prints, parses back and compiles for the GPU", "[codegen][ops][combine][ptxas]") {
  ir::Kernel k = combine_kernel();
  std::string text = ir::print(*k);
  CHECK(text.find("scan combine") != std::string::npos);
  CHECK(text.find("reduce combine") != std::string::npos);
  ir::Kernel back = ir::parse(text);
  ir::verify(*back);
  CHECK(ir::print(*back) == text);
  for (auto& [arch, c] : codegen::test::compile_all_archs(*k)) {
    INFO(arch);
    CHECK(codegen::test::count_matches(c.ptx, R"(shfl\.sync\.bfly)") > 0); // the reductions cross lanes
  }
}

TEST_CASE("combine functions: errors name what is wrong", "[dsl][combine]") {
  auto build = [](const std::function<void(const Tile&, const Tile&)>& body) {
    KernelBuilder kb("bad_combine");
    auto x = kb.arg<Ptr<i32>>("x");
    auto v = load(x + arange(0, 16));
    body(v, x);
    return kb.finish();
  };
  CHECK_THROWS_WITH(build([](const Tile& v, const Tile& x) {
                      store(x, reduce(v, 0, [](const Tile& a, const Tile& b) { return (a + b).to(f32); }));
                    }),
                    Catch::Contains("the combine function returns f32; it must return i32"));
  CHECK_THROWS_WITH(build([](const Tile& v, const Tile& x) {
                      Tile outside = v;
                      store(x, reduce(v, 0, [&](const Tile& a, const Tile& b) {
                              outside = a;
                              return a + b;
                            }));
                    }),
                    Catch::Contains("assigns to a tile from outside it"));
  CHECK_THROWS_WITH(build([](const Tile& v, const Tile& x) {
                      store(x, reduce(v, 0, [&](const Tile& a, const Tile&) { return a + load(x); }));
                    }),
                    Catch::Contains("combine region holds load"));
  CHECK_THROWS_WITH(build([](const Tile& v, const Tile& x) {
                      store(x + arange(0, 16), associative_scan(v, 0, [&](const Tile& a, const Tile&) { return a + v; }));
                    }),
                    Catch::Contains("uses a tile<16xi32> from outside it"));
  CHECK_THROWS_WITH(build([](const Tile& v, const Tile& x) {
                      store(x, reduce(v, 1, [](const Tile& a, const Tile& b) { return a + b; }));
                    }),
                    Catch::Contains("axis 1 out of range"));
  // The text form is checked as strictly.
  const char* bad_yield = R"(kernel @k(%x: ptr<i32>) {
  %0 = arange 0 : tile<16xi32>
  %1 = reduce combine %0 axis 0 (%a, %b) : i32 {
    %2 = cast %a : f32
    yield %2
  }
  return
}
)";
  CHECK_THROWS_WITH(ir::parse(bad_yield), Catch::Contains("combine region yields"));
  const char* region_on_sum = R"(kernel @k(%x: ptr<i32>) {
  %0 = arange 0 : tile<16xi32>
  %1 = reduce sum %0 axis 0 (%a, %b) : i32 {
    yield %a
  }
  return
}
)";
  CHECK_THROWS(ir::parse(region_on_sum));
}
