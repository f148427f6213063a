// Where a warpgroup MMA's group is waited for (codegen/lower.cpp, retire_wgmma): at its
// result's first read, with wgmma.wait_group N for the N groups committed after it, so the
// code in between (another product's issue, a softmax) overlaps the MMAs; a result whose
// operands sit in scratch is waited for at once; every group of a block is retired before its
// terminator. Read from the PTX, and run bit for bit against the interpreter on the emulator
// in both lowerings (whose sanitizer names a register read before its wait).
#include <catch2/catch.hpp>

#include <string>

#include "codegen/compile.h"
#include "codegen/ptx_loops.h"
#include "dsl/dsl.h"
#include "interp/launcher.h"
#include "launch/launcher.h"
#include "tests/codegen/codegen_test_util.h"
#include "tests/codegen/emu_harness.h"

using namespace tilec;
using ir::DType;

namespace {

// Each trip of a pipelined walk over K takes two products, x = A_k B_k and acc2 += D_k C_k
// (every operand copied ahead by the pipeline), and reads x only after the second is issued:
// x's group waits with wait_group 1 (acc2's still running), acc2's at the trip's end.
ir::Kernel two_products(int64_t m, int64_t n, int64_t kstep) {
  using namespace dsl;
  KernelBuilder kb("two_products");
  auto a = kb.arg<Ptr<bf16>>("a"), b = kb.arg<Ptr<bf16>>("b"), c = kb.arg<Ptr<bf16>>("c");
  auto d = kb.arg<Ptr<bf16>>("d");
  auto out = kb.arg<Ptr<f32>>("out"), out2 = kb.arg<Ptr<f32>>("out2");
  Tile kk = multiple_of(kb.arg<i32>("k"), 16);
  auto rm = arange(0, m), rn = arange(0, n), rk = arange(0, kstep);
  Var acc = zeros({m, n}), acc2 = zeros({m, n});
  for_range(0, kk, kstep, RangeOptions{2}, [&](Scalar k0) {
    Tile ta = load(a + rm.col() * kk + (k0 + rk).row());       // [m, kstep], k-major
    Tile tb = load(b + rn.row() * kk + (k0 + rk).col());       // [kstep, n] read from [n, K]
    Tile tc = load(c + rn.row() * kk + (k0 + rk).col());
    Tile td = load(d + rm.col() * kk + (k0 + rk).row());
    Tile x = dot(ta, tb);
    acc2 = dot(td, tc, acc2);
    acc = acc + x * 0.5f;
  });
  store(out + rm.col() * n + rn.row(), acc);
  store(out2 + rm.col() * n + rn.row(), acc2);
  return kb.finish();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

} // namespace

TEST_CASE("wgmma waits: a result is waited for at its first read, with wait_group N for the groups issued after it",
          "[codegen][wgmma]") {
  ir::Kernel k = two_products(64, 64, 32);
  codegen::CompileOptions o;
  o.arch = "sm_90";
  o.num_warps = 4;
  codegen::CompiledKernel ck = codegen::compile(*k, o);
  REQUIRE(ck.stats.wgmma_dots == 2);
  const std::vector<codegen::PtxLoop> loops = codegen::ptx_loops(ck.ptx);
  const codegen::PtxLoop* l = codegen::main_loop(loops);
  REQUIRE(l);
  // Two groups a trip; x's read waits for all but acc2's (1), the trip's end for that one (0).
  CHECK(l->count("wgmma.commit_group") == 2);
  CHECK(l->count("wgmma.wait_group") == 2);
  // In program order: both groups committed before the first wait.
  const size_t second_commit = ck.ptx.find("wgmma.commit_group", ck.ptx.find("wgmma.commit_group") + 1);
  CHECK(second_commit < ck.ptx.find("wgmma.wait_group.sync.aligned 1"));
  CHECK(count(ck.ptx, "wgmma.wait_group.sync.aligned 1;") == 1);
  CHECK(count(ck.ptx, "wgmma.wait_group.sync.aligned 0;") == 1);
  if (codegen::test::have_ptxas()) {
    REQUIRE(ck.ptxas);
    CHECK(ck.ptxas->spill_stores + ck.ptxas->spill_loads == 0);
  }
}

TEST_CASE("wgmma waits: two products in flight agree with the interpreter bit for bit on both lowerings",
          "[codegen][wgmma][emulator]") {
  const int64_t m = 64, n = 64, kstep = 32, K = 160; // 5 trips over 2 stages: the ring wraps
  ir::Kernel k = two_products(m, n, kstep);
  launch::Buffer a("a", DType::bf16, size_t(m * K)), b("b", DType::bf16, size_t(n * K)), c("c", DType::bf16, size_t(n * K));
  launch::Buffer d("d", DType::bf16, size_t(m * K));
  codegen::test::fill_random(a, 1, -1, 1);
  codegen::test::fill_random(d, 4, -1, 1);
  codegen::test::fill_random(b, 2, -1, 1);
  codegen::test::fill_random(c, 3, -1, 1);
  for (int which = 0; which < 2; ++which) {
    INFO((which ? "out2 (the product in flight over x's read)" : "out (x, read after the second issue)"));
    codegen::test::require_bitwise_on_both_lowerings([&](launch::Launcher& l) {
      launch::Buffer out("out", DType::f32, size_t(m * n)), out2("out2", DType::f32, size_t(m * n));
      l.launch(k, 4, {1, 1, 1},
               {launch::Arg::of(a), launch::Arg::of(b), launch::Arg::of(c), launch::Arg::of(d), launch::Arg::of(out),
                launch::Arg::of(out2),
                launch::Arg::of_int(K)});
      return which ? out2 : out;
    });
  }
}
