// Tensor descriptors (dsl::TensorDesc, ops desc_load and desc_store) and Hopper's TMA: the
// blocks they load and store (zeros outside the tensor, negative offsets too) on the
// interpreter and the emulator in both lowerings; the DSL's checks; which loads become TMA
// copies (cp.async.bulk.tensor on an mbarrier, codegen/tma.h) and the PTX, tensor maps and
// ptxas verdict for the 128x128x64 bf16 matmul; `--no-tma` and sm_80 falling back to cp.async;
// and the matmul's TMA-fed wgmma on the emulator against the interpreter bit for bit.
#include <catch2/catch.hpp>

#include <random>

#include "backends/launchers.h"
#include "codegen/compile.h"
#include "codegen/ptx_loops.h"
#include "codegen/tma.h"
#include "dsl/dsl.h"
#include "interp/launcher.h"
#include "launch/launcher.h"
#include "templates/kernels.h"
#include "tests/codegen/codegen_test_util.h"
#include "tests/codegen/emu_harness.h"

using namespace tilec;
using ir::DType;

namespace {

// y's block at (r0 + 3, c0 - 5) = 2 x's block at (r0, c0) + 1, both [16, 32] blocks of
// [rows, cols] row-major tensors.
ir::Kernel desc_copy() {
  using namespace dsl;
  KernelBuilder k("desc_copy");
  auto x = k.arg<Ptr<f32>>("x"), y = k.arg<Ptr<f32>>("y");
  auto rows = k.arg<i32>("rows"), cols = k.arg<i32>("cols"), r0 = k.arg<i32>("r0"), c0 = k.arg<i32>("c0");
  TensorDesc dx = make_tensor_desc(x, {rows, cols}, {cols, 1}, {16, 32});
  TensorDesc dy = make_tensor_desc(y, {rows, cols}, {cols, 1}, {16, 32});
  store(dy, {r0 + 3, c0 - 5}, load(dx, {r0, c0}) * 2.0f + 1.0f);
  return k.finish();
}

// The same through a promise that makes the stores TMA's on sm_90: cols a multiple of 4 (16
// bytes of f32), blocks [rows_b, cols_b] of `dt`.
ir::Kernel desc_scale(int64_t rows_b, int64_t cols_b, DType dt) {
  using namespace dsl;
  KernelBuilder k("desc_scale");
  auto x = k.arg(ptr_to(dt), "x"), y = k.arg(ptr_to(dt), "y");
  auto rows = k.arg<i32>("rows"), cols = multiple_of(k.arg<i32>("cols"), 16), r0 = k.arg<i32>("r0"), c0 = k.arg<i32>("c0");
  TensorDesc dx = make_tensor_desc(x, {rows, cols}, {cols, 1}, {rows_b, cols_b});
  TensorDesc dy = make_tensor_desc(y, {rows, cols}, {cols, 1}, {rows_b, cols_b});
  auto p = program_id(0);
  store(dy, {r0 + p * rows_b, c0}, (load(dx, {r0 + p * rows_b, c0}).to(f32) * 2.0f + 1.0f).to(dt));
  return k.finish();
}

} // namespace

TEST_CASE("descriptors: blocks partly or wholly outside the tensor read zeros and write nothing, on every backend",
          "[codegen][tma]") {
  ir::Kernel k = desc_copy();
  CHECK(codegen::test::count_kind(*k, ir::OpKind::DescLoad) == 1);
  CHECK(codegen::test::count_kind(*k, ir::OpKind::DescStore) == 1);
  const int rows = 20, cols = 40;
  for (auto [r0, c0] : {std::pair{0, 5}, {-5, 10}, {12, 30}, {-20, -40}, {18, -30}}) {
    INFO("block at (" << r0 << ", " << c0 << ")");
    launch::Buffer x("x", DType::f32, size_t(rows * cols));
    for (size_t i = 0; i < x.count(); ++i) x.set(i, double(i % 97) - 40.0);
    std::vector<double> want(size_t(rows * cols), -7.0);
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 32; ++c) {
        const int yr = r0 + 3 + r, yc = c0 - 5 + c, xr = r0 + r, xc = c0 + c;
        if (yr < 0 || yr >= rows || yc < 0 || yc >= cols) continue;
        const bool in_x = xr >= 0 && xr < rows && xc >= 0 && xc < cols;
        want[size_t(yr * cols + yc)] = 2.0 * (in_x ? x.get(size_t(xr * cols + xc)) : 0.0) + 1.0;
      }
    auto run = [&](launch::Launcher& l) {
      launch::Buffer y("y", DType::f32, size_t(rows * cols));
      for (size_t i = 0; i < y.count(); ++i) y.set(i, -7.0);
      l.launch(k, 4, {1, 1, 1},
               {launch::Arg::of(x), launch::Arg::of(y), launch::Arg::of_int(rows), launch::Arg::of_int(cols),
                launch::Arg::of_int(r0), launch::Arg::of_int(c0)});
      int bad = 0;
      for (size_t i = 0; i < y.count(); ++i)
        if (y.get(i) != want[i] && ++bad <= 3) FAIL_CHECK("y[" << i << "]: " << y.get(i) << ", want " << want[i]);
      CHECK(bad == 0);
    };
    run(*interp::make_interpret_launcher());
    for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
      INFO((lowering == backends::EmuLowering::emu ? "emu lowering" : "nvptx lowering"));
      run(*backends::make_emulate_launcher(lowering));
    }
  }
  // Not a dot's operand: the masked load and store it describes, on sm_90 too.
  codegen::CompileOptions o;
  CHECK(codegen::tma_unfit(*k, *k->body.ops[0], o) != ""); // not a desc_load
  ir::Kernel prepared = codegen::prepare_descriptors(*k, o);
  REQUIRE(prepared);
  CHECK(codegen::test::count_kind(*prepared, ir::OpKind::DescLoad) + codegen::test::count_kind(*prepared, ir::OpKind::DescStore) == 0);
  CHECK(codegen::compile(*k, o).stats.tma_loads == 0);
}

TEST_CASE("descriptors: the DSL names a bad descriptor", "[dsl][tma]") {
  using namespace dsl;
  auto attempt = [](const std::function<void(Tile, Tile)>& body) {
    KernelBuilder k("bad_desc");
    auto x = k.arg<Ptr<f32>>("x");
    auto n = k.arg<i32>("n");
    try {
      body(x, n);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(attempt([](Tile x, Tile n) { make_tensor_desc(x, {n, n}, {n, n}, {16, 16}); }),
             Catch::Contains("the last stride must be the number 1"));
  CHECK_THAT(attempt([](Tile x, Tile n) { make_tensor_desc(x, {n, n}, {n, 1}, {16, 24}); }),
             Catch::Contains("block dim 24 is not a power of two"));
  CHECK_THAT(attempt([](Tile x, Tile n) { make_tensor_desc(x, {n}, {n, 1}, {16, 16}); }),
             Catch::Contains("1 sizes, 2 strides and a block of rank 2"));
  CHECK_THAT(attempt([](Tile x, Tile n) { load(make_tensor_desc(x, {n, n}, {n, 1}, {16, 16}), {n}); }),
             Catch::Contains("1 offsets for a rank-2 descriptor"));
  CHECK_THAT(attempt([](Tile x, Tile n) { make_tensor_desc(x + arange(0, 4), {n, n}, {n, 1}, {16, 16}); }),
             Catch::Contains("the base must be a scalar pointer"));
  CHECK_THAT(attempt([](Tile x, Tile n) { load(make_tensor_desc(x, {n, n}, {n, 1}, {16, 16}), {n, 0.5}); }),
             Catch::Contains("needs an integer"));
}

TEST_CASE("TMA: the 128x128x64 bf16 matmul on sm_90 feeds wgmma with cp.async.bulk.tensor", "[codegen][tma][nvptx]") {
  ir::Kernel k = templates::matmul(128, 128, 64, DType::bf16, 3, 16, 16);
  codegen::CompileOptions o; // sm_90
  codegen::CompiledKernel ck = codegen::compile(*k, o);
  INFO(ck.ptx);
  CHECK(ck.stats.wgmma_dots == 1);
  CHECK(ck.stats.tma_loads == 2);
  // A [m, k] in boxes of 128 rows x 64 (one 128-byte panel), B [k, n] in boxes of 64 x 64 (two
  // panels of its 128 columns): what the launch encodes, from the parameters.
  // C [m, n] f32 in boxes of 128 rows x 32 (four 128-byte panels of its 128 columns): the TMA
  // store of the epilogue.
  REQUIRE(ck.stats.tensor_maps.size() == 3);
  const rt::ModuleTensorMap& ta = ck.stats.tensor_maps[0];
  const rt::ModuleTensorMap& tb = ck.stats.tensor_maps[1];
  const rt::ModuleTensorMap& tc = ck.stats.tensor_maps[2];
  CHECK(tc.base == "c");
  CHECK(tc.box == std::vector<std::int64_t>{128, 32});
  CHECK(tc.swizzle == 128);
  CHECK(ck.stats.tma_stores == 1);
  CHECK(ta.base == "a");
  CHECK(ta.sizes == std::vector<rt::SpecValue>{std::string("m"), std::string("k")});
  CHECK(ta.strides == std::vector<rt::SpecValue>{std::string("k"), std::int64_t(1)});
  CHECK(ta.box == std::vector<std::int64_t>{128, 64});
  CHECK(ta.swizzle == 128);
  CHECK(tb.base == "b");
  CHECK(tb.sizes == std::vector<rt::SpecValue>{std::string("k"), std::string("n")});
  CHECK(tb.box == std::vector<std::int64_t>{64, 64});
  CHECK(tb.swizzle == 128);
  CHECK(ck.ptx.find(".param .align 64 .b8 matmul_param_6[128]") != std::string::npos);
  CHECK(ck.ptx.find(".param .align 64 .b8 matmul_param_7[128]") != std::string::npos);
  // Three stages' mbarriers; two stages filled before the loop, one in it: three copies each.
  CHECK(codegen::test::count(ck.ptx, "mbarrier.init.shared::cta.b64") == 3);
  CHECK(codegen::test::count(ck.ptx, "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") == 9);
  CHECK(codegen::test::count(ck.ptx, "mbarrier.arrive.expect_tx.shared::cta.b64") == 3);
  CHECK(codegen::test::count(ck.ptx, "mbarrier.try_wait.parity.shared::cta.b64") == 1);
  CHECK(codegen::test::count(ck.ptx, "cp.async.cg") == 0);
  CHECK(codegen::test::count(ck.ptx, "cp.async.wait_group") == 0);
  CHECK(codegen::test::count(ck.ptx, "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16") == 8);
  std::optional<codegen::PtxLoop> loop = codegen::kernel_main_loop(*k, ck.ptx);
  REQUIRE(loop);
  CHECK(loop->count("cp.async.bulk") == 3); // opcodes to two modifiers: cp.async.bulk.tensor
  CHECK(loop->count("wgmma.mma_async") == 8);
  CHECK(loop->count("bar.sync") == 1); // the stage the next copies refill has been read by every warpgroup
  if (codegen::test::have_ptxas()) {
    REQUIRE(ck.ptxas.has_value());
    INFO(ck.ptxas->log);
    CHECK(!ck.cubin.empty());
    CHECK(ck.ptxas->spill_stores == 0);
  }
  // --no-tma: the same descriptors as masked loads, copied by cp.async; sm_80: mma.sync and cp.async.
  codegen::CompileOptions off = o;
  off.tma = false;
  codegen::CompiledKernel plain = codegen::compile(*k, off);
  CHECK(plain.stats.tma_loads == 0);
  CHECK(plain.stats.tensor_maps.empty());
  CHECK(plain.stats.wgmma_dots == 1);
  CHECK(plain.ptx.find("cp.async.bulk") == std::string::npos);
  CHECK(codegen::test::count(plain.ptx, "cp.async.cg") > 0);
  codegen::CompileOptions ampere = o;
  ampere.arch = "sm_80";
  codegen::CompiledKernel a80 = codegen::compile(*k, ampere);
  CHECK(a80.stats.tma_loads == 0);
  CHECK(a80.ptx.find("cp.async.bulk") == std::string::npos);
  CHECK(codegen::test::count(a80.ptx, "cp.async.cg") > 0);
  // Without the promise that n and k are multiples of 16, the strides may not be multiples of
  // 16 bytes: no tensor map can describe them.
  ir::Kernel loose = templates::matmul(128, 128, 64, DType::bf16, 3, 1, 1);
  const ir::Op* dl = nullptr;
  ir::walk(loose->body, [&](ir::Op& op) {
    if (op.kind == ir::OpKind::DescLoad && !dl) dl = &op;
  });
  REQUIRE(dl);
  CHECK_THAT(codegen::tma_unfit(*loose, *dl, o), Catch::Contains("is not known to be a multiple of 16 bytes"));
  CHECK(codegen::compile(*loose, o).stats.tma_loads == 0);
}

TEST_CASE("TMA: loads and stores the copy engine would not order with the kernel's other accesses stay masked",
          "[codegen][tma]") {
  using namespace dsl;
  codegen::CompileOptions o;
  auto find = [](const ir::Kernel& k, ir::OpKind kind) {
    const ir::Op* found = nullptr;
    ir::walk(k->body, [&](ir::Op& op) {
      if (op.kind == kind && !found) found = &op;
    });
    REQUIRE(found);
    return found;
  };
  // A wgmma dot's operand from a buffer the kernel also writes; and one with a store between
  // the load and its dot.
  for (int variant : {0, 1}) {
    KernelBuilder k("tma_rules");
    auto a = k.arg<Ptr<bf16>>("a"), c = k.arg<Ptr<f32>>("c");
    TensorDesc da = make_tensor_desc(a, {128, 64}, {64, 1}, {128, 64});
    auto at = load(da, {0, 0});
    auto r = arange(0, 64);
    if (variant == 0) store(a + r, zeros({64}, bf16));
    if (variant == 1) store(c + r, zeros({64}));
    auto bt = trans(load(da, {0, 0}));
    auto rows = arange(0, 128), cols = arange(0, 128);
    store(c + rows.col() * 128 + cols.row(), dot(at, bt));
    ir::Kernel kern = k.finish();
    INFO("variant " << variant);
    CHECK_THAT(codegen::tma_unfit(*kern, *find(kern, ir::OpKind::DescLoad), o),
               Catch::Contains(variant == 0 ? "the kernel writes its buffer 'a'" : "followed by a store that may write"));
    CHECK(codegen::compile(*kern, o).stats.tma_loads == (variant == 0 ? 0 : 1)); // B's load has no store after it
  }
  // A store to a buffer the kernel also loads from.
  KernelBuilder k("tma_store_rules");
  auto y = k.arg<Ptr<f32>>("y");
  TensorDesc dy = make_tensor_desc(y, {64, 64}, {64, 1}, {16, 32});
  store(dy, {0, 0}, load(dy, {16, 0}) + 1.0f);
  ir::Kernel kern = k.finish();
  CHECK_THAT(codegen::tma_store_unfit(*kern, *find(kern, ir::OpKind::DescStore), o),
             Catch::Contains("a desc_load of the kernel may touch its buffer 'y' too"));
  CHECK(codegen::compile(*kern, o).stats.tma_stores == 0);
}

TEST_CASE("TMA: the emulator runs the matmul's TMA-fed wgmma against the interpreter bit for bit (both lowerings)",
          "[codegen][tma][emulator]") {
  struct Config {
    int64_t bm, bn, bk;
    DType dt;
    int warps;
    int64_t stages;
  };
  // 3 and 2 stages (pipelined), 1 (each dot copies its own), two warpgroups, f16; partial tiles
  // of M, N and K read zeros from the copy engine.
  const std::vector<Config> configs = {{128, 128, 64, DType::bf16, 4, 3}, {128, 64, 32, DType::f16, 8, 2},
                                       {64, 64, 64, DType::bf16, 4, 1}, {64, 128, 16, DType::f16, 4, 2}};
  const int64_t m = 200, n = 320, k = 160;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> d(-1, 1);
  for (const Config& c : configs) {
    INFO("block " << c.bm << "x" << c.bn << "x" << c.bk << " " << ir::dtype_name(c.dt) << " warps " << c.warps
                  << " stages " << c.stages);
    ir::Kernel kern = templates::matmul(c.bm, c.bn, c.bk, c.dt, c.stages, 16, 16);
    codegen::CompileOptions o;
    o.num_warps = c.warps;
    o.target = codegen::Target::emu;
    CHECK(codegen::lower_to_llvm(*kern, o).stats.tma_loads == 2);
    launch::Buffer a("a", c.dt, size_t(m * k)), b("b", c.dt, size_t(k * n));
    for (launch::Buffer* x : {&a, &b})
      for (size_t i = 0; i < x->count(); ++i) x->set(i, d(rng));
    const launch::Grid grid{(m + c.bm - 1) / c.bm, (n + c.bn - 1) / c.bn, 1};
    auto run = [&](launch::Launcher& l) {
      launch::Buffer out("c", DType::f32, size_t(m * n));
      l.launch(kern, c.warps, grid,
               {launch::Arg::of(a), launch::Arg::of(b), launch::Arg::of(out), launch::Arg::of_int(m),
                launch::Arg::of_int(n), launch::Arg::of_int(k)});
      return out;
    };
    codegen::test::require_bitwise_on_both_lowerings(run);
  }
}

TEST_CASE("TMA: descriptor stores on sm_90 are staged and copied out by the copy engine, clipped to the tensor",
          "[codegen][tma][emulator]") {
  struct Case {
    int64_t rows_b, cols_b;
    DType dt;
    int swizzle;
  };
  // Rows of 128 bytes (swizzled 128, two panels for 256), 32 bytes, and 16 (no swizzle).
  const std::vector<Case> cases = {{16, 32, DType::f32, 128}, {8, 128, DType::bf16, 128}, {32, 8, DType::f32, 32},
                                   {16, 4, DType::f32, 0}, {64, 64, DType::f16, 128}};
  const int rows = 50, cols = 48;
  for (const Case& c : cases) {
    INFO("block " << c.rows_b << "x" << c.cols_b << " " << ir::dtype_name(c.dt));
    ir::Kernel k = desc_scale(c.rows_b, c.cols_b, c.dt);
    codegen::CompileOptions o;
    codegen::CompiledKernel ck = codegen::compile(*k, o);
    INFO(ck.ptx);
    CHECK(ck.stats.tma_stores == 1);
    CHECK(ck.stats.tma_loads == 0); // its load feeds no dot: the masked load it describes
    REQUIRE(ck.stats.tensor_maps.size() == 1);
    CHECK(ck.stats.tensor_maps[0].base == "y");
    CHECK(ck.stats.tensor_maps[0].swizzle == c.swizzle);
    const int64_t eb = ir::dtype_bytes(c.dt), panels = c.swizzle ? c.cols_b * eb / c.swizzle : 1;
    CHECK(codegen::test::count(ck.ptx, "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") == size_t(panels));
    CHECK(codegen::test::count(ck.ptx, "cp.async.bulk.commit_group") == 1);
    CHECK(codegen::test::count(ck.ptx, "cp.async.bulk.wait_group 0") == 1);
    CHECK(codegen::test::count(ck.ptx, "fence.proxy.async.shared::cta") >= 1);
    if (codegen::test::have_ptxas()) {
      REQUIRE(ck.ptxas.has_value());
      INFO(ck.ptxas->log);
      CHECK(!ck.cubin.empty());
    }
    for (auto [r0, c0] : {std::pair{0, 0}, {-5, 8}, {-3, -2}}) {
      INFO("blocks from (" << r0 << ", " << c0 << ")");
      launch::Buffer x("x", c.dt, size_t(rows * cols));
      for (size_t i = 0; i < x.count(); ++i) x.set(i, double(int(i % 23) - 11) * 0.25);
      const launch::Grid grid{(rows + c.rows_b - 1) / c.rows_b + 1, 1, 1};
      auto run = [&](launch::Launcher& l) {
        launch::Buffer y("y", c.dt, size_t(rows * cols));
        for (size_t i = 0; i < y.count(); ++i) y.set(i, -7.0);
        l.launch(k, 4, grid,
                 {launch::Arg::of(x), launch::Arg::of(y), launch::Arg::of_int(rows), launch::Arg::of_int(cols),
                  launch::Arg::of_int(r0), launch::Arg::of_int(c0)});
        return y;
      };
      launch::Buffer want = codegen::test::require_bitwise_on_both_lowerings(run);
      int written = 0;
      for (size_t i = 0; i < want.count(); ++i) written += want.get(i) != -7.0;
      CHECK(written > 0);
    }
  }
  // Not on sm_80, not with --no-tma, not past the staging limit: masked stores.
  ir::Kernel k = desc_scale(16, 32, DType::f32);
  codegen::CompileOptions ampere;
  ampere.arch = "sm_80";
  CHECK(codegen::compile(*k, ampere).stats.tma_stores == 0);
  codegen::CompileOptions off;
  off.tma = false;
  CHECK(codegen::compile(*k, off).stats.tma_stores == 0);
  ir::Kernel big = desc_scale(128, 128, DType::f32);
  const ir::Op* st = nullptr;
  ir::walk(big->body, [&](ir::Op& op) {
    if (op.kind == ir::OpKind::DescStore) st = &op;
  });
  REQUIRE(st);
  CHECK_THAT(codegen::tma_store_unfit(*big, *st, codegen::CompileOptions{}), Catch::Contains("takes 65536 bytes to stage"));
}
