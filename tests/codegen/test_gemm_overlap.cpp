// The sm_90 GEMM's overlap (issue 46 item 3): the matmul template's K loop keeps one wgmma
// group in flight (wgmma.wait_group 1 retires the previous step's, the accumulator's registers
// untouched between the MMAs and the wait, a wait_group 0 after the loop), its copies refill
// the stage the retired group read, and its C tile leaves through shared memory by a TMA store
// staged in the dead pipeline buffers. Read statically from the PTX (and ptxas's verdict),
// and run on the emulator in both lowerings against a double-precision reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "backends/launchers.h"
#include "codegen/compile.h"
#include "codegen/ptx_loops.h"
#include "dsl/dsl.h"
#include "launch/launcher.h"
#include "templates/kernels.h"
#include "tests/codegen/codegen_test_util.h"

using namespace tilec;
using ir::DType;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

bool has(const std::string& line, const char* what) { return line.find(what) != std::string::npos; }

// The f32 registers a wgmma line names in its accumulator list ({%f1, %f2, ...}).
std::set<std::string> accumulator_regs(const std::string& line) {
  std::set<std::string> regs;
  const size_t open = line.find('{'), close = line.find('}');
  if (open == std::string::npos || close == std::string::npos) return regs;
  const std::string list = line.substr(open, close - open);
  std::regex r("%f[0-9]+");
  for (auto it = std::sregex_iterator(list.begin(), list.end(), r); it != std::sregex_iterator(); ++it)
    regs.insert(it->str());
  return regs;
}

// Whether `line` names register `reg` (not a longer one it prefixes).
bool names(const std::string& line, const std::string& reg) {
  for (size_t p = line.find(reg); p != std::string::npos; p = line.find(reg, p + 1)) {
    const size_t end = p + reg.size();
    if (end == line.size() || !std::isdigit(static_cast<unsigned char>(line[end]))) return true;
  }
  return false;
}

// A 128 x 128 tile of C = A B whose accumulator is halved after every K step's dot.
ir::Kernel matmul_scaled() {
  using namespace dsl;
  KernelBuilder kb("matmul_scaled");
  auto a = kb.arg<Ptr<bf16>>("a"), b = kb.arg<Ptr<bf16>>("b"), c = kb.arg<Ptr<f32>>("c");
  Tile kk = multiple_of(kb.arg<i32>("k"), 16);
  TensorDesc da = make_tensor_desc(a, {128, kk}, {kk, 1}, {128, 64});
  TensorDesc db = make_tensor_desc(b, {kk, 128}, {128, 1}, {64, 128});
  Var acc = zeros({128, 128});
  for_range(0, kk, 64, RangeOptions{3}, [&](Scalar k0) { acc = dot(load(da, {0, k0}), load(db, {k0, 0}), acc) * 0.5f; });
  auto r = arange(0, 128);
  store(c + r.col() * 128 + r.row(), acc);
  return kb.finish();
}

} // namespace

TEST_CASE("GEMM overlap: the sm_90 matmul's K step keeps one wgmma group in flight, in at most 69 PTX, no spills",
          "[codegen][wgmma][nvptx]") {
  ir::Kernel k = templates::matmul(128, 128, 64, DType::bf16, 3, 16, 16);
  codegen::CompileOptions o; // sm_90, 4 warps
  codegen::CompiledKernel ck = codegen::compile(*k, o);
  INFO(ck.ptx);
  std::optional<codegen::PtxLoop> loop = codegen::kernel_main_loop(*k, ck.ptx);
  REQUIRE(loop);
  CHECK(loop->instructions <= 69);
  CHECK(loop->count("wgmma.mma_async") == 8);
  CHECK(loop->count("cp.async.bulk") == 3);
  CHECK(loop->count("bar.sync") == 1);
  const std::vector<std::string> ptx = lines_of(ck.ptx);
  // The loop's lines in the order a trip runs them, from its wait for the stage's mbarrier
  // phase (the loop's blocks may be laid out rotated: the latch's first).
  std::vector<std::string> body(ptx.begin() + loop->first_line - 1, ptx.begin() + loop->last_line);
  const auto top = std::find_if(body.begin(), body.end(), [](const std::string& l) { return has(l, "mbarrier.try_wait"); });
  REQUIRE(top != body.end());
  std::rotate(body.begin(), top, body.end());
  int wait1 = 0, wait0 = 0, last_mma = -1, wait_at = -1, barrier_at = -1, refill_at = -1;
  std::set<std::string> acc;
  for (int i = 0; i < int(body.size()); ++i) {
    const std::string& l = body[size_t(i)];
    if (has(l, "wgmma.mma_async")) {
      last_mma = i;
      const std::set<std::string> r = accumulator_regs(l);
      acc.insert(r.begin(), r.end());
    }
    if (has(l, "wgmma.wait_group.sync.aligned 1")) ++wait1, wait_at = i;
    if (has(l, "wgmma.wait_group.sync.aligned 0")) ++wait0;
    if (has(l, "bar.sync")) barrier_at = i;
    if (has(l, "cp.async.bulk.tensor") && refill_at < 0) refill_at = i;
  }
  CHECK(wait1 == 1);
  CHECK(wait0 == 0);
  CHECK(acc.size() == 128); // two passes of m64n128: 64 registers each
  // Between the last MMA and the wait: the commit alone (and the inline-asm markers).
  REQUIRE((last_mma >= 0 && wait_at > last_mma));
  for (int i = last_mma + 1; i < wait_at; ++i) {
    const std::string& l = body[size_t(i)];
    INFO(l);
    CHECK((has(l, "wgmma.commit_group") || has(l, "inline asm") || l.find_first_not_of(" \t") == std::string::npos));
  }
  // No instruction of the loop but the MMAs names an accumulator register: nothing reads or
  // moves them while a group is in flight.
  std::vector<std::string> touching;
  for (const std::string& l : body)
    if (!has(l, "wgmma.mma_async"))
      for (const std::string& r : acc)
        if (names(l, r)) touching.push_back(l);
  CHECK(touching.empty());
  // In the trip, the copies of the next stage are issued after the wait and the barrier: into
  // the buffer of the group the wait retired, never the one still in flight.
  CHECK(barrier_at > wait_at);
  CHECK(refill_at > barrier_at);
  // After the loop, one wait_group 0 before any read of the accumulator (the epilogue's).
  int after_wait0 = -1;
  for (int i = loop->last_line; i < int(ptx.size()); ++i)
    if (has(ptx[size_t(i)], "wgmma.wait_group.sync.aligned 0")) {
      CHECK(after_wait0 < 0);
      after_wait0 = i;
    }
  REQUIRE(after_wait0 > 0);
  CHECK(codegen::test::count(ck.ptx, "wgmma.wait_group.sync.aligned 0") == 1);
  std::vector<std::string> early;
  for (int i = loop->last_line; i < after_wait0; ++i)
    for (const std::string& r : acc)
      if (names(ptx[size_t(i)], r)) early.push_back(ptx[size_t(i)]);
  CHECK(early.empty());
  // The epilogue: C's 128 x 128 f32 staged (swizzled) in the pipeline's buffers, which the loop
  // no longer needs, fenced to the async proxy and stored by four TMA boxes of 128-byte rows.
  CHECK(ck.stats.tma_stores == 1);
  CHECK(ck.stats.tma_loads == 2);
  CHECK(codegen::test::count(ck.ptx, "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") == 4);
  const size_t store = ck.ptx.find("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group");
  const size_t fence = ck.ptx.rfind("fence.proxy.async.shared::cta", store);
  REQUIRE(fence != std::string::npos);
  CHECK(ck.ptx.find("st.shared", fence) > store);            // every staging write before the fence
  CHECK(ck.ptx.find("bar.sync", fence) < store);             // and every thread's before the stores
  CHECK(ck.ptx.find("cp.async.bulk.commit_group", store) != std::string::npos);
  CHECK(ck.ptx.find("cp.async.bulk.wait_group 0", store) != std::string::npos);
  CHECK(codegen::test::count(ck.ptx, "st.global") == 0);
  CHECK(ck.stats.shared_bytes <= 3 * 32768 + 1024); // the three stages and the mbarriers: nothing for C
  if (codegen::test::have_ptxas()) {
    REQUIRE(ck.ptxas.has_value());
    INFO(ck.ptxas->log);
    CHECK(!ck.cubin.empty());
    CHECK(ck.ptxas->spill_stores == 0);
    CHECK(ck.ptxas->spill_loads == 0);
    CHECK(ck.ptxas->log.find("serialized") == std::string::npos); // ptxas's warning when wgmma must wait
  }
}

TEST_CASE("GEMM overlap: loops the overlap does not fit wait for each group", "[codegen][wgmma]") {
  codegen::CompileOptions o;
  o.run_ptxas = false;
  auto waits = [](const codegen::CompiledKernel& ck) {
    return std::pair{codegen::test::count(ck.ptx, "wgmma.wait_group.sync.aligned 1"),
                     codegen::test::count(ck.ptx, "wgmma.wait_group.sync.aligned 0")};
  };
  // One stage: no pipeline, each K step's dot copies its operands and waits for its MMAs.
  CHECK(waits(codegen::compile(*templates::matmul(128, 128, 64, DType::bf16, 1, 16, 16), o)) == std::pair<size_t, size_t>{0, 1});
  // Two stages: the ring still holds the in-flight group's stage and the one being refilled.
  CHECK(waits(codegen::compile(*templates::matmul(64, 128, 32, DType::f16, 2, 16, 16), o)) == std::pair<size_t, size_t>{1, 1});
  // n with no promise: B's rows may not be 16-byte aligned, so B is staged from registers into
  // scratch every step (A still by TMA), where the next step would overwrite it under the
  // group in flight.
  const codegen::CompiledKernel loose = codegen::compile(*templates::matmul(128, 128, 64, DType::bf16, 3, 1, 16), o);
  CHECK(loose.stats.tma_loads == 1);
  CHECK(waits(loose) == std::pair<size_t, size_t>{0, 1});
  // An accumulator the body reads besides the dot (scaled each step): its registers are read
  // after every group, which must then be retired.
  codegen::CompiledKernel scaled = codegen::compile(*matmul_scaled(), o);
  CHECK(scaled.stats.tma_loads == 2);
  CHECK(waits(scaled) == std::pair<size_t, size_t>{0, 1});
  // --no-tma: cp.async copies keep their place at the top of the trip, and every wait is 0.
  codegen::CompileOptions no_tma = o;
  no_tma.tma = false;
  CHECK(waits(codegen::compile(*templates::matmul(128, 128, 64, DType::bf16, 3, 16, 16), no_tma)).first == 0);
}

TEST_CASE("GEMM overlap: the sm_90 matmul runs on the emulator in both lowerings against the reference",
          "[codegen][wgmma][emulator]") {
  struct Config {
    int64_t bm, bn, bk;
    DType dt;
    int warps;
    int64_t stages;
  };
  // The pinned tile: 3 stages over 5 K steps (the ring wraps), partial tiles of M and N whose
  // C boxes the copy engine clips. (The TMA tests run more configs against the interpreter.)
  const std::vector<Config> configs = {{128, 128, 64, DType::bf16, 4, 3}};
  const int64_t m = 136, n = 144, k = 320;
  std::mt19937 rng(46);
  std::uniform_real_distribution<double> d(-1, 1);
  for (const Config& c : configs) {
    INFO("block " << c.bm << "x" << c.bn << "x" << c.bk << " " << ir::dtype_name(c.dt) << " warps " << c.warps
                  << " stages " << c.stages);
    ir::Kernel kern = templates::matmul(c.bm, c.bn, c.bk, c.dt, c.stages, 16, 16);
    codegen::CompileOptions o;
    o.num_warps = c.warps;
    o.target = codegen::Target::emu;
    const codegen::LoweringStats st = codegen::lower_to_llvm(*kern, o).stats;
    CHECK(st.tma_loads == 2);
    CHECK(st.tma_stores == 1);
    launch::Buffer a("a", c.dt, size_t(m * k)), b("b", c.dt, size_t(k * n));
    for (launch::Buffer* x : {&a, &b})
      for (size_t i = 0; i < x->count(); ++i) x->set(i, d(rng));
    std::vector<double> av(a.count()), bv(b.count()), want(size_t(m * n));
    for (size_t i = 0; i < av.size(); ++i) av[i] = a.get(i);
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = b.get(i);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t q = 0; q < k; ++q)
        for (int64_t j = 0; j < n; ++j) want[size_t(i * n + j)] += av[size_t(i * k + q)] * bv[size_t(q * n + j)];
    const launch::Grid grid{(m + c.bm - 1) / c.bm, (n + c.bn - 1) / c.bn, 1};
    for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
      INFO((lowering == backends::EmuLowering::emu ? "emu lowering" : "nvptx lowering"));
      launch::Buffer out("c", DType::f32, size_t(m * n));
      backends::make_emulate_launcher(lowering)->launch(
          kern, c.warps, grid,
          {launch::Arg::of(a), launch::Arg::of(b), launch::Arg::of(out), launch::Arg::of_int(m),
           launch::Arg::of_int(n), launch::Arg::of_int(k)});
      int bad = 0;
      for (size_t i = 0; i < want.size(); ++i)
        if (std::abs(out.get(i) - want[i]) > 1e-4 * (1 + std::abs(want[i])) && ++bad <= 3)
          FAIL_CHECK("c[" << i << "]: " << out.get(i) << ", want " << want[i]);
      CHECK(bad == 0);
    }
  }
}
