// dot on Hopper's warpgroup MMA (wgmma.mma_async, sm_90a): which dots take it, the layout its
// accumulator gets, bit-for-bit agreement with the interpreter on the emulator in both
// lowerings over every swizzle the staging picks (K of 16, 32, 64 and 128 elements), N from 8
// to 256, one and two warpgroups along M and two and four along N, with and without an
// accumulator; the PTX it emits and ptxas's sm_90a verdict on it; `--no-wgmma`
// (CompileOptions::wgmma) falling back to mma.sync.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "backends/launchers.h"
#include "codegen/compile.h"
#include "codegen/layout.h"
#include "codegen/layout_plan.h"
#include "codegen/pipeline_plan.h"
#include "interp/launcher.h"
#include "launch/launcher.h"
#include "tests/codegen/codegen_test_util.h"
#include "tests/codegen/dot_kernel.h"
#include "tests/codegen/emu_harness.h"

using namespace tilec;
using ir::DType;

namespace {

struct Case {
  int64_t m, n, k;
  DType dt;
  bool with_acc;
  int warps;
  bool trans_a = false, b_kn = false;
};

// A [M, K] row-major (or from [K, M]: M-major), B read from [N, K] (k-major, as a weight
// matrix is stored) or [K, N] (N-major).
ir::Kernel wgmma_dot(const Case& c) {
  return codegen::test::dot_kernel("wgmma_dot", c.m, c.n, c.k, c.dt, c.trans_a, !c.b_kn, c.with_acc);
}

bool on_wgmma(const ir::Function& fn, int warps, bool wgmma = true) {
  codegen::AxisAnalysis axis(fn);
  codegen::LayoutPlan plan(fn, axis, warps, true, wgmma);
  return plan.has_wgmma();
}

// Whether the one dot's operands are staged k-major: {A, B}.
std::pair<bool, bool> kmajor(const ir::Function& fn, int warps) {
  codegen::AxisAnalysis axis(fn);
  codegen::LayoutPlan plan(fn, axis, warps, true, true);
  std::pair<bool, bool> r{false, false};
  ir::walk(const_cast<ir::Block&>(fn.body), [&](ir::Op& op) {
    if (op.kind == ir::OpKind::Dot) r = {plan.wgmma_kmajor(&op, 0), plan.wgmma_kmajor(&op, 1)};
  });
  return r;
}

} // namespace

TEST_CASE("wgmma: the accumulator layout gives warp w rows 16w + g and 16w + g + 8", "[codegen][wgmma]") {
  for (int warps : {4, 8}) {
    const int64_t m = 16 * warps * 2, n = 16;
    codegen::ThreadElems te = codegen::thread_elems(codegen::wgmma_layout(m, n, warps), {m, n});
    REQUIRE(te.count == 2 * 2 * (n / 8) * 2); // 2 passes x rows g, g + 8 x 2 column tiles x 2 columns
    std::set<std::pair<int64_t, int64_t>> offs;
    for (const auto& o : te.offset) offs.insert({o[0], o[1]});
    for (int64_t pass = 0; pass < 2; ++pass)
      for (int64_t h : {0, 8})
        for (int64_t col : {0, 1, 8, 9}) CHECK(offs.count({pass * 16 * warps + h, col}) == 1);
  }
  CHECK(codegen::wgmma_fits(64, 256, 64, 4));
  CHECK(codegen::wgmma_fits(128, 8, 16, 8));
  CHECK_FALSE(codegen::wgmma_fits(32, 64, 64, 4));  // M below a warpgroup's 64 rows per 4 warps
  CHECK_FALSE(codegen::wgmma_fits(64, 264, 64, 4)); // N past 256
  CHECK_FALSE(codegen::wgmma_fits(64, 64, 64, 2));  // not whole warpgroups
  CHECK(codegen::wgmma_operand_fits(true, 64, 64, 2));
  CHECK_FALSE(codegen::wgmma_operand_fits(true, 64, 48, 2)); // 96-byte rows: no swizzle takes them
  CHECK(codegen::wgmma_operand_fits(false, 16, 48, 2));      // N-major: 32-byte rows of N
  CHECK_FALSE(codegen::wgmma_operand_fits(false, 8, 64, 2)); // 16-byte rows
  CHECK_FALSE(codegen::wgmma_operand_fits(false, 64, 64, 1)); // 8-bit types are K-major only
}

TEST_CASE("wgmma: with warpgroups along N, warp 4q + r holds rows 16r + g and 16r + g + 8 of q's columns",
          "[codegen][wgmma]") {
  // FlashMLA's tile: 64 rows on 8 warps, 2 warpgroups of N / 2 columns each; and 128 rows on 16
  // warps, 4 warpgroups of N / 4 columns, 2 passes of 64 rows each.
  for (auto [m, n, warps] : {std::tuple{64, 128, 8}, {64, 512, 8}, {128, 256, 16}, {64, 64, 8}}) {
    INFO("M " << m << " N " << n << " warps " << warps);
    REQUIRE(codegen::wgmma_fits(m, n, 16, warps));
    const int g = codegen::wgmma_groups_along_n(m, n, warps);
    REQUIRE(g == warps / 4);
    const codegen::Layout l = codegen::wgmma_layout(m, n, warps);
    const codegen::ThreadElems te = codegen::thread_elems(l, {m, n});
    REQUIRE(te.count == m * n / (32 * warps));
    // Each thread's elements from its first, as the lowering computes it (lower.cpp, thread_base).
    std::map<std::pair<int64_t, int64_t>, int> owners;
    for (int w = 0; w < warps; ++w)
      for (int lane = 0; lane < 32; ++lane) {
        std::vector<int64_t> base(2);
        for (int d = 0; d < 2; ++d) {
          const int lc = (lane >> codegen::lane_shift(l.base, d)) & (l.base.threads_per_warp[size_t(d)] - 1);
          const int wc = (w >> codegen::warp_shift(l.base, d)) & (l.base.warps_per_block[size_t(d)] - 1);
          base[size_t(d)] = int64_t(wc) * l.base.warp_span(d) + int64_t(lc) * l.base.size_per_thread[size_t(d)];
        }
        const int q = w / 4, r = w % 4, gr = lane / 4, t = lane % 4;
        std::set<std::pair<int64_t, int64_t>> want;
        for (int64_t p = 0; p < m / 64; ++p)
          for (int64_t h : {0, 8})
            for (int64_t j = 0; j < n / g / 8; ++j)
              for (int64_t e : {0, 1}) want.insert({64 * p + 16 * r + gr + h, q * n / g + 8 * j + 2 * t + e});
        std::set<std::pair<int64_t, int64_t>> got;
        for (const auto& o : te.offset) got.insert({base[0] + o[0], base[1] + o[1]});
        CHECK(got == want);
        for (const auto& x : got) ++owners[x];
      }
    CHECK(int64_t(owners.size()) == m * n); // every element, once
    CHECK(std::all_of(owners.begin(), owners.end(), [](const auto& x) { return x.second == 1; }));
    // A row statistic (the softmax's max over N) keeps the row split: its slice is replicated
    // along the columns, lanes and warpgroups.
    const codegen::Layout rows = codegen::slice_layout(l, 1);
    CHECK(codegen::thread_elems(rows, {m}).count == 2 * (m / 64));
  }
  CHECK(codegen::wgmma_fits(64, 512, 64, 8));
  CHECK(codegen::wgmma_fits(192, 128, 16, 8)); // 3 passes of 64 rows per warpgroup
  CHECK_FALSE(codegen::wgmma_fits(64, 520, 64, 8)); // N / 2 not a multiple of 8
  CHECK_FALSE(codegen::wgmma_fits(64, 1024, 64, 8)); // 512 columns a warpgroup
  CHECK_FALSE(codegen::wgmma_fits(64, 64, 64, 12)); // 3 warpgroups: the warp bits do not split
  CHECK_FALSE(codegen::wgmma_fits(32, 64, 64, 8));
  CHECK(codegen::wgmma_groups_along_n(128, 64, 8) == 1); // warpgroups along M where they fit
  // An N-major B's warpgroups read whole 128-byte panels of it; a k-major B's whole 8-row groups.
  CHECK(codegen::wgmma_b_slices_fit(64, 128, false, 2, 8));
  CHECK_FALSE(codegen::wgmma_b_slices_fit(64, 64, false, 2, 8));
  CHECK(codegen::wgmma_b_slices_fit(64, 64, true, 2, 8));
}

TEST_CASE("wgmma: which dots take it (sm_90, both operands read along K)", "[codegen][wgmma]") {
  CHECK(on_wgmma(*wgmma_dot({128, 128, 64, DType::bf16, false, 4}), 4));
  CHECK_FALSE(on_wgmma(*wgmma_dot({128, 128, 64, DType::bf16, false, 4}), 4, false));
  // B read along N (a [K, N] row-major array): N-major; A read along M: M-major.
  ir::Kernel kn = codegen::test::dot_kernel("kn", 64, 64, 64, DType::f16, false, false, false);
  CHECK(on_wgmma(*kn, 4));
  CHECK(kmajor(*kn, 4) == std::pair<bool, bool>{true, false});
  ir::Kernel mk = codegen::test::dot_kernel("mk", 64, 64, 64, DType::f16, true, true, false);
  CHECK(on_wgmma(*mk, 4));
  CHECK(kmajor(*mk, 4) == std::pair<bool, bool>{false, true});
  // N-major B of 8 columns: 16-byte rows, which no swizzle takes.
  CHECK_FALSE(on_wgmma(*codegen::test::dot_kernel("kn8", 64, 8, 64, DType::f16, false, false, false), 4));
  CHECK_FALSE(on_wgmma(*wgmma_dot({16, 64, 64, DType::f16, false, 4}), 4)); // decode's few rows: mma.sync
  // 64 rows on 8 warps: warpgroups along N, each with whole panels of an N-major B (64 bf16
  // columns a warpgroup), not half of one.
  CHECK(on_wgmma(*wgmma_dot({64, 512, 64, DType::bf16, false, 8, false, true}), 8));
  CHECK(on_wgmma(*wgmma_dot({64, 64, 64, DType::bf16, false, 8}), 8));
  CHECK_FALSE(on_wgmma(*wgmma_dot({64, 64, 64, DType::bf16, false, 8, false, true}), 8));
  // An 8-column product (decode's rows as N) stays on mma.sync, but for fp8, which only wgmma takes.
  CHECK_FALSE(on_wgmma(*wgmma_dot({64, 8, 16, DType::f16, false, 4}), 4));
  CHECK(on_wgmma(*wgmma_dot({64, 8, 32, DType::f8e4m3, false, 4}), 4));
  CHECK_FALSE(on_wgmma(*wgmma_dot({64, 64, 64, DType::f32, false, 4}), 4)); // f32: CUDA cores
  CHECK(on_wgmma(*wgmma_dot({64, 64, 64, DType::f8e4m3, false, 4}), 4));      // fp8: K-major, K a multiple of 32
  CHECK_FALSE(on_wgmma(*wgmma_dot({64, 64, 16, DType::f8e4m3, false, 4}), 4));
  CHECK_FALSE(on_wgmma(*wgmma_dot({64, 64, 64, DType::f8e5m2, false, 4, false, true}), 4)); // N-major fp8: CUDA cores
  codegen::CompileOptions o;
  CHECK(codegen::wgmma_enabled(o));
  o.arch = "sm_80";
  CHECK_FALSE(codegen::wgmma_enabled(o));
}

TEST_CASE("wgmma: the emulator agrees with the interpreter bit for bit (every swizzle, N, warpgroups, both lowerings)",
          "[codegen][wgmma][emulator]") {
  std::mt19937 rng(7);
  const std::vector<Case> cases = {
      {64, 8, 32, DType::f8e4m3, false, 4},  {64, 64, 32, DType::bf16, true, 4},  {128, 128, 64, DType::bf16, false, 4},
      {64, 256, 16, DType::f16, true, 4},    {128, 32, 128, DType::bf16, true, 8}, {256, 16, 64, DType::f16, false, 8},
      {64, 16, 128, DType::bf16, false, 4},
      // M-major A, N-major B: 32-, 64- and 128-byte rows of N, and two panels of them.
      {64, 16, 32, DType::f16, true, 4, false, true},  {64, 32, 16, DType::bf16, false, 4, true, true},
      {128, 64, 64, DType::bf16, true, 4, true, false}, {128, 256, 32, DType::f16, false, 8, false, true},
      {64, 128, 128, DType::bf16, true, 4, true, true},
      // 8-bit floats: m64nNk32, both operands K-major, 32-, 64- and 128-byte rows.
      {64, 64, 64, DType::f8e4m3, true, 4},  {128, 32, 128, DType::f8e5m2, false, 4},
      {64, 16, 32, DType::f8e4m3, false, 4}, {128, 64, 256, DType::f8e5m2, true, 8},
      // Warpgroups along N (64 rows on 8 warps, 128 on 16): k-major and N-major B, M-major A.
      {64, 128, 64, DType::bf16, true, 8},  {64, 128, 32, DType::f16, false, 8, false, true},
      {64, 512, 32, DType::bf16, false, 8}, {64, 512, 64, DType::bf16, true, 8, false, true},
      {64, 128, 64, DType::f16, true, 8, true, false}, {128, 256, 32, DType::bf16, true, 16, false, true},
      {64, 64, 64, DType::f8e4m3, false, 8},
  };
  for (const Case& c : cases) {
    INFO("M " << c.m << " N " << c.n << " K " << c.k << " " << ir::dtype_name(c.dt) << " acc " << c.with_acc
              << " warps " << c.warps << " A M-major " << c.trans_a << " B N-major " << c.b_kn);
    ir::Kernel k = wgmma_dot(c);
    REQUIRE(on_wgmma(*k, c.warps));
    launch::Buffer a("a", c.dt, size_t(c.m * c.k)), b("b", c.dt, size_t(c.k * c.n));
    launch::Buffer acc("c", DType::f32, size_t(c.m * c.n));
    std::uniform_real_distribution<double> d(-1, 1);
    for (launch::Buffer* x : {&a, &b, &acc})
      for (size_t i = 0; i < x->count(); ++i) x->set(i, d(rng));
    codegen::test::require_bitwise_on_both_lowerings([&](launch::Launcher& l) {
      launch::Buffer out("out", DType::f32, size_t(c.m * c.n));
      l.launch(k, c.warps, {1, 1, 1}, {launch::Arg::of(a), launch::Arg::of(b), launch::Arg::of(acc), launch::Arg::of(out)});
      return out;
    });
  }
}

TEST_CASE("wgmma: the PTX for sm_90 is sm_90a's, with descriptors, fences and one wait, and ptxas takes it",
          "[codegen][wgmma][nvptx]") {
  const Case c{128, 128, 64, DType::bf16, true, 4};
  ir::Kernel k = wgmma_dot(c);
  codegen::CompileOptions o;
  o.arch = "sm_90";
  codegen::CompiledKernel ck = codegen::compile(*k, o);
  INFO(ck.ptx);
  CHECK(ck.stats.wgmma_dots == 1);
  CHECK(ck.ptx.find(".target sm_90a") != std::string::npos);
  // Two 64-row passes x four k steps of 16, all of them in one group.
  CHECK(codegen::test::count(ck.ptx, "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16") == 8);
  CHECK(codegen::test::count(ck.ptx, "wgmma.fence.sync.aligned") == 1);
  CHECK(codegen::test::count(ck.ptx, "wgmma.commit_group.sync.aligned") == 1);
  CHECK(codegen::test::count(ck.ptx, "wgmma.wait_group.sync.aligned 0") == 1);
  CHECK(codegen::test::count(ck.ptx, "fence.proxy.async.shared::cta") >= 1);
  CHECK(codegen::test::count(ck.ptx, "mma.sync") == 0);
  CHECK(codegen::test::count(ck.ptx, "ldmatrix") == 0);
  CHECK(ck.ptx.find(".align 1024") != std::string::npos);
  if (codegen::test::have_ptxas()) {
    REQUIRE(ck.ptxas.has_value());
    INFO(ck.ptxas->log);
    CHECK(!ck.cubin.empty());
    CHECK(ck.ptxas->spill_stores == 0);
  }
  codegen::CompileOptions off = o;
  off.wgmma = false;
  codegen::CompiledKernel mma = codegen::compile(*k, off);
  CHECK(mma.stats.wgmma_dots == 0);
  CHECK(mma.ptx.find("wgmma.") == std::string::npos);
  CHECK(mma.ptx.find(".target sm_90a") == std::string::npos);
  CHECK(codegen::test::count(mma.ptx, "mma.sync") > 0);
  codegen::CompileOptions ampere = o;
  ampere.arch = "sm_80";
  CHECK(codegen::compile(*k, ampere).ptx.find("wgmma.") == std::string::npos);

  // fp8: k steps of 32 elements (two of them over K = 64), no transpose immediates.
  codegen::CompiledKernel f8 = codegen::compile(*wgmma_dot({64, 64, 64, DType::f8e4m3, false, 4}), o);
  INFO(f8.ptx);
  CHECK(codegen::test::count(f8.ptx, "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3") == 2);
  // scale-d an immediate: 0 for the first k step of a +0 accumulator, then 1.
  CHECK(codegen::test::count(f8.ptx, ", 0, 1, 1;") == 1);
  CHECK(codegen::test::count(f8.ptx, ", 1, 1, 1;") == 1);
  if (codegen::test::have_ptxas()) {
    REQUIRE(f8.ptxas.has_value());
    INFO(f8.ptxas->log);
    CHECK(!f8.cubin.empty());
  }
}

TEST_CASE("wgmma: staged operands are swizzled as the descriptors say", "[codegen][wgmma]") {
  // staged_offset against the swizzles' usual statement: 16-byte chunk c of row r of a
  // panel of s-byte rows lands at chunk c ^ ((r / (128 / s)) % (s / 16)).
  for (int s : {32, 64, 128}) {
    codegen::MmaStaging st;
    st.kmajor = true, st.rows = 64, st.swizzle = s, st.row_bytes = s, st.panels = 2;
    for (int64_t panel = 0; panel < 2; ++panel)
      for (int64_t r = 0; r < 64; ++r)
        for (int64_t c = 0; c < s / 16; ++c) {
          const int64_t want = panel * 64 * s + r * s + 16 * (c ^ ((r / (128 / s)) % (s / 16)));
          INFO("swizzle " << s << " panel " << panel << " row " << r << " chunk " << c);
          CHECK(codegen::staged_offset(st, r, panel * s + 16 * c) == want);
        }
  }
}

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include "codegen/target.h"

TEST_CASE("wgmma: reading an accumulator before its wait is reported when the nvptx lowering is retargeted",
          "[codegen][wgmma][nvptx]") {
  // A kernel that stores a wgmma's first result register (for waited = false: before the wait).
  auto build = [](llvm::LLVMContext& c, bool waited) {
    auto m = std::make_unique<llvm::Module>("k", c);
    auto hooks = codegen::make_nvptx_hooks(90);
    llvm::Function* f = hooks->create_kernel(*m, "k", {llvm::PointerType::get(c, 1)}, 128, 0);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(c, "entry", f));
    std::vector<llvm::Value*> params = hooks->kernel_params(b);
    std::vector<llvm::Value*> acc(4, llvm::ConstantFP::get(b.getFloatTy(), 0.0));
    hooks->wgmma_fence(b);
    std::vector<llvm::Value*> d = hooks->wgmma(b, ir::DType::f16, 8, b.getInt64(0), {}, b.getInt64(0), acc, false, false, false, "site");
    hooks->wgmma_commit(b);
    if (waited) {
      hooks->wgmma_wait(b, 0);
      d = hooks->fence_operands(b, d);
    } else {
      hooks->wgmma_wait(b, 0);
    }
    hooks->store(b, params[0], d[0], 4, nullptr);
    b.CreateRetVoid();
    hooks->finish_kernel(*m, f, 128, 0, 0, 0);
    return m;
  };
  llvm::LLVMContext c;
  auto good = build(c, true);
  CHECK_NOTHROW(codegen::retarget_nvptx_for_emulator(*good));
  auto bad = build(c, false);
  try {
    codegen::retarget_nvptx_for_emulator(*bad);
    FAIL("an accumulator read before its wait went unreported");
  } catch (const InternalError& e) {
    CHECK_THAT(e.what(), Catch::Contains("a wgmma accumulator register (site) is read before the wgmma.wait_group"));
  }
}
