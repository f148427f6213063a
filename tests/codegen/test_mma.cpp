// dot on the tensor cores: f16/bf16 dots agree with the interpreter on the emulator in both
// lowerings over shapes that need padding (M, N, K below one MMA tile), transposed operands
// (the other staging and ldmatrix .trans), accumulators carried in and warp counts; the
// PTX has mma.sync and ldmatrix; and paged attention's K/V loop is pinned by its counts.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "abi/float16.h"
#include "backends/launchers.h"
#include "codegen/compile.h"
#include "codegen/layout_plan.h"
#include "codegen/ptx_loops.h"
#include "tests/codegen/dot_kernel.h"
#include "tests/codegen/codegen_test_util.h"
#include "tests/codegen/emu_harness.h"
#include "dsl/dsl.h"
#include "interp/interpreter.h"
#include "interp/launcher.h"
#include "launch/launcher.h"
#include "templates/attention/paged_attention.h"
#include "templates/registry.h"

using namespace tilec;
using namespace tilec::dsl;
using ir::DType;

namespace {

struct DotCase {
  int64_t m, n, k;
  DType dt;
  bool trans_a, trans_b, with_acc;
  int warps;
};

// tests/codegen/dot_kernel.h's dot for one case.
ir::Kernel dot_kernel(const DotCase& c) {
  return codegen::test::dot_kernel("mma_dot", c.m, c.n, c.k, c.dt, c.trans_a, c.trans_b, c.with_acc);
}

// The largest difference between `got` and the interpreter's `want` for a dot over K, in units
// of what reordering its K + 1 f32 additions may cost (ir/SEMANTICS.md): at most 1 when they agree.
double dot_error(const launch::Buffer& want, const launch::Buffer& got, int64_t K) {
  const double bound = double(K + 1) * std::ldexp(1.0, -23) * (double(K) + 1.0);
  double worst = 0;
  for (size_t i = 0; i < want.count(); ++i) worst = std::max(worst, std::abs(want.get(i) - got.get(i)) / bound);
  return worst;
}

void fill(launch::Buffer& buf, std::mt19937& rng) {
  std::uniform_real_distribution<double> d(-1, 1);
  for (size_t i = 0; i < buf.count(); ++i) buf.set(i, d(rng)); // rounded to the buffer's dtype
}

} // namespace

TEST_CASE("dot on the tensor cores agrees with the interpreter (padding, transposes, accumulators, both lowerings)",
          "[codegen][mma][emulator]") {
  std::mt19937 rng(17);
  std::vector<DotCase> cases = {
      {16, 8, 16, DType::f16, false, false, false, 1},  {4, 64, 128, DType::bf16, false, true, false, 4},
      {4, 128, 64, DType::bf16, false, false, true, 4}, {64, 64, 32, DType::f16, false, false, true, 4},
      {1, 8, 16, DType::f16, false, false, false, 2},   {2, 1, 8, DType::bf16, false, false, true, 1},
      {8, 2, 2, DType::f16, true, false, false, 1},     {32, 16, 64, DType::bf16, true, true, true, 2},
      {16, 32, 8, DType::f16, true, false, false, 4},   {8, 16, 4, DType::bf16, false, true, true, 8},
      {128, 8, 16, DType::f16, false, false, false, 8}, {8, 8, 128, DType::bf16, true, true, false, 1},
      // N a multiple of 8 x warps: the result (and accumulator) in the MMA layout, in registers;
      // rows past M (below 8) replicate rows mod M, through ldmatrix or (A stored [K][M]) not.
      {4, 32, 32, DType::f16, true, false, true, 4},    {2, 64, 16, DType::bf16, false, false, true, 2},
      {16, 64, 8, DType::f16, true, true, false, 2},    {32, 128, 64, DType::bf16, false, true, true, 4},
      {1, 16, 32, DType::f16, false, false, true, 1},   {8, 16, 16, DType::bf16, true, true, true, 2},
      // M at least 16 x warps: warps along M, each warp's 16-row tiles pairing rows r and r + 8W
      // (two row tiles per warp, A stored either way, one 8-column tile, K short).
      {64, 16, 32, DType::bf16, true, true, true, 4},   {128, 64, 64, DType::f16, false, true, true, 4},
      {64, 8, 8, DType::bf16, true, false, true, 2},    {32, 32, 16, DType::f16, false, false, true, 2},
  };
  for (const DotCase& c : cases) {
    INFO("M " << c.m << " N " << c.n << " K " << c.k << " " << ir::dtype_name(c.dt) << " trans_a " << c.trans_a
              << " trans_b " << c.trans_b << " acc " << c.with_acc << " warps " << c.warps);
    ir::Kernel k = dot_kernel(c);
    {
      codegen::AxisAnalysis axis(*k);
      codegen::LayoutPlan plan(*k, axis, c.warps);
      bool in_mma_layout = false;
      ir::walk(k->body, [&](ir::Op& op) {
        if (op.kind == ir::OpKind::Dot) in_mma_layout = plan.is_mma(plan.op_layouts(&op)[2]);
      });
      const bool along_m = c.m >= 16 * c.warps && c.m % (16 * c.warps) == 0 && c.n % 8 == 0;
      CHECK(in_mma_layout == (along_m || c.n % (8 * c.warps) == 0));
      CHECK(codegen::mma_warps_along_m(c.m, c.n, c.warps) == along_m);
    }
    launch::Buffer a("a", c.dt, size_t(c.m * c.k)), b("b", c.dt, size_t(c.k * c.n));
    launch::Buffer acc("c", DType::f32, size_t(c.m * c.n));
    fill(a, rng), fill(b, rng), fill(acc, rng);
    launch::Buffer want("out", DType::f32, size_t(c.m * c.n));
    auto args = [&](launch::Buffer& out) {
      return std::vector<launch::Arg>{launch::Arg::of(a), launch::Arg::of(b), launch::Arg::of(acc), launch::Arg::of(out)};
    };
    interp::make_interpret_launcher()->launch(k, c.warps, {1, 1, 1}, args(want));
    for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
      INFO((lowering == backends::EmuLowering::emu ? "emu lowering" : "nvptx lowering"));
      launch::Buffer got("out", DType::f32, size_t(c.m * c.n));
      backends::make_emulate_launcher(lowering)->launch(k, c.warps, {1, 1, 1}, args(got));
      // Products of f16/bf16 values are exact in f32; only the order of the K additions
      // differs (ir/SEMANTICS.md bounds it): at most K ulps of the largest partial sum.
      CHECK(dot_error(want, got, c.k) <= 1.0);
    }
  }
}

TEST_CASE("dot on the tensor cores: mma.sync and ldmatrix in the PTX, f32 stays on CUDA cores", "[codegen][mma][nvptx]") {
  for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
    DotCase c{64, 64, 64, dt, false, true, true, 4};
    codegen::CompileOptions o;
    o.arch = "sm_80";
    codegen::CompiledKernel ck = codegen::compile(*dot_kernel(c), o);
    INFO(ir::dtype_name(dt) << "\n" << ck.ptx);
    auto count = [&](const std::string& what) {
      size_t n = 0;
      for (size_t p = ck.ptx.find(what); p != std::string::npos; p = ck.ptx.find(what, p + 1)) ++n;
      return n;
    };
    if (dt == DType::f32) {
      CHECK(count("mma.sync") == 0);
      CHECK(count("ldmatrix") == 0);
    } else {
      std::string t(ir::dtype_name(dt));
      CHECK(count("mma.sync.aligned.m16n8k16.row.col.f32." + t + "." + t + ".f32") >= 8);
      CHECK(count("ldmatrix.sync.aligned.m8n8.x4") >= 2);
    }
    codegen::CompileOptions fma = o;
    fma.tensor_cores = false;
    CHECK(codegen::compile(*dot_kernel(c), fma).ptx.find("mma.sync") == std::string::npos);
  }
}

TEST_CASE("paged attention K/V loop counts on sm_90 (bf16 D128 block_n64 head_group4 4 warps 3 stages)",
          "[codegen][mma][paged_attention]") {
  const templates::KernelTemplate* t = templates::find_template("paged_attention");
  REQUIRE(t);
  templates::ParamMap params{{"block_n", 64}, {"head_group", 4}, {"num_warps", 4}, {"num_splits", 1}, {"num_stages", 3}};
  templates::ParamMap shape;
  for (const templates::Param& p : t->shape) shape[p.name] = p.value;
  shape["batch"] = 1, shape["hq"] = 32, shape["hkv"] = 8, shape["sq"] = 1, shape["head_dim"] = 128;
  shape["block_size"] = 16, shape["dtype"] = 2; // bf16
  codegen::CompileOptions o;
  o.arch = "sm_90";
  codegen::CompiledKernel ck = codegen::compile(*t->build(params, shape), o);
  std::vector<codegen::PtxLoop> loops = codegen::ptx_loops(ck.ptx);
  const codegen::PtxLoop* l = codegen::main_loop(loops);
  REQUIRE(l);
  WARN("paged attention K/V loop: " << l->instructions << " PTX instructions per 64-token step, " << l->count("mma")
                                    << " mma, " << l->count("ldmatrix") << " ldmatrix, " << l->count("cp.async.cg")
                                    << " cp.async, " << l->inner_loops
                                    << " inner loops; registers "
                                    << (ck.ptxas ? std::to_string(ck.ptxas->registers) : std::string("(no ptxas)")));
  CHECK(l->inner_loops == 0);     // every MMA K loop unrolled: the count is per step
  // The 4 query rows are the MMAs' N (transposed products, 8 columns) rather than 16 padded
  // rows: S^T = K q^T is 64 keys x 8 over 4 warps (one 16-row tile each, 8 k steps) and
  // O^T = V^T P^T is 128 x 8 (two row tiles each, 4 k steps), 8 + 8 m16n8k16 MMAs.
  CHECK(l->count("mma") == 16);
  CHECK(l->instructions <= 270);  // FMA path: ~700 static plus two inner loops (~3,900 per step)
  // q^T stays in shared memory across the walk (staged once before it). Fragments: 8 4-matrix
  // ldmatrix for K (A), 4 for q^T (B, two k steps each), 8 for V^T (A, .trans) and 2 for P^T.
  CHECK(l->count("ldmatrix") == 22);
  CHECK(ck.ptx.find("ldmatrix.sync.aligned.m8n8.x2") == std::string::npos);
  // Whole steps carry no mask: no per-row compare, and the page and slot of a key are a shift
  // and a mask, not a signed division.
  CHECK(l->count("setp") <= 4); // the trip count, the buffer rotation, the step ahead exists
  CHECK(l->count("selp") <= 2);
  CHECK(l->count("rem") + l->count("div") == 0);
  // Barriers: the page ids shared, the key max across warps, P^T staged, the buffer refill.
  CHECK(l->count("bar.sync") <= 4);
  CHECK(l->count("cp.async.cg") == 16); // K and V: 8 + 8 16-byte copies straight to shared memory
  // Software-pipelined: one wait per step, for the group issued two steps earlier (at most
  // num_stages - 2 = 1 newer group pending); K and V of step + 2 are copied in this one.
  CHECK(l->count("cp.async.wait_group") == 1);
  CHECK(ck.ptx.find("cp.async.wait_group 1;") != std::string::npos);
  CHECK(l->count("cp.async.commit_group") == 1);
  CHECK(l->count("ld.global") == 1);    // the page ids, a step ahead with the copies
  CHECK(ck.stats.pipelined_loops == 2); // whole steps, then the masked last one
  CHECK(ck.stats.pipeline_stages == 3);
  // A stage holds K and V, 64 rows of 128 bf16 each padded by 16 bytes; the buffers come first.
  CHECK(ck.stats.pipeline_stage_bytes == 2 * 64 * (128 + 8) * 2);
  CHECK(ck.shared_bytes > 3 * ck.stats.pipeline_stage_bytes);
  CHECK(ck.ptx.find(".maxnreg 96") != std::string::npos); // the transposed tile's ceiling (max_registers)
  if (ck.ptxas) {
    CHECK(ck.ptxas->registers <= 96);
    CHECK(ck.ptxas->spill_stores + ck.ptxas->spill_loads == 0);
  }
}

// The decode configuration the serving engines' Triton kernels were measured at (issue: the
// leanest decode loop): bf16, Hq 32, Hkv 8, D 128, page 16, 64 tokens a step, 4 warps, 2
// stages, sm_90. Per 64-token trip at most 320 PTX instructions and 8 barriers; K double- and V
// single-buffered, so 4 blocks of 128 threads share an H100/H200 SM by shared memory (228 KiB,
// 1 KiB kept per block); the tile computes S^T and O^T (its 4 rows as the MMAs' 8 columns) and
// asks for at most 96 registers (max_registers), which ptxas meets with no spills.
// (scripts/sass_check.py counts the SASS side with nvdisasm: 262 per trip, at most 340.)
TEST_CASE("paged attention decode loop on sm_90 at the serving engines' configuration (2 stages)",
          "[codegen][mma][paged_attention]") {
  const templates::KernelTemplate* t = templates::find_template("paged_attention");
  REQUIRE(t);
  templates::ParamMap params = templates::resolve_params(
      t->params, {"block_n=64", "head_group=4", "num_warps=4", "num_stages=2"}, "--set");
  templates::ParamMap shape = templates::resolve_params(
      t->shape, {"batch=1", "hq=32", "hkv=8", "head_dim=128", "block_size=16", "dtype=bf16"}, "--shape");
  ir::Kernel k = t->build(params, shape);
  CHECK(k->min_blocks_per_sm == 4);
  CHECK(k->max_registers == 96);
  codegen::CompileOptions o;
  o.arch = "sm_90";
  codegen::CompiledKernel ck = codegen::compile(*k, o);
  std::optional<codegen::PtxLoop> l = codegen::kernel_main_loop(*k, ck.ptx);
  REQUIRE(l);
  INFO(l->instructions << " PTX per trip, " << l->count("bar.sync") << " barriers, " << ck.shared_bytes << " B shared");
  CHECK(l->instructions <= 320);
  CHECK(l->count("bar.sync") <= 8);
  CHECK(l->count("mma") == 16);
  CHECK(l->count("ldmatrix") == 22);
  CHECK(l->count("cp.async.cg") == 16);
  // K in two rotating buffers, V in one: three 64 x 136-half tiles.
  CHECK(ck.stats.pipeline_stage_bytes == 64 * 136 * 2);
  CHECK(ck.stats.pipeline_late_bytes == 64 * 136 * 2);
  CHECK(4 * (ck.shared_bytes + 1024) <= 228 * 1024);
  CHECK(ck.ptx.find(".maxnreg 96") != std::string::npos);
  if (ck.ptxas) {
    CHECK(ck.ptxas->registers <= 104);
    CHECK(ck.ptxas->spill_stores + ck.ptxas->spill_loads == 0);
  }
  // Without the kernel's ceiling (the one its 4 blocks by shared memory allow, 128), ptxas
  // spends what it is given, without spills either: the ceiling costs the loop nothing it needs.
  o.max_registers = 128;
  codegen::CompiledKernel wide = codegen::compile(*k, o);
  CHECK(wide.ptx.find(".maxnreg 128") != std::string::npos);
  if (wide.ptxas) CHECK(wide.ptxas->spill_stores + wide.ptxas->spill_loads == 0);
}

namespace {

struct PipeCase {
  int64_t m, n, bk;
  DType dt;
  int64_t stages;
  bool row_pages; // a page per row of B through a tile of table entries (else one per step)
  bool trans_a;
  int warps;
};

constexpr int64_t kMaxSteps = 6, kPage = 4;

// out[M, N] = sum over steps s < count of A[:, s BK .. (s + 1) BK] . B_s, where B_s's rows
// are found through a table (a page of kPage rows per entry, or one entry per step, as a
// block table does): a dot per step whose operands the pipeline copies ahead.
ir::Kernel paged_matmul(const PipeCase& c) {
  KernelBuilder kb("paged_matmul");
  auto a = kb.arg(ptr_to(c.dt), "a");
  auto b = kb.arg(ptr_to(c.dt), "b");
  auto table = kb.arg<Ptr<i32>>("table");
  auto count = kb.arg<i32>("count");
  auto out = kb.arg(ptr_to(DType::f32), "out");
  const int64_t KT = kMaxSteps * c.bk;
  auto mi = arange(0, c.m), ni = arange(0, c.n), ki = arange(0, c.bk);
  Var acc = zeros({c.m, c.n});
  for_range(0, count * c.bk, c.bk, RangeOptions{c.stages}, [&](Scalar k0) {
    auto kk = k0 + ki;
    Tile at = c.trans_a ? trans(load(a + kk.col() * c.m + mi.row())) : load(a + mi.col() * KT + kk.row());
    Tile rows = c.row_pages ? load(table + kk / kPage) * kPage + kk % kPage
                            : load(table + k0 / c.bk) * c.bk + ki;
    Tile bt = load(b + rows.col() * c.n + ni.row());
    acc = dot(at, bt, acc);
  });
  store(out + mi.col() * c.n + ni.row(), acc);
  return kb.finish();
}

} // namespace

TEST_CASE("pipelined loads (num_stages) agree with the interpreter for every trip count, both lowerings",
          "[codegen][mma][emulator][pipeline]") {
  std::mt19937 rng(5);
  std::vector<PipeCase> cases = {
      {16, 16, 16, DType::f16, 2, false, false, 1}, {4, 64, 32, DType::bf16, 3, true, false, 4},
      {32, 32, 16, DType::f16, 4, true, true, 2},   {8, 128, 64, DType::bf16, 3, false, false, 4},
      {64, 16, 32, DType::f16, 2, true, true, 4},   {16, 32, 16, DType::bf16, 1, true, false, 2},
  };
  for (const PipeCase& c : cases) {
    INFO("M " << c.m << " N " << c.n << " BK " << c.bk << " " << ir::dtype_name(c.dt) << " stages " << c.stages
              << " row_pages " << c.row_pages << " trans_a " << c.trans_a << " warps " << c.warps);
    ir::Kernel k = paged_matmul(c);
    codegen::CompileOptions o;
    o.num_warps = c.warps;
    codegen::CompiledKernel ck = codegen::compile(*k, o);
    CHECK(ck.stats.pipelined_loops == (c.stages > 1 ? 1 : 0));
    if (c.stages > 1) CHECK(ck.stats.pipeline_stages == c.stages);
    // Rows of B: a shuffled set of pages, so a wrong page read ahead gives a wrong answer.
    const int64_t pages = kMaxSteps * c.bk / kPage;
    launch::Buffer a("a", c.dt, size_t(c.m * kMaxSteps * c.bk)), b("b", c.dt, size_t(2 * pages * kPage * c.n));
    launch::Buffer table("table", DType::i32, size_t(c.row_pages ? pages : kMaxSteps));
    fill(a, rng), fill(b, rng);
    std::vector<int64_t> ids(table.count());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i) + (c.row_pages ? pages : kMaxSteps);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (size_t i = 0; i < ids.size(); ++i) table.set_int(i, ids[i]);
    for (int64_t count : {int64_t(0), int64_t(1), int64_t(2), kMaxSteps - 1, kMaxSteps}) {
      INFO("count " << count);
      auto args = [&](launch::Buffer& out) {
        return std::vector<launch::Arg>{launch::Arg::of(a), launch::Arg::of(b), launch::Arg::of(table),
                                        launch::Arg::of_int(count), launch::Arg::of(out)};
      };
      launch::Buffer want("out", DType::f32, size_t(c.m * c.n));
      interp::make_interpret_launcher()->launch(k, c.warps, {1, 1, 1}, args(want));
      for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
        INFO((lowering == backends::EmuLowering::emu ? "emu lowering" : "nvptx lowering"));
        launch::Buffer got("out", DType::f32, size_t(c.m * c.n));
        backends::make_emulate_launcher(lowering)->launch(k, c.warps, {1, 1, 1}, args(got));
        CHECK(dot_error(want, got, count * c.bk) <= 1.0);
      }
    }
  }
}

TEST_CASE("loads whose address needs a carried value or whose buffer the kernel writes are not pipelined",
          "[codegen][mma][emulator][pipeline]") {
  std::mt19937 rng(9);
  for (int variant : {0, 1}) {
    KernelBuilder kb("not_pipelined");
    auto a = kb.arg(ptr_to(DType::f16), "a");
    auto b = kb.arg(ptr_to(DType::f16), "b");
    auto out = kb.arg(ptr_to(DType::f32), "out");
    auto mi = arange(0, 16), ki = arange(0, 16), ni = arange(0, 64);
    Var acc = zeros({16, 64});
    Var koff = ki; // variant 0: the columns of a, carried from step to step
    for_range(0, 64, 16, RangeOptions{3}, [&](Scalar k0) {
      auto at = load(a + mi.col() * 64 + (variant == 0 ? koff : k0 + ki).row());
      auto bt = load(b + (k0 + ki).col() * 64 + ni.row()); // 8 halves (16 bytes) per thread
      acc = dot(at, bt, acc);
      if (variant == 0) koff = koff + 16;
      // Variant 1 writes a, which the next step reads: a copy issued ahead would miss it.
      else store(a + mi.col() * 64 + ni.row(), (acc * 0.125f).to(DType::f16));
    });
    store(out + mi.col() * 64 + ni.row(), acc);
    ir::Kernel k = kb.finish();
    codegen::CompileOptions o;
    o.num_warps = 1;
    codegen::CompiledKernel ck = codegen::compile(*k, o);
    INFO("variant " << variant);
    // Only b is copied ahead; a keeps its place.
    CHECK(ck.stats.pipelined_loops == 1);
    CHECK(ck.stats.pipeline_stage_bytes == 16 * (64 + 8) * 2); // B: 16 rows of k, 64 halves each
    launch::Buffer ab("a", DType::f16, 16 * 64), bb("b", DType::f16, 64 * 64);
    fill(ab, rng), fill(bb, rng);
    auto run = [&](launch::Launcher& l) {
      launch::Buffer a2 = ab, out2("out", DType::f32, 16 * 64);
      l.launch(k, 1, {1, 1, 1}, {launch::Arg::of(a2), launch::Arg::of(bb), launch::Arg::of(out2)});
      return out2;
    };
    launch::Buffer want = run(*interp::make_interpret_launcher());
    for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
      launch::Buffer got = run(*backends::make_emulate_launcher(lowering));
      double worst = 0;
      for (size_t i = 0; i < want.count(); ++i)
        worst = std::max(worst, std::abs(want.get(i) - got.get(i)) / (1 + std::abs(want.get(i))));
      CHECK(worst <= 1e-3);
    }
  }
}

// A barrier inside a loop that may run no trip, or inside one branch of an if, fences nothing
// on the path that skips it: after a pipelined loop's dot reads its buffer, the next copy into
// that buffer must still wait for a barrier on every path (the fuzzer's seed 41054: the
// emulator saw the copy issued ahead overwrite bytes a lane was still reading).
TEST_CASE("a barrier in a loop of no trips or in one branch does not fence a pipeline buffer",
          "[codegen][mma][emulator][pipeline]") {
  std::mt19937 rng(13);
  for (int variant : {0, 1}) { // 0: an inner loop, 1: an if
    INFO((variant == 0 ? "inner loop" : "if"));
    KernelBuilder kb("fence_paths");
    auto a = kb.arg(ptr_to(DType::bf16), "a");
    auto b = kb.arg(ptr_to(DType::bf16), "b");
    auto inner = kb.arg<i32>("inner");
    auto out = kb.arg(ptr_to(DType::f32), "out");
    auto side = kb.arg(ptr_to(DType::f32), "side");
    auto mi = arange(0, 16), ki = arange(0, 16), ni = arange(0, 64);
    Var acc = zeros({16, 64});
    for_range(0, 64, 16, RangeOptions{2}, [&](Scalar k0) {
      auto at = load(a + mi.col() * 64 + (k0 + ki).row());
      auto bt = load(b + (k0 + ki).col() * 64 + ni.row());
      acc = dot(at, bt, acc);
      // A reduction across the 4 warps goes through shared memory, after a barrier.
      auto partial = [&] { store(side + ni, reduce_sum(Tile(acc), 0)); };
      if (variant == 0) for_range(0, inner, 1, [&](Scalar) { partial(); });
      else if_then(inner > 0, partial);
    });
    store(out + mi.col() * 64 + ni.row(), acc);
    ir::Kernel k = kb.finish();
    launch::Buffer ab("a", DType::bf16, 16 * 64), bb("b", DType::bf16, 64 * 64);
    fill(ab, rng), fill(bb, rng);
    for (int64_t trips : {0, 1, 2}) {
      INFO("inner " << trips);
      auto run = [&](launch::Launcher& l) {
        launch::Buffer o("out", DType::f32, 16 * 64), s("side", DType::f32, 64);
        l.launch(k, 4, {1, 1, 1},
                 {launch::Arg::of(ab), launch::Arg::of(bb), launch::Arg::of_int(trips), launch::Arg::of(o),
                  launch::Arg::of(s)});
        return o;
      };
      launch::Buffer want = run(*interp::make_interpret_launcher());
      for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
        INFO((lowering == backends::EmuLowering::emu ? "emu lowering" : "nvptx lowering"));
        launch::Buffer got = run(*backends::make_emulate_launcher(lowering)); // a race throws
        CHECK(dot_error(want, got, 64) <= 1.0);
      }
    }
  }
}

// An 8-column product (the transposed decode tile's shape) has one column tile per warp: its B
// fragments for two k steps come from one 4-matrix ldmatrix (rows along K: .trans or not),
// where each step alone would load two matrices; a K of one step keeps the
// 2-matrix loads (K 16: one step). The emulator runs both against the interpreter bit for bit.
TEST_CASE("an 8-column dot loads B two k steps at a time, exactly", "[codegen][mma][emulator]") {
  struct Case {
    int64_t m, k;
    int warps;
    bool trans_b, with_acc;
    bool paired;
  };
  std::mt19937 rng(11);
  for (const Case& c : {Case{64, 64, 4, true, false, true}, Case{64, 32, 4, false, true, true},
                        Case{128, 128, 4, true, true, true}, Case{32, 64, 2, false, false, true},
                        Case{64, 16, 4, true, false, false}, Case{128, 16, 4, false, true, false}}) {
    INFO("M " << c.m << " N 8 K " << c.k << " warps " << c.warps << " B from [N, K] " << c.trans_b << " acc "
              << c.with_acc);
    ir::Kernel k = codegen::test::dot_kernel("dot_n8", c.m, 8, c.k, DType::bf16, false, c.trans_b, c.with_acc);
    codegen::CompileOptions o;
    o.num_warps = c.warps;
    o.run_ptxas = false;
    const std::string ptx = codegen::compile(*k, o).ptx;
    CHECK((ptx.find("ldmatrix.sync.aligned.m8n8.x2") == std::string::npos) == c.paired);
    launch::Buffer a("a", DType::bf16, size_t(c.m * c.k)), b("b", DType::bf16, size_t(c.k * 8));
    launch::Buffer acc("c", DType::f32, size_t(c.m * 8));
    std::uniform_real_distribution<double> d(-1, 1);
    for (launch::Buffer* x : {&a, &b, &acc})
      for (size_t i = 0; i < x->count(); ++i) x->set(i, d(rng));
    codegen::test::require_bitwise_on_both_lowerings([&](launch::Launcher& l) {
      launch::Buffer out("out", DType::f32, size_t(c.m * 8));
      l.launch(k, c.warps, {1, 1, 1}, {launch::Arg::of(a), launch::Arg::of(b), launch::Arg::of(acc), launch::Arg::of(out)});
      return out;
    });
  }
}

// Every paged-attention configuration whose kernel asks for a register ceiling of its own
// (the transposed decode tile's 96, templates/attention/fused.cpp) compiles without spills
// on both archs; the grid holds every (block_n, head_dim, num_warps) the ceiling applies to.
TEST_CASE("every decode configuration with a register ceiling of its own compiles without spills",
          "[codegen][mma][paged_attention][registers]") {
  const templates::KernelTemplate* t = templates::find_template("paged_attention");
  REQUIRE(t);
  int capped = 0;
  for (int64_t n : {32, 64, 128})
    for (int64_t d : {64, 128, 256})
      for (int64_t w : {2, 4, 8})
        for (int64_t g : {1, 8})
          for (int64_t stages : {1, 2, 3}) {
            templates::ParamMap params{{"block_n", n}, {"head_group", g}, {"num_warps", w}, {"num_splits", 1},
                                       {"num_stages", stages}};
            templates::ParamMap shape;
            for (const templates::Param& p : t->shape) shape[p.name] = p.value;
            shape["batch"] = 1, shape["hq"] = 64, shape["hkv"] = 8, shape["sq"] = 1, shape["head_dim"] = d;
            shape["block_size"] = 16, shape["dtype"] = 2; // bf16
            if (stages == 3 && n * d > 64 * 128) continue; // three such K/V stages do not fit sm_80
            ir::Kernel k = t->build(params, shape);
            if (!k->max_registers) continue;
            ++capped;
            INFO("block_n " << n << " head_dim " << d << " warps " << w << " head_group " << g << " stages "
                            << stages);
            CHECK(k->max_registers == 96);
            for (const codegen::test::ArchResult& r : codegen::test::compile_all_archs(*k, int(w)))
              CHECK(r.kernel.ptx.find(".maxnreg 96") != std::string::npos);
          }
  // (block_n, head_dim) (64, 64) and (64, 128) at 4 warps, 2 groups x 3 stages; (128, 64) at 4
  // warps, 3 stages, one group (8 rows x 128 keys sum per step, not deferred); (128, 128) at 8
  // warps, 2 groups x 2 stages.
  CHECK(capped == 19);
}

// The same ceiling with every feature the fused kernel has, at the serving configuration
// (block_n 64, head_dim 128, 4 warps, 2 stages) and at head_dim 64: an fp8 cache (decoded in
// software on sm_80), ALiBi, a softcap, causal and windowed tiles of 2 positions x 4 heads,
// a padded head_dim, splits and a mixed batch.
TEST_CASE("the decode register ceiling holds without spills with every feature", "[codegen][mma][paged_attention][registers]") {
  struct Variant {
    const char* name;
    std::function<void(templates::PagedAttentionShape&, templates::PagedAttentionConfig&)> set;
  };
  const std::vector<Variant> variants = {
      {"fp8 e4m3 cache", [](auto& s, auto&) { s.kv_fp8 = DType::f8e4m3; }},
      {"fp8 e5m2 cache", [](auto& s, auto&) { s.kv_fp8 = DType::f8e5m2; }},
      {"alibi", [](auto& s, auto&) { s.alibi = true; }},
      {"softcap", [](auto& s, auto&) { s.softcap = 30.0; }},
      {"causal, 2 positions", [](auto& s, auto&) { s.causal = true, s.sq = 2; }},
      {"window, 2 positions", [](auto& s, auto&) { s.window = 100, s.sq = 2; }},
      {"head_dim 80 of 128", [](auto& s, auto&) { s.head_dim = s.head_dim == 128 ? 80 : 48; }},
      {"4 splits", [](auto&, auto& c) { c.num_splits = 4; }},
      {"mixed batch", [](auto& s, auto&) { s.varlen = true, s.sq = 2; }},
      {"sinks", [](auto& s, auto&) { s.sinks = true; }},
      {"sinks, 4 splits", [](auto& s, auto& c) { s.sinks = true, c.num_splits = 4; }},
      {"chunks, causal, 2 positions", [](auto& s, auto&) { s.chunk = 64, s.causal = true, s.sq = 2; }},
  };
  for (int64_t d : {128, 64})
    for (const Variant& v : variants) {
      templates::PagedAttentionShape s;
      s.batch = 1, s.hq = 32, s.hkv = 8, s.head_dim = d, s.dtype = DType::bf16;
      templates::PagedAttentionConfig cfg;
      cfg.block_n = 64, cfg.head_group = 4, cfg.num_warps = 4, cfg.num_stages = 2;
      v.set(s, cfg);
      INFO(v.name << " at head_dim " << d);
      ir::Kernel k = templates::paged_attention_fused_kernel(s, cfg);
      CHECK(k->max_registers == 96);
      codegen::test::compile_all_archs(*k, 4);
    }
}
